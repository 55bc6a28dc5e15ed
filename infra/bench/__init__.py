"""Benchmarks behind `rolltape bench`: scripts that print figures, each with a baseline measured
in the same run."""
