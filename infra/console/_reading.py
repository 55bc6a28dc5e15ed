"""What the console reads: the read model for lists and a session's rows, the log for a
session's own records (its timeline, its raw events), found where the read model says they
lie and opened with this machine's keys where it holds the KEK.

Every call opens the store for itself and closes it (SQLite connections belong to the thread
that made them; the queries run in a worker thread so the event loop keeps answering).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from rolltape.infra.broker import require_connection
from rolltape.infra.console._charts import (
    Chart,
    LineChart,
    line_chart,
    outcomes_chart,
    reward_chart,
    tools_chart,
)
from rolltape.infra.console._query import BadQuery
from rolltape.infra.index import (
    Page,
    SearchHit,
    SessionDetail,
    SessionFilter,
    SessionSummary,
    Sort,
    VersionComparison,
    locate_sessions,
    reading_store,
)
from rolltape.infra.kafka.sessions import LIVE_STREAMS, read_sessions
from rolltape.infra.settings import Settings
from rolltape.projections import (
    ExportOptions,
    FoldError,
    Format,
    Narrowing,
    Selection,
    Trajectory,
    build_export,
    fold,
)

# The fold alone: the reports package would load plotly (the report extra) for its pages.
from rolltape.projections.reports._run import fold_training
from rolltape.schemas import Role, Stream, TypedEvent

STREAMS = LIVE_STREAMS
"""The session's chains a page reads from the log."""


@dataclass(frozen=True)
class Listed:
    """One list view's answer from the read model."""

    page: Page
    matching: int
    hits: Sequence[SearchHit] = ()


Content = Literal["shown", "sealed", "erased", "unfolded", "none"]


@dataclass(frozen=True)
class Recorded:
    """A session's own records, as read from the log, and what could be made of them."""

    events: Sequence[TypedEvent]
    trajectory: Trajectory | None
    content: Content
    """`shown`; `sealed` (a subject's session and no KEK here), `erased` (its key is gone),
    `unfolded` (its events do not fold into a conversation: `why`), `none` (no events on the
    log)."""
    why: str | None = None
    curves: tuple[LineChart, ...] = ()
    """A training session's loss and accuracy by epoch (train dashed, validation solid)."""
    said: Sequence[str] = field(default_factory=tuple)
    """How the records were found, where that was not by the read model alone (a scan)."""


def list_view(
    settings: Settings,
    where: SessionFilter,
    *,
    text: str | None,
    limit: int,
    cursor: str | None,
    sort: Sort = "newest",
) -> Listed:
    with reading_store(settings) as store:
        page = store.list_sessions(where, limit=limit, cursor=cursor, sort=sort)
        matching = store.count(where)
        hits = store.search(text, where, limit=limit) if text else ()
        return Listed(page, matching, hits)


def session_row(settings: Settings, session_id: str) -> SessionDetail | None:
    with reading_store(settings) as store:
        return store.session(session_id)


GROUP_SHOWN = 20
"""A group's members listed on a session's page, at most (the list's `?group=` has them all)."""


def session_and_group(
    settings: Settings, session_id: str
) -> tuple[SessionDetail | None, tuple[SessionSummary, ...], int]:
    """The session's row, the other members of its group (oldest first, at most
    `GROUP_SHOWN`) and how many there are: what a reviewer's preference chooses from."""
    with reading_store(settings) as store:
        detail = store.session(session_id)
        if detail is None or detail.group_id is None:
            return detail, (), 0
        where = SessionFilter(group_id=detail.group_id)
        page = store.list_sessions(where, limit=GROUP_SHOWN + 1, sort="oldest")
        others = tuple(m for m in page.sessions if m.session_id != session_id)
        return detail, others[:GROUP_SHOWN], store.count(where) - 1


def chart(settings: Settings, name: str, where: SessionFilter, reward: str) -> Chart:
    """The chart `name` (rewards, outcomes, tools) of the sessions `where` leaves."""
    with reading_store(settings) as store:
        if name == "rewards":
            return reward_chart(store.reward_bins(where, reward), reward)
        if name == "outcomes":
            return outcomes_chart(store.outcomes_by_day(where))
        return tools_chart(store.tool_failures(where))


