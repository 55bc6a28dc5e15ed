"""Kafka client errors are translated once, at the client boundary: every class aiokafka defines
has a kind, the message says what was being done and what to do, and the cause is kept."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import aiokafka.errors
import pytest

from rolltape.schemas import SchemaError
from rolltape.schemas.clients import (
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaClientError,
    KafkaConnection,
    KafkaRecordError,
    KafkaTopicError,
    KafkaUnavailableError,
    kafka_errors,
)
from rolltape.schemas.clients._errors import _KINDS, kind_of

AIOKAFKA_ERRORS = sorted(
    (
        cls
        for cls in vars(aiokafka.errors).values()
        if inspect.isclass(cls)
        and issubclass(cls, BaseException)
        and cls.__module__.startswith("aiokafka")
    ),
    key=lambda cls: cls.__name__,
)


def test_every_error_class_aiokafka_defines_is_classified_by_name() -> None:
    """An aiokafka upgrade that adds an error fails here until someone decides its kind."""
    unclassified = [cls.__name__ for cls in AIOKAFKA_ERRORS if cls.__name__ not in _KINDS]
    assert unclassified == []
    assert len(AIOKAFKA_ERRORS) > 90  # the scan found aiokafka's errors, not an empty module


@pytest.mark.parametrize("cls", AIOKAFKA_ERRORS, ids=lambda cls: cls.__name__)
def test_every_client_error_is_mapped_to_a_kind_that_says_what_to_do(cls: type) -> None:
    try:
        original = cls("the client's words")
    except TypeError:  # a few take no message
        original = cls()
    with pytest.raises(KafkaClientError) as raised, kafka_errors("reading the events topic"):
        raise original
    error = raised.value
    assert isinstance(error, kind_of(original)) and not isinstance(error, SchemaError)
    assert error.__cause__ is original
    assert str(error).startswith("reading the events topic: ") and type(error).advice in str(error)
    if "Authorization" in cls.__name__:
        assert isinstance(error, KafkaAuthorizationError)
    elif "Sasl" in cls.__name__ or cls.__name__.startswith("Authentication"):
        assert isinstance(error, KafkaAuthenticationError)


@pytest.mark.parametrize(
    ("raised", "kind"),
    [
        (aiokafka.errors.KafkaConnectionError("no route"), KafkaUnavailableError),
        (aiokafka.errors.NodeNotReadyError(), KafkaUnavailableError),
        (ConnectionRefusedError(111, "refused"), KafkaUnavailableError),
        (TimeoutError(), KafkaUnavailableError),
        (aiokafka.errors.TopicAuthorizationFailedError(), KafkaAuthorizationError),
        (aiokafka.errors.UnknownTopicOrPartitionError(), KafkaTopicError),
        (aiokafka.errors.MessageSizeTooLargeError(), KafkaRecordError),
    ],
)
def test_the_kinds_a_caller_acts_on(raised: Exception, kind: type[KafkaClientError]) -> None:
    with pytest.raises(kind), kafka_errors("writing verdicts"):
        raise raised


def test_other_errors_pass_through_unchanged() -> None:
    with pytest.raises(ValueError, match="ours"), kafka_errors("anything"):
        raise ValueError("ours")


class _Client:
    """A stand-in with a client's lifecycle: what `started` does with start and stop is the
    behaviour under test, not Kafka (the integration tests open real clients with it)."""

    def __init__(self, fail_start: BaseException | None = None) -> None:
        self.fail_start = fail_start
        self.calls: list[str] = []

    async def start(self) -> None:
        self.calls.append("start")
        if self.fail_start is not None:
            raise self.fail_start

    async def stop(self) -> None:
        self.calls.append("stop")


def _run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_started__translates_what_the_client_raises_in_the_block_and_stops_it() -> None:
    connection = KafkaConnection.plaintext("127.0.0.1:1")
    client = _Client()

    async def use() -> None:
        async with connection.started(client, "reading the events topic") as started:
            assert started is client and client.calls == ["start"]
            raise aiokafka.errors.UnknownTopicOrPartitionError()

    with pytest.raises(KafkaTopicError, match=r"^reading the events topic: ") as raised:
        _run(use())
    assert client.calls == ["start", "stop"]
    assert isinstance(raised.value.__cause__, aiokafka.errors.UnknownTopicOrPartitionError)


def test_started__a_failed_start_is_translated_and_the_client_stopped() -> None:
    connection = KafkaConnection.plaintext("127.0.0.1:1")
    refused = _Client(fail_start=aiokafka.errors.KafkaConnectionError("refused"))

    async def start_only(client: _Client) -> None:
        async with connection.started(client, "starting"):
            pass

    with pytest.raises(KafkaUnavailableError, match=r"^starting: "):
        _run(start_only(refused))
    assert refused.calls == ["start", "stop"]  # a client that failed to start is stopped too

    async def ours() -> None:
        async with connection.started(_Client(), "anything"):
            raise ValueError("ours")

    with pytest.raises(ValueError, match="ours"):
        _run(ours())


def test_chain_producer__refuses_to_give_up_idempotence_or_acks_all() -> None:
    connection = KafkaConnection.plaintext("127.0.0.1:1")
    for fixed in ({"acks": 1}, {"enable_idempotence": False}):
        with pytest.raises(ValueError, match="idempotent with acks=all"):
            connection.chain_producer(**fixed)


def test_started__a_timeout_of_the_callers_own_code_in_the_block_is_not_an_outage() -> None:
    connection = KafkaConnection.plaintext("127.0.0.1:1")
    client = _Client()

    async def use() -> None:
        async with connection.started(client, "reading the jobs topic"):
            raise TimeoutError("the book took over 30 s to read")

    with pytest.raises(TimeoutError, match="over 30 s"):
        _run(use())
    assert client.calls == ["start", "stop"]
