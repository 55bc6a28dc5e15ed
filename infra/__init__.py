"""rolltape.infra: settings, broker provisioning, topic admin, read-back and the CLI.

The one package allowed to depend on all others: it wires them together.
"""

from __future__ import annotations

from typing import Any

from rolltape.infra.settings import Settings
from rolltape.producers import Recorder


def open_recorder(settings: Settings | None = None, **overrides: Any) -> Recorder:
    """A Recorder configured from ROLLTAPE_* settings: the explicit bootstrap, else the running
    managed broker (else spool-only until one is configured); `overrides` win."""
    from rolltape.infra.broker import current_bootstrap

    settings = settings or Settings()
    kwargs: dict[str, Any] = {
        "topic_prefix": settings.topic_prefix,
        "spool_dir": settings.resolved_spool_dir(),
        "spool_max_bytes": settings.spool_max_bytes,
        "principal": settings.principal,
    }
    bootstrap = overrides.pop("bootstrap", None) or current_bootstrap(settings)
    kwargs.update(overrides)
    return Recorder(bootstrap, **kwargs)


def open_monitor_recorder(settings: Settings | None = None, **overrides: Any) -> Recorder:
    """The training monitor's own recorder: the monitor principal (ROLLTAPE_MONITOR_PRINCIPAL)
    and a spool folder of its own, so its records never travel under the agent's identity."""
    settings = settings or Settings()
    kwargs: dict[str, Any] = {
        "principal": settings.monitor_principal,
        "spool_dir": settings.resolved_spool_dir() / "monitor",
    }
    kwargs.update(overrides)
    return open_recorder(settings, **kwargs)


__all__ = ["Settings", "open_monitor_recorder", "open_recorder"]