def compared(
    settings: Settings, a: str | None, b: str | None
) -> tuple[list[str], VersionComparison | None]:
    """The judge versions the store holds and, where there are two, `a` against `b` (the
    live version against the newest other one unless asked)."""
    with reading_store(settings) as store:
        versions = store.judge_versions()
        if len(versions) < 2 and a is None and b is None:
            return versions, None
        if not versions:
            raise BadQuery("no session was judged yet: there is no version to compare")
        a = a or versions[0]
        b = b or next((v for v in reversed(versions) if v != a), a)
        for name, v in (("a", a), ("b", b)):
            if v not in versions:
                raise BadQuery(
                    f"the URL parameter {name!r}: no session was judged under version {v!r} "
                    f"(the store holds {', '.join(versions) or 'none'})"
                )
        return versions, store.compare_versions(a, b)


async def read_recorded(settings: Settings, session_id: str, *, erased: bool) -> Recorded:
    """The session's records on the live chains and its fold (None for a training session,
    and where the content cannot be opened: `content` says why)."""
    connection = require_connection(settings, Role.READER)
    said: list[str] = []
    located = await locate_sessions(
        settings, connection, STREAMS, Narrowing(sessions=(session_id,)), say=said.append
    )
    found = await read_sessions(
        connection, settings.topic_prefix, keys_from=settings, located=located
    )
    events = found.get(session_id, [])
    if not events:
        return Recorded((), None, "none", said=tuple(said))
    return _folded(events, erased=erased, said=said)


EXPORT_FORMATS: tuple[str, ...] = get_args(Format)


@dataclass(frozen=True)
class Exported:
    """One session as an export format writes it: the lines of its data files, or why the
    export left it out."""

    format: str
    files: Sequence[tuple[str, str]]
    skipped: Mapping[str, int]


def exported(trajectory: Trajectory, format: str) -> Exported:
    """What `rolltape dataset export -f FORMAT -s ID` writes of this one session (its data
    files, without the manifest and the provenance sidecar), unfinished or broken included."""
    options = ExportOptions(
        format=format,
        selection=Selection(include_unfinished=True, include_broken=True),
    )
    files, manifest = build_export([trajectory], options)
    data = [
        (name, body.decode("utf-8", errors="replace"))
        for name, body in files
        if not name.startswith(".") and "/" not in name and name.endswith(".jsonl")
    ]
    return Exported(format, data, dict(manifest.skipped))


def _folded(events: list[TypedEvent], *, erased: bool, said: list[str]) -> Recorded:
    own = [e for e in events if e.stream == Stream.EVENTS.value]
    derived = [e for e in events if e.stream != Stream.EVENTS.value]
    if not own:
        return Recorded(events, None, "none", said=tuple(said))
    curves = _curves(events)  # the metrics chain holds no content: drawn whatever the fold says
    try:
        trajectory = fold(own, derived)
    except FoldError as exc:
        if exc.reason == "key_unavailable":
            content: Content = "erased" if erased else "sealed"
            return Recorded(events, None, content, said=tuple(said), curves=curves)
        return Recorded(events, None, "unfolded", why=str(exc), said=tuple(said), curves=curves)
    return Recorded(events, trajectory, "shown", said=tuple(said), curves=curves)


def _curves(events: list[TypedEvent]) -> tuple[LineChart, ...]:
    """The report's curves of a training session (none for an agent session)."""
    view = fold_training(events)
    if view is None:
        return ()
    charts = []
    for title, fields in (
        ("loss", ("train_loss", "val_loss")),
        ("accuracy", ("train_acc", "val_acc")),
    ):
        series = []
        for name in fields:
            points = [
                (e.epoch, float(getattr(e.metric, name)))
                for e in view.epochs
                if e.metric is not None and getattr(e.metric, name, None) is not None
            ]
            series.append((name.replace("_", " "), name.startswith("train"), points))
        chart = line_chart(f"{title} by epoch (train dashed, validation solid)", series)
        if chart is not None:
            charts.append(chart)
    return tuple(charts)


__all__ = [
    "STREAMS",
    "Content",
    "Listed",
    "Recorded",
    "chart",
    "compared",
    "exported",
    "list_view",
    "read_recorded",
    "session_row",
]
