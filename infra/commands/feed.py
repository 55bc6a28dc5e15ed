"""`rolltape serve feed` wiring: the live feed of judged trajectories into an Atropos API
server, a session acknowledged only once its group reached the server.

The pure parts (the feed's selection and buffering, the sink's grouping and scoring) are
rolltape.projections; this module connects them from settings and runs them until stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from rolltape.infra._errors import InfraError
from rolltape.infra.broker import require_connection
from rolltape.infra.kafka.keyring import keys_follower_if_any
from rolltape.infra.kafka.readback import read_records
from rolltape.infra.settings import Settings
from rolltape.projections import AtroposSink, AtroposSinkError, TrajectoryFeed
from rolltape.projections import Selection as Selection
from rolltape.projections.exporters import ChatTokenizer
from rolltape.schemas import LIVE_JUDGE_VERSION as LIVE_JUDGE_VERSION
from rolltape.schemas import Role, SchemaError, Stream, read_event


@dataclass(frozen=True)
class AtroposFeedOptions:
    """Where the groups go and how they are made (see `rolltape serve feed --help`)."""

    url: str
    group_size: int
    selection: Selection
    group_id: str
    tokenizer: ChatTokenizer | None = None
    score: str | None = None
    """A score source (`reward`, `reward:NAME`, `verdict:JUDGE:KEY`); None: the sessions'
    reward, when the log holds rewards of exactly one name (see `choose_score`)."""
    keep_equal_scores: bool = False
    batch_groups: int = 1
    env_name: str = "rolltape"
    max_token_length: int = 8192


class ScoreNotChosenError(InfraError, ValueError):
    """No score source was given and the log does not name exactly one reward."""


@dataclass(frozen=True)
class FeedProgress:
    """What a running feed has done so far (shown while it runs)."""

    sent_groups: int
    waiting_sessions: int
    waiting_groups: int
    skipped: dict[str, int]
    waiting_for: str | None = None
    """Why it waits for the server, when it does (no trainer registered)."""
    buffered_groups: int = 0
    """Of the groups sent, those the server holds back: short of the group size."""

    def line(self) -> str:
        left = ", ".join(f"{k} {n}" for k, n in sorted(self.skipped.items())) or "none"
        text = f"sent {self.sent_groups} group(s)"
        if self.buffered_groups:
            text += f" ({buffered(self.buffered_groups)})"
        text += (
            f"; {self.waiting_sessions} session(s) waiting in {self.waiting_groups} unfilled "
            f"group(s); left out: {left}"
        )
        return f"{text}; {self.waiting_for}" if self.waiting_for else text


def buffered(groups: int) -> str:
    """What the server does with groups it buffered, in words."""
    return (
        f"{groups} short of the group size, which the Atropos server holds until its buffered "
        "groups add up to the group size"
    )


async def reward_names(settings: Settings) -> Counter[str]:
    """The reward names the events topic holds, with how many rewards of each."""
    connection = require_connection(settings, Role.READER)
    names: Counter[str] = Counter()
    async for record in read_records(connection, [Stream.EVENTS], prefix=settings.topic_prefix):
        if b'"type":"reward"' not in record.value:
            continue
        with contextlib.suppress(SchemaError):
            event = read_event(record.value)
            if event.type == "reward":
                names[str(event.payload["name"])] += 1
    return names


def choose_score(names: Counter[str]) -> str:
    """The score of a feed started without `--score`: the sessions' reward when they carry one
    reward name; otherwise a `ScoreNotChosenError` that lists the names found."""
    if len(names) == 1:
        (name,) = names
        return "reward" if name == "reward" else f"reward:{name}"
    found = ", ".join(f"{n} ({c})" for n, c in names.most_common())
    what = f"the sessions' reward names are {found}" if found else "no session has a reward yet"
    raise ScoreNotChosenError(
        f"choose what scores the groups: {what}; pass --score reward:NAME (or "
        "verdict:JUDGE:KEY for a judge's score)"
    )


@dataclass(frozen=True)
class AtroposFeedResult:
    sent_groups: int
    skipped: dict[str, int]
    """Sessions left out, by reason."""
    score: str
    """The score source the groups carried."""
    buffered_groups: int = 0
    """Of the groups sent, those the server buffered (short of the group size)."""


async def feed_atropos(
    settings: Settings,
    options: AtroposFeedOptions,
    stop: asyncio.Event,
    *,
    on_started: Callable[[str], None] | None = None,
    on_progress: Callable[[FeedProgress], None] | None = None,
    progress_every_s: float = 10.0,
) -> AtroposFeedResult:
    """Register with the server as an Atropos environment (waiting for a trainer), follow the
    topics and POST groups until `stop` is set (at least once: a restart resumes from the
    group's committed offsets). `on_started(bootstrap)` hears when the feed joined its group;
    `on_progress` what it has done: at once when it sent a group or waits for the server, else
    whenever that changed, at most every `progress_every_s`.
    An `AtroposSinkError` says how to resume."""
    if options.score == "human":
        raise ScoreNotChosenError(
            "the live feed hands a session out as soon as it is decided, before any reviewer "
            "has seen it, so --score human would leave every group unscored; export the "
            "reviewed sessions instead (`rolltape dataset export -f atropos --score human`)"
        )
    connection = require_connection(settings, Role.READER)
    score = options.score or choose_score(await reward_names(settings))
    sink = AtroposSink(
        options.url,
        group_size=options.group_size,
        tokenizer=options.tokenizer,
        score=score,
        keep_equal_scores=options.keep_equal_scores,
        batch_groups=options.batch_groups,
        env_name=options.env_name,
        max_token_length=options.max_token_length,
    )
    waiting_for: list[str] = []
    shown: list[FeedProgress] = []
    last = [0.0]

    def progress(feed: TrajectoryFeed | None, *, now: bool = False) -> None:
        if on_progress is None:
            return
        skipped = Counter(feed.skipped if feed is not None else {})
        skipped.update(sink.skipped)
        waiting = sink.waiting
        current = FeedProgress(
            sent_groups=sink.sent_groups,
            buffered_groups=sink.buffered_groups,
            waiting_sessions=sum(waiting.values()),
            waiting_groups=len(waiting),
            skipped=dict(skipped),
            waiting_for=waiting_for[-1] if waiting_for and sink.env_id is None else None,
        )
        moment = time.monotonic()
        if shown and shown[-1] == current:
            return
        sent_more = not shown or shown[-1].sent_groups != current.sent_groups
        if now or sent_more or moment - last[0] >= progress_every_s:
            shown.append(current)
            last[0] = moment
            on_progress(current)

    def waits(why: str) -> None:
        waiting_for.append(why)
        progress(None, now=True)

    sink.on_wait = waits
    if not await sink.register(stop):
        await sink.close()
        return AtroposFeedResult(0, {}, score)
    waiting_for.clear()
    keys = keys_follower_if_any(connection, settings)  # opens subject sessions
    try:
        async with contextlib.AsyncExitStack() as stack:
            if keys is not None:
                await stack.enter_async_context(keys)
            feed = await stack.enter_async_context(
                TrajectoryFeed(
                    connection,
                    group_id=options.group_id,
                    prefix=settings.topic_prefix,
                    selection=options.selection,
                    auto_ack=False,  # a session is processed once its group reached the server
                    keys=keys,
                )
            )
            if on_started is not None:
                on_started(connection.bootstrap)
            try:
                async for item in feed.until(stop):
                    for settled in await sink.add(item.trajectory):
                        feed.ack(settled)
                    progress(feed)
            finally:
                for settled in await sink.close():
                    feed.ack(settled)
    except AtroposSinkError as exc:  # the sink cannot know that the feed resumes
        raise AtroposSinkError(
            f"{exc}; restart the feed to resume from its group's committed offsets"
        ) from exc
    skipped = Counter(feed.skipped)  # left out by the feed (erased, key_unavailable, selection)
    skipped.update(sink.skipped)  # and by the sink (groups)
    return AtroposFeedResult(
        sink.sent_groups, dict(sorted(skipped.items())), score, sink.buffered_groups
    )
