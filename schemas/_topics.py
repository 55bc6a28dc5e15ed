"""Streams and the Kafka topics that carry them.

Topics are trust domains (docs/contracts.md, trust domains): split by who may write them, each
with its own hash chain per session. The topic name is `<prefix>.<stream>.v<major>`; the prefix is
a setting so that test runs and tenants can share one cluster without seeing each other's records.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from enum import StrEnum
from typing import Final

from pydantic import BaseModel, ConfigDict

from rolltape.schemas._review import HUMAN_JUDGE_VERSION

TOPIC_VERSION = 1
DEFAULT_PREFIX = "rolltape"
DEFAULT_PARTITIONS = 6
"""Partitions per topic unless settings say otherwise; sessions spread across them by key."""


class Stream(StrEnum):
    """A chain family; every envelope names the stream it belongs to."""

    EVENTS = "events"
    METRICS = "metrics"
    RULES = "rules"
    VERDICTS = "verdicts"
    FILTERED = "filtered"
    TRAJECTORIES = "trajectories"
    JOBS = "jobs"
    DEADLETTER = "deadletter"
    BLOBS = "blobs"
    KEYS = "keys"
    ERASURES = "erasures"


#: Streams whose records are hash-chained per session (the dead-letter topic carries foreign bytes,
#: trajectories are a compacted projection, jobs a compacted table whose keys keep their latest
#: revision: schemas._cron; blobs are content-addressed, their hashes on the chains: schemas._blobs;
#: keys are a compacted table of wrapped data keys: schemas._data_keys).
CHAINED_STREAMS: tuple[Stream, ...] = (
    Stream.EVENTS,
    Stream.METRICS,
    Stream.RULES,
    Stream.VERDICTS,
    Stream.FILTERED,
    Stream.ERASURES,
)


#: raw stream -> the event types that may appear on it; a record of any other type (or on any
#: other stream) is refused by the processors as `wrong_stream`. Keyed by the stream's string
#: value, not the enum member: the worker looks an envelope's `stream` up here on every event,
#: and `Stream.X.value` would cost an attribute lookup each time.
STREAM_EVENT_TYPES: Final[Mapping[str, frozenset[str]]] = {
    Stream.EVENTS.value: frozenset(
        {
            "session_started",
            "turn",
            "tool_call",
            "tool_result",
            "model_error",
            "tool_parse_error",
            "decision",
            "reward",
            "feedback",
            "session_ended",
            "session_resumed",
            "evaluation",
            "ruleset_evaluation",
            "world_snapshot",
            "verdict",
            "prompt_version",
            "prompt_promotion",
            "prompt_decision",
            "training_input",
            "trainer_log",
            "model_checkpoint",
        }
    ),
    Stream.METRICS.value: frozenset(
        {"metric", "model_spec", "live_check", "session_ended", "session_resumed"}
    ),
    # The reviewers' chains on the verdicts topic: the worker audits and checkpoints them.
    f"{Stream.VERDICTS.value}@{HUMAN_JUDGE_VERSION}": frozenset(
        {"human_verdict", "human_preference"}
    ),
}

HUMAN_CHAIN: Final = f"{Stream.VERDICTS.value}@{HUMAN_JUDGE_VERSION}"
"""The chain human verdicts extend on each reviewed session (schemas._review): written by
reviewers, audited and checkpointed by the worker like a raw chain."""


class Role(StrEnum):
    """Who a principal is (docs/contracts.md, trust domains): it decides which topics it may write
    and read. A principal has exactly one role; several principals may share one."""

    ADMIN = "admin"
    AGENT = "agent"
    MONITOR = "monitor"
    PROCESSOR = "processor"
    JUDGE = "judge"
    PROJECTOR = "projector"
    READER = "reader"
    SCHEDULER = "scheduler"
    REVIEWER = "reviewer"
    """A person's login (the console's review pages): writes human verdicts on the
    verdicts topic, under the reserved judge version `human` (schemas._review)."""
    TRAINER = "trainer"
    """A training run's process: records its lineage (what it trained on, the checkpoints it
    wrote: schemas._lineage) as a training session on the events topic."""


class TopicSpec(BaseModel):
    """What `broker up` provisions for one stream."""

    model_config = ConfigDict(frozen=True)

    stream: Stream
    writers: tuple[Role, ...]
    """The roles allowed to append (enforced with ACLs where the cluster has them; admin may
    always). The events topic has two: agents, and the judge recording its own conversations
    (an LLM judge is an agent whose sessions are training data too), and trainers recording
    their runs' lineage."""
    configs: dict[str, str]


_RAW = {
    "message.timestamp.type": "LogAppendTime",
    "cleanup.policy": "delete",
    "retention.ms": "-1",
    "retention.bytes": "-1",
}

_GONE_WITHIN_HOURS = {
    "message.timestamp.type": "LogAppendTime",
    "cleanup.policy": "compact",
    "segment.ms": str(3_600_000),
    "max.compaction.lag.ms": str(3_600_000),
    "delete.retention.ms": str(86_400_000),
}
"""A compacted table whose tombstoned records must leave the disks soon (erasure): a segment
rolls within `segment.ms` and is compacted within `max.compaction.lag.ms` (while the broker's
log cleaner runs), so a record is gone within about two hours of its tombstone; tombstones stay
a day (`delete.retention.ms`) so that every reader sees them."""

