"""Test-wide settings: hypothesis without per-example deadlines (shared, noisy machines make
timing a source of flakes, and timing is the benchmarks' job, not the tests')."""

from hypothesis import settings

settings.register_profile("rolltape", deadline=None, print_blob=True)
settings.load_profile("rolltape")

# The PostgreSQL server the read model's store is tested against (started on first use only).
pytest_plugins = ["tests.support.postgres"]
