"""One consumer, held: what a group member (`_group.py`) and a reader outside any group
(`_log_reader.py`) share. The consumer is made at `start`, inside the running loop (the client
library binds a consumer to the loop it is made in), stopped at `stop` or the end of
`async with`, and using it before raises the holder's own "not started" error.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Self

from rolltape.schemas.clients._errors import KafkaClientError, kafka_errors

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer

    from rolltape.schemas.clients._connection import KafkaConnection


class HeldConsumer:
    """The base of `GroupMember` and `LogReader`."""

    not_started: ClassVar[type[KafkaClientError]] = KafkaClientError
    """Raised when the consumer is used before `start`."""

    def __init__(self, connection: KafkaConnection, settings: dict[str, Any]) -> None:
        self._connection = connection
        self._settings = settings
        self._consumer_instance: AIOKafkaConsumer | None = None

    def _starting(self) -> str:
        """What `start` is doing, for its errors."""
        return f"connecting to {self._connection}"

    async def _started(self, consumer: AIOKafkaConsumer) -> None:
        """Called once the consumer is started, before `start` returns."""

    @property
    def _consumer(self) -> AIOKafkaConsumer:
        if self._consumer_instance is None:
            raise self.not_started(f"{type(self).__name__} used before start(): use `async with`")
        return self._consumer_instance

    async def start(self) -> Self:
        with kafka_errors(self._starting()):
            consumer = self._connection.consumer(**self._settings)
            try:
                await consumer.start()
                # Held before `_started`: a group may assign partitions as soon as the member
                # subscribes, and what it is told then (seek to a stored position) uses it.
                self._consumer_instance = consumer
                await self._started(consumer)
            except BaseException:
                self._consumer_instance = None
                # A consumer that failed to start still holds connections: stop it too.
                with contextlib.suppress(Exception):
                    await consumer.stop()
                raise
        return self

    async def stop(self) -> None:
        """Stop the consumer (a group member leaves its group: its partitions go to the
        others at once)."""
        if self._consumer_instance is None:
            return
        consumer, self._consumer_instance = self._consumer_instance, None
        # One turn of the loop first: aiokafka's coordinator starts a task when the consumer
        # starts and cancels it on stop; cancelled before it ever ran, the task's
        # CancelledError escapes `stop` (aiokafka 0.12, `_reset_committed_routine`), so a
        # consumer stopped right after it started (a read with nothing to read) would fail.
        await asyncio.sleep(0)
        with kafka_errors(f"closing a consumer of {self._connection}"):
            await consumer.stop()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()
