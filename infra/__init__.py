"""rolltape.infra: settings, broker provisioning, topic admin, read-back and the CLI.

The one package allowed to depend on all others: it wires them together.
"""

from __future__ import annotations

from typing import Any

from rolltape.infra._errors import InfraError
from rolltape.infra.settings import Settings
from rolltape.producers import Recorder
from rolltape.producers.privacy import Redaction, RedactionError
from rolltape.schemas import Role


def open_recorder(
    settings: Settings | None = None, *, role: Role = Role.AGENT, **overrides: Any
) -> Recorder:
    """A Recorder configured from ROLLTAPE_* settings: the explicit bootstrap, else the running
    managed broker (else spool-only until one is configured), authenticated as the principal of
    `role`; `overrides` (Recorder's keyword arguments, `connection` too) win."""
    from rolltape.infra.broker import current_connection
    from rolltape.infra.index import IndexHeadLocator, store_url
    from rolltape.infra.keys import key_encryption_key

    settings = settings or Settings()
    kwargs: dict[str, Any] = {
        "topic_prefix": settings.topic_prefix,
        "spool_dir": settings.resolved_spool_dir(),
        "spool_max_bytes": settings.spool_max_bytes,
        "senders": settings.senders,
    }
    if settings.redaction_policy is not None:
        kwargs["redaction"] = redaction_from(settings)
    kwargs["kek"] = lambda: key_encryption_key(settings)  # read at each subject session
    # A resume reads the session's partition from where the read model says it starts.
    kwargs["head_locator"] = IndexHeadLocator(store_url(settings), settings.topic_prefix)
    connection = overrides.pop("connection", None) or current_connection(settings, role)
    if connection is None or connection.principal is None:
        # Unauthenticated: the envelope names the configured principal.
        kwargs["principal"] = (
            settings.monitor_principal if role == Role.MONITOR else settings.principal
        )
    kwargs.update(overrides)
    return Recorder(connection, **kwargs)


def redaction_from(settings: Settings) -> Redaction:
    """The redaction policy of ROLLTAPE_REDACTION_POLICY, its hashes keyed by the project's
    secret (read, or created, only when a rule hashes)."""
    from rolltape.infra.keys import redaction_secret

    path = settings.redaction_policy
    assert path is not None
    try:
        return Redaction.from_file(path, secret=lambda: redaction_secret(settings))
    except RedactionError as exc:
        raise InfraError(f"{exc} (ROLLTAPE_REDACTION_POLICY)") from exc


def open_monitor_recorder(settings: Settings | None = None, **overrides: Any) -> Recorder:
    """The training monitor's own recorder: the monitor principal and a spool folder of its own,
    so its records never travel under the agent's identity. One in-thread sender whatever
    ROLLTAPE_SENDERS says: a monitor records a few events per epoch."""
    settings = settings or Settings()
    kwargs: dict[str, Any] = {"spool_dir": settings.resolved_spool_dir() / "monitor", "senders": 1}
    kwargs.update(overrides)
    return open_recorder(settings, role=Role.MONITOR, **kwargs)


__all__ = ["InfraError", "Settings", "open_monitor_recorder", "open_recorder"]