TOPIC_SPECS: tuple[TopicSpec, ...] = (
    TopicSpec(stream=Stream.EVENTS, writers=(Role.AGENT, Role.JUDGE, Role.TRAINER), configs=_RAW),
    TopicSpec(stream=Stream.METRICS, writers=(Role.MONITOR,), configs=_RAW),
    TopicSpec(stream=Stream.RULES, writers=(Role.PROCESSOR,), configs=_RAW),
    # Judges write their verdicts and checkpoints; reviewers their human verdicts, on chains of
    # their own (`verdicts@human`, schemas._review).
    TopicSpec(stream=Stream.VERDICTS, writers=(Role.JUDGE, Role.REVIEWER), configs=_RAW),
    TopicSpec(stream=Stream.FILTERED, writers=(Role.PROCESSOR,), configs=_RAW),
    TopicSpec(
        # A table of folded trajectories, content opened (a subject session's too). The
        # projector tombstones an erased session's trajectory: gone within about two hours.
        stream=Stream.TRAJECTORIES,
        writers=(Role.PROJECTOR,),
        configs=_GONE_WITHIN_HOURS,
    ),
    TopicSpec(
        # Cron jobs and their runs (schemas._cron): compaction keeps each key's latest state.
        stream=Stream.JOBS,
        writers=(Role.SCHEDULER,),
        configs={"message.timestamp.type": "LogAppendTime", "cleanup.policy": "compact"},
    ),
    TopicSpec(
        stream=Stream.DEADLETTER,
        writers=(Role.PROCESSOR,),
        # Carries the original bytes plus a reason, so it needs headroom over a normal record.
        configs={**_RAW, "max.message.bytes": str(4 * 1024 * 1024)},
    ),
    TopicSpec(
        # The contents of recorded worlds (schemas._blobs), keyed by sha256 and chunk: compaction
        # keeps one copy of each, however many rollouts wrote it; never deleted by age, since
        # a replay restores worlds from it years later. Judges read it (tool judges re-run in a
        # restored world).
        stream=Stream.BLOBS,
        writers=(Role.AGENT,),
        configs={
            "message.timestamp.type": "LogAppendTime",
            "cleanup.policy": "compact",
            "retention.ms": "-1",
            "max.message.bytes": str(1024 * 1024),
        },
    ),
    TopicSpec(
        # Each subject session's data key, wrapped by the key-encryption key (schemas._data_keys),
        # keyed `<session id>/<key id>`; written by recorders and by the judge (its conversations
        # about subject sessions name the same subject). Erasure writes a tombstone: the wrapped key is gone
        # within about two hours (a small topic, compacted at a low dirty ratio).
        stream=Stream.KEYS,
        writers=(Role.AGENT, Role.JUDGE),
        configs={**_GONE_WITHIN_HOURS, "min.cleanable.dirty.ratio": "0.01"},
    ),
    TopicSpec(
        # One chain ("erasures") of signed erasure records (schemas._erasure), kept forever.
        # Written by the admin alone (a custodian's `rolltape privacy erase`), read by every reader.
        stream=Stream.ERASURES,
        writers=(),
        configs=_RAW,
    ),
)


def topic_name(stream: Stream | str, prefix: str = DEFAULT_PREFIX) -> str:
    """The Kafka topic of a stream, e.g. `rolltape.events.v1`."""
    return f"{prefix}.{Stream(stream).value}.v{TOPIC_VERSION}"


@functools.lru_cache(maxsize=1024)
def stream_of_topic(topic: str, prefix: str = DEFAULT_PREFIX) -> Stream | None:
    """Inverse of `topic_name`; None for a topic that is not ours. (Cached: readers ask it of
    every record they read.)"""
    for stream in Stream:
        if topic_name(stream, prefix) == topic:
            return stream
    return None


#: The judge version the live worker writes under. Its derived chains carry the plain stream
#: names (`verdicts`), so records written before judge versions existed belong to it.
LIVE_JUDGE_VERSION = "live"
JUDGE_VERSION_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,39}$"
#: Streams a judge version writes; each version has its own chain per session on the same topic.
DERIVED_STREAMS: tuple[Stream, ...] = (Stream.RULES, Stream.VERDICTS, Stream.FILTERED)


def versioned_stream(stream: Stream | str, judge_version: str = LIVE_JUDGE_VERSION) -> str:
    """The chain name a judge version writes a derived stream under: `verdicts` for the live
    version, `verdicts@V` for a replayed version V (same topic, same trust domain, own chain)."""
    name = Stream(stream).value
    return name if judge_version == LIVE_JUDGE_VERSION else f"{name}@{judge_version}"


@functools.lru_cache(maxsize=1024)
def split_stream(name: str) -> tuple[Stream, str]:
    """Inverse of `versioned_stream`: (stream, judge version); ValueError for unknown names.
    (Cached: writers ask it of every output.)"""
    base, sep, version = name.partition("@")
    stream = Stream(base)
    if not sep:
        return stream, LIVE_JUDGE_VERSION
    if stream not in DERIVED_STREAMS or not version or version == LIVE_JUDGE_VERSION:
        raise ValueError(f"{name!r} is not a stream name")
    return stream, version
