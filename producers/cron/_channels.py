"""Delivery channels: where a finished run's result goes. Pluggable by scheme.

A channel is named by a spec `scheme:target`. Shipped: `file:PATH` appends one JSON line per
run to PATH, `webhook:URL` (or a bare `http(s)://` URL) POSTs the same JSON. Register others
with `register_channel`. A channel that fails does not fail the run: the run's record says
`delivery: failed: why` and the failure is listed by `rolltape cron failures`.
"""

from __future__ import annotations

import asyncio
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Protocol

from pydantic import BaseModel, ConfigDict

from rolltape.producers._errors import ChannelError, ProducerError
from rolltape.schemas import RunStatus, canonical_bytes
from rolltape.schemas.plugins import Registry, UnknownPluginError


class Delivery(BaseModel):
    """What a channel receives when a run ends."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str
    run_id: str
    attempt: int
    status: RunStatus
    reason: str | None
    output: str
    session_id: str
    due_ns: int
    ended_ns: int

    def to_json(self) -> bytes:
        return canonical_bytes(self.model_dump(mode="json"))


class DeliveryError(ProducerError, RuntimeError):
    """A channel could not deliver; the message says why."""


class Channel(Protocol):
    """Where a job's final runs go. `deliver` is awaited once per final run, on the scheduler's
    loop (so blocking work belongs in a thread, as the shipped channels do), and not retried.
    Raise DeliveryError with the reason: the run records it; other exceptions are not caught."""

    async def deliver(self, delivery: Delivery) -> None: ...


class FileChannel:
    """Appends one canonical JSON line per delivery (the folder is created)."""

    _locks: ClassVar[dict[Path, threading.Lock]] = {}

    def __init__(self, path: str) -> None:
        if not path:
            raise ChannelError("file channel needs a path: file:PATH")
        self.path = Path(path).expanduser()

    def _append(self, line: bytes) -> None:
        lock = self._locks.setdefault(self.path, threading.Lock())
        with lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab") as f:
                f.write(line + b"\n")

    async def deliver(self, delivery: Delivery) -> None:
        try:
            await asyncio.to_thread(self._append, delivery.to_json())
        except OSError as exc:
            raise DeliveryError(f"cannot append to {self.path}: {exc}") from exc


class WebhookChannel:
    """POSTs the delivery as JSON; any status but 2xx is a failed delivery."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ChannelError(f"webhook channel needs an http(s) URL, not {url!r}")
        self.url = url
        self.timeout_s = timeout_s

    def _post(self, body: bytes) -> None:
        request = urllib.request.Request(
            self.url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:200].decode(errors="replace")
            raise DeliveryError(f"{self.url} answered HTTP {exc.code}: {detail}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise DeliveryError(f"cannot POST to {self.url}: {exc}") from exc

    async def deliver(self, delivery: Delivery) -> None:
        await asyncio.to_thread(self._post, delivery.to_json())


ChannelFactory = Callable[[str], Channel]
"""Builds a channel from the target of a `scheme:target` spec (a channel class is one)."""

_CHANNELS = Registry[ChannelFactory]("delivery channel")
_CHANNELS.register("file", FileChannel)
_CHANNELS.register("webhook", WebhookChannel)


def register_channel(scheme: str, factory: ChannelFactory, *, replace: bool = False) -> None:
    """Make `scheme:target` specs open `factory(target)` (in a module named by plugins); a
    scheme that is taken is refused (`DuplicatePluginError`) unless `replace`."""
    _CHANNELS.register(scheme, factory, replace=replace)


def open_channel(spec: str) -> Channel:
    """The channel a spec names; `UnknownPluginError` (a ValueError) listing the known schemes
    when it names none, `ChannelError` when the target does not suit the channel."""
    if spec.startswith(("http://", "https://")):
        return WebhookChannel(spec)
    scheme, sep, target = spec.partition(":")
    if not sep or scheme not in _CHANNELS:
        known = ", ".join(f"{s}:..." for s in _CHANNELS)
        raise UnknownPluginError(f"unknown delivery channel {spec!r}: use one of {known}")
    return _CHANNELS[scheme](target)
