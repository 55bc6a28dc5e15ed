"""Kafka client errors are translated once, at the client boundary: every class aiokafka defines
has a kind, the message says what was being done and what to do, and the cause is kept."""

from __future__ import annotations

import inspect

import aiokafka.errors
import pytest

from rolltape.schemas import SchemaError
from rolltape.schemas.clients import (
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaClientError,
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
