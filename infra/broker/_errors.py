"""Errors of broker provisioning; each message says what to do next."""

from __future__ import annotations

from rolltape.infra._errors import InfraError


class BrokerError(InfraError, RuntimeError):
    """Root of broker provisioning errors."""


class BrokerUnavailable(BrokerError):
    """No broker answers at the configured or managed address."""


class BrokerStartError(BrokerError):
    """The managed broker could not be fetched, formatted or started."""
