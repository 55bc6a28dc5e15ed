"""`rolltape feed atropos` wiring: the live feed of judged trajectories into an Atropos API
server, a session acknowledged only once its group reached the server.

The pure parts (the feed's selection and buffering, the sink's grouping and scoring) are
rolltape.projections; this module connects them from settings and runs them until stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from rolltape.infra.broker import require_connection
from rolltape.infra.kafka.keyring import keys_follower_if_any
from rolltape.infra.settings import Settings
from rolltape.projections import AtroposSink, AtroposSinkError, Selection, TrajectoryFeed
from rolltape.projections.exporters import ChatTokenizer
from rolltape.schemas import Role


@dataclass(frozen=True)
class AtroposFeedOptions:
    """Where the groups go and how they are made (see `rolltape feed atropos --help`)."""

    url: str
    group_size: int
    selection: Selection
    group_id: str
    tokenizer: ChatTokenizer | None = None
    score: str = "reward"
    keep_equal_scores: bool = False
    batch_groups: int = 1


@dataclass(frozen=True)
class AtroposFeedResult:
    sent_groups: int
    skipped: dict[str, int]
    """Sessions left out, by reason."""


async def feed_atropos(
    settings: Settings,
    options: AtroposFeedOptions,
    stop: asyncio.Event,
    *,
    on_started: Callable[[str], None] | None = None,
) -> AtroposFeedResult:
    """Follow the topics and POST groups until `stop` is set (at least once: a restart resumes
    from the group's committed offsets). `on_started(bootstrap)` hears when the feed joined its
    group. An `AtroposSinkError` says how to resume."""
    connection = require_connection(settings, Role.READER)
    sink = AtroposSink(
        options.url,
        group_size=options.group_size,
        tokenizer=options.tokenizer,
        score=options.score,
        keep_equal_scores=options.keep_equal_scores,
        batch_groups=options.batch_groups,
    )
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
            finally:
                for settled in await sink.close():
                    feed.ack(settled)
    except AtroposSinkError as exc:  # the sink cannot know that the feed resumes
        raise AtroposSinkError(
            f"{exc}; restart the feed to resume from its group's committed offsets"
        ) from exc
    skipped = Counter(feed.skipped)  # left out by the feed (erased, key_unavailable, selection)
    skipped.update(sink.skipped)  # and by the sink (groups)
    return AtroposFeedResult(sink.sent_groups, dict(sorted(skipped.items())))
