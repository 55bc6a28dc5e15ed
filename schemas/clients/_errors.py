"""Kafka client errors, translated once at the client boundary into ours.

aiokafka raises some 100 exception classes, one per broker error code and client condition.
Callers should not need to know them: they need to know whether to wait (the cluster is away),
to fix credentials, to ask for rights, to create a topic, or to shrink a record. Every place that
talks to Kafka wraps its calls in `kafka_errors("what it was doing")`, which raises one of:

    KafkaClientError            the cluster could not do what was asked (says what, and why)
    ├── KafkaUnavailableError   no broker answered in time, or the one that should is moving:
    │                           retrying later can succeed
    ├── KafkaAuthenticationError  the broker refused who we are (SASL user, password, TLS)
    ├── KafkaAuthorizationError   who we are may not do this (ACLs: trust domains)
    ├── KafkaTopicError         a topic or partition is missing, invalid or already there
    ├── KafkaRecordError        the broker refused a record (too large, corrupt, bad time)
    └── KafkaRequestError       anything else the broker or the client reported

`KafkaClientError` is a root of its own, not a `SchemaError`: a handler of bad data must never
catch "the broker is down" by accident, nor the other way round.

The original exception is kept as `__cause__`. `_KINDS` classifies every class aiokafka.errors
defines, by name, so an aiokafka upgrade that adds one fails a test until it is classified (a
subclass of a classified class inherits its kind meanwhile).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rolltape.schemas._errors import RolltapeError


class KafkaClientError(RolltapeError):
    """The cluster could not do what was asked; the message says what was being done, what
    the client reported and what to do."""

    advice = "see the cause below"


class KafkaUnavailableError(KafkaClientError):
    """No broker answered in time, or the leader or coordinator asked is moving: retrying later
    can succeed, so long-running callers wait and retry rather than stop."""

    advice = (
        "is the broker running and ROLLTAPE_BOOTSTRAP right? (`rolltape broker up` starts a "
        "local one); a leader or coordinator that is moving answers again in a moment"
    )


class KafkaAuthenticationError(KafkaClientError):
    """The broker refused who we are (SASL user or password, TLS): retrying will not help."""

    advice = "check ROLLTAPE_SASL_USERNAME / ROLLTAPE_SASL_PASSWORD and the TLS settings"


class KafkaAuthorizationError(KafkaClientError):
    """Who we are may not do this: an ACL of the trust domains refused it (a principal writing
    another domain's topic, a reader joining a group it may not)."""

    advice = (
        "this principal's ACLs do not allow it: each trust domain's topics are written by its "
        "own principal (`rolltape principal list` shows who may do what)"
    )


class KafkaTopicError(KafkaClientError):
    """A topic or partition is missing, invalid or already there (usually: topics were never
    created for this prefix)."""

    advice = "are the topics created for this prefix? (`rolltape topics create`)"


class KafkaRecordError(KafkaClientError):
    """The broker refused one record (too large for the topic, corrupt, a bad timestamp): the
    others can go on; the caller decides what becomes of this one."""

    advice = "the record must be smaller, or well formed, for the broker to take it"


class KafkaRequestError(KafkaClientError):
    """Anything else the broker or the client reported about the request as made."""

    advice = "the broker or client refused the request as made"


_UNAVAILABLE = (
    "BrokerNotAvailableError",
    "GroupCoordinatorNotAvailableError",
    "GroupLoadInProgressError",
    "KafkaConnectionError",
    "KafkaStorageError",
    "KafkaTimeoutError",
    "KafkaUnavailableError",
    "LeaderNotAvailableError",
    "ListenerNotFound",
    "MetadataEmptyBrokerList",
    "NoBrokersAvailable",
    "NodeNotReadyError",
    "NotControllerError",
    "NotCoordinatorForGroupError",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotLeaderForPartitionError",
    "RebalanceInProgressError",
    "ReplicaNotAvailableError",
    "RequestTimedOutError",
    "StaleControllerEpochError",
    "StaleLeaderEpochCodeError",
    "StaleMetadata",
    "TooManyInFlightRequests",
)
_AUTHENTICATION = (
    "AuthenticationFailedError",
    "AuthenticationMethodNotSupported",
    "DelegationTokenAuthDisabled",
    "DelegationTokenExpired",
    "DelegationTokenNotFound",
    "DelegationTokenOwnerMismatch",
    "DelegationTokenRequestNotAllowed",
    "IllegalSaslStateError",
    "SaslAuthenticationFailed",
    "SecurityDisabled",
    "UnsupportedSaslMechanismError",
)
_AUTHORIZATION = (
    "ClusterAuthorizationFailedError",
    "DelegationTokenAuthorizationFailed",
    "GroupAuthorizationFailedError",
    "TopicAuthorizationFailedError",
    "TransactionalIdAuthorizationFailed",
)
_TOPIC = (
    "InvalidPartitionsError",
    "InvalidReplicationAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidTopicError",
    "LogDirNotFound",
    "ReassignmentInProgress",
    "TopicAlreadyExistsError",
    "UnknownTopicOrPartitionError",
)
_RECORD = (
    "CorruptRecordException",
    "InvalidTimestampError",
    "MessageSizeTooLargeError",
    "OffsetMetadataTooLargeError",
    "RecordListTooLargeError",
    "RecordTooLargeError",
    "UnsupportedCodecError",
    "UnsupportedForMessageFormatError",
)
_REQUEST = (
    "BrokerResponseError",
    "Cancelled",
    "CommitFailedError",
    "ConcurrentTransactions",
    "ConsumerStoppedError",
    "CorrelationIdError",
    "DuplicateSequenceNumber",
    "FetchSessionIdNotFound",
    "GroupIdNotFound",
    "IllegalArgumentError",
    "IllegalGenerationError",
    "IllegalOperation",
    "IllegalStateError",
    "IncompatibleBrokerVersion",
    "InconsistentGroupProtocolError",
    "InvalidCommitOffsetSizeError",
    "InvalidConfigurationError",
    "InvalidFetchRequestError",
    "InvalidFetchSessionEpoch",
    "InvalidGroupIdError",
    "InvalidPrincipalType",
    "InvalidProducerEpoch",
    "InvalidProducerIdMapping",
    "InvalidRequestError",
    "InvalidRequiredAcksError",
    "InvalidSessionTimeoutError",
    "InvalidTransactionTimeout",
    "InvalidTxnState",
    "KafkaConfigurationError",
    "KafkaError",
    "KafkaProtocolError",
    "MemberIdRequired",
    "NoError",
    "NoOffsetForPartitionError",
    "NonEmptyGroup",
    "OffsetOutOfRangeError",
    "OperationNotAttempted",
    "OutOfOrderSequenceNumber",
    "PolicyViolationError",
    "ProducerClosed",
    "ProducerFenced",
    "QuotaViolationError",
    "TransactionCoordinatorFenced",
    "UnknownError",
    "UnknownMemberIdError",
    "UnknownProducerId",
    "UnrecognizedBrokerVersion",
    "UnsupportedVersionError",
)
_KINDS: dict[str, type[KafkaClientError]] = {
    **dict.fromkeys(_UNAVAILABLE, KafkaUnavailableError),
    **dict.fromkeys(_AUTHENTICATION, KafkaAuthenticationError),
    **dict.fromkeys(_AUTHORIZATION, KafkaAuthorizationError),
    **dict.fromkeys(_TOPIC, KafkaTopicError),
    **dict.fromkeys(_RECORD, KafkaRecordError),
    **dict.fromkeys(_REQUEST, KafkaRequestError),
}
"""aiokafka.errors class name -> our kind; a test holds it to every class aiokafka defines."""


def raised_by_client_library(exc: BaseException) -> bool:
    """Raised by aiokafka itself (one of its errors, or one it raised from its own code)."""
    return type(exc).__module__.startswith("aiokafka")


def is_kafka_client_error(exc: BaseException) -> bool:
    """Raised by aiokafka (its errors module), or a connection the OS refused or timed out."""
    return type(exc).__module__.startswith("aiokafka") or isinstance(
        exc, ConnectionError | TimeoutError
    )


def kind_of(exc: BaseException) -> type[KafkaClientError]:
    """Our kind for an aiokafka exception: by its class, else by the nearest classified base."""
    for cls in type(exc).__mro__:
        if cls.__module__.startswith("aiokafka") and cls.__name__ in _KINDS:
            return _KINDS[cls.__name__]
    if isinstance(exc, ConnectionError | TimeoutError):
        return KafkaUnavailableError
    return KafkaRequestError


def not_authorized(exc: BaseException) -> bool:
    """Whether `exc` is the client library saying that who we are may not do this (an ACL
    refused it): not an outage, so a writer that retried would retry forever."""
    return is_kafka_client_error(exc) and kind_of(exc) is KafkaAuthorizationError


def translate_kafka_error(exc: BaseException, doing: str) -> KafkaClientError:
    """The error to raise instead of `exc`, which happened while `doing` (e.g. "reading the
    events topic"); the caller raises it `from exc`."""
    kind = kind_of(exc)
    name = type(exc).__name__
    try:
        text = str(exc)
    except Exception:  # aiokafka's abstract BrokerResponseError has no errno to show
        text = ""
    said = f"{name}: {text}" if text and name not in text else text or name
    return kind(f"{doing}: {said}; {kind.advice}")


@contextmanager
def kafka_errors(doing: str) -> Iterator[None]:
    """Translate the Kafka client errors raised inside the block (see the module docstring);
    anything else passes through unchanged."""
    try:
        yield
    except KafkaClientError:
        raise
    except Exception as exc:
        if not is_kafka_client_error(exc):
            raise
        raise translate_kafka_error(exc, doing) from exc
