"""Streams that hand every chunk to the caller unchanged and record the reply when they end.

The reply is recorded when the stream is exhausted; a stream the caller leaves early (closes it
or exits its `with` block) is recorded with what arrived and no finish reason; a stream that
breaks (the server hung up) is recorded as a `model_error` with the partial content, and the
exception reaches the caller unchanged. Everything else is the openai stream's own.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Protocol


class Finisher(Protocol):
    """What a captured stream reports to. `complete` can come twice (at exhaustion, then at
    close) and after `fail`, so an implementation records once and ignores the rest; it must
    not raise, since the caller's chunks and errors have to pass through unchanged."""

    def chunk(self, chunk: Any) -> None: ...
    def complete(self) -> None: ...
    def fail(self, exc: BaseException) -> None: ...


class CapturedStream:
    """An `openai.Stream` of chat completion chunks, recorded."""

    def __init__(self, stream: Any, finisher: Finisher) -> None:
        self._stream = stream
        self._iterator = iter(stream)
        self._finisher = finisher

    def __iter__(self) -> CapturedStream:
        return self

    def __next__(self) -> Any:
        try:
            chunk = next(self._iterator)
        except StopIteration:
            self._finisher.complete()
            raise
        except Exception as exc:
            self._finisher.fail(exc)
            raise
        self._finisher.chunk(chunk)
        return chunk

    def close(self) -> None:
        self._finisher.complete()
        self._stream.close()

    def __enter__(self) -> CapturedStream:
        return self

    def __exit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class AsyncCapturedStream:
    """An `openai.AsyncStream` of chat completion chunks, recorded."""

    def __init__(self, stream: Any, finisher: Finisher) -> None:
        self._stream = stream
        self._iterator = stream.__aiter__()
        self._finisher = finisher

    def __aiter__(self) -> AsyncCapturedStream:
        return self

    async def __anext__(self) -> Any:
        try:
            chunk = await self._iterator.__anext__()
        except StopAsyncIteration:
            self._finisher.complete()
            raise
        except Exception as exc:
            self._finisher.fail(exc)
            raise
        self._finisher.chunk(chunk)
        return chunk

    async def close(self) -> None:
        self._finisher.complete()
        await self._stream.close()

    async def __aenter__(self) -> AsyncCapturedStream:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
