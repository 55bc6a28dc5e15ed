"""The console's web application: its routes, each a page rendered on the server from the read
model and the log, and its static files. Reading needs the reader principal only.

The handlers are thin: a URL is read into a typed query (`_query.py`), the read model and the
log are read (`_reading.py`, in a worker thread where the store blocks), and a template renders
the answer. A problem the user can fix (a bad parameter, no read model yet) is a page saying
what to do, with the HTTP status that says what went wrong.
"""

from __future__ import annotations

import asyncio
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from rolltape.infra._errors import InfraError, ReadModelError
from rolltape.infra.commands.prompts import prompt_targets
from rolltape.infra.commands.review import QUEUES
from rolltape.infra.console._query import BadQuery, query_of
from rolltape.infra.console._reading import (
    EXPORT_FORMATS,
    chart,
    compared,
    exported,
    list_view,
    read_recorded,
    session_and_group,
    session_row,
)
from rolltape.infra.console._review import (
    Reviewers,
    board_page,
    csrf_middleware,
    log_in,
    log_out,
    login_page,
    record_preference,
    record_verdict,
)
from rolltape.infra.console._security import security_middleware
from rolltape.infra.console._templates import make_environment
from rolltape.infra.console._worlds import world, world_diff, world_file
from rolltape.infra.index import (
    SessionDetail,
    SessionFilter,
    ToolCallInfo,
    VerdictInfo,
    store_url,
)
from rolltape.infra.kafka.blobs import BlobsMissingError
from rolltape.infra.settings import Settings
from rolltape.projections import PromptTarget
from rolltape.schemas import (
    HUMAN_CHAIN,
    LIVE_JUDGE_VERSION,
    PayloadError,
    TypedEvent,
    WorldSnapshot,
)
from rolltape.schemas.clients import KafkaClientError


@dataclass
class Console:
    """What the handlers share: the settings, the templates and where the console listens
    (its `Host` check reads `hosts`, known once the site is bound)."""

    settings: Settings
    hosts: frozenset[str] | None = None
    env: Any = field(default_factory=make_environment)
    reviewers: Reviewers = field(init=False)

    def __post_init__(self) -> None:
        self.reviewers = Reviewers(self.settings)

    @property
    def origins(self) -> frozenset[str] | None:
        """The `Origin` a form of this console's own pages is posted from (None: any, where
        it listens on a routable address)."""
        if self.hosts is None:
            return None
        return frozenset(f"http://{host}" for host in self.hosts)

    @property
    def store(self) -> str:
        """Where the read model is, for the pages' header: never a password (a PostgreSQL
        address shows its host and database only)."""
        url = store_url(self.settings)
        if not url.startswith("postgres"):
            return url
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.hostname or ''}{parts.path}"

    def page(self, name: str, status: int = 200, **values: Any) -> web.Response:
        text = self.env.get_template(name).render(store=self.store, **values)
        return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")

    def problem(
        self, status: int, heading: str, message: str, hint: str | None = None
    ) -> web.Response:
        return self.page(
            "error.html",
            status,
            title=heading,
            section="",
            heading=heading,
            message=message,
            hint=hint,
        )


CONSOLE_KEY = web.AppKey("console", Console)


def console_app(settings: Settings) -> web.Application:
    """The console for `settings` (its topics, its read model, its keys)."""
    console = Console(settings)
    app = web.Application(
        middlewares=[
            security_middleware(lambda: console.hosts),
            csrf_middleware(lambda: console.origins),
        ]
    )
    app[CONSOLE_KEY] = console

    async def close_logins(app: web.Application) -> None:
        await console.reviewers.close()

    app.on_cleanup.append(close_logins)
    app.router.add_get("/", _home)
    app.router.add_get("/sessions", _sessions)
    app.router.add_get("/sessions/{session_id}", _session)
    app.router.add_get("/sessions/{session_id}/events", _events)
    app.router.add_get("/sessions/{session_id}/export", _export)
    app.router.add_get("/versions", _versions)
    app.router.add_get("/prompts", _prompts)
    app.router.add_get("/prompts/{target}", _prompt)
    app.router.add_get("/worlds/{digest}", _world)
    app.router.add_get("/worlds/{digest}/files/{path:.+}", _world_file)
    app.router.add_get("/review", board_page)
    app.router.add_get("/login", login_page)
    app.router.add_post("/login", log_in)
    app.router.add_post("/logout", log_out)
    app.router.add_post("/sessions/{session_id}/review", record_verdict)
    app.router.add_post("/sessions/{session_id}/prefer", record_preference)
    app.router.add_get("/charts/{chart:rewards|outcomes|tools}.svg", _chart)
    app.router.add_static("/static", str(files("rolltape.infra.console") / "static"))
    return app


async def _home(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/sessions")


async def _sessions(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE_KEY]
    try:
        query = query_of(request.query)
    except BadQuery as exc:
        return console.problem(400, "This view's address cannot be read", str(exc))
    try:
        listed = await asyncio.to_thread(
            list_view,
            console.settings,
            query.where(),
            text=query.q,
            limit=query.limit,
            cursor=query.cursor,
            sort=query.sort,
        )
    except ReadModelError as exc:
        return _no_read_model(console, exc)
    return console.page(
        "sessions.html",
        title="Sessions",
        section="sessions",
        query=query,
        current=dict(query.params()),
        active=query.active(),
        listed=listed,
    )


async def _session(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE_KEY]
    session_id = request.match_info["session_id"]
    try:
        detail, group, in_group = await asyncio.to_thread(
            session_and_group, console.settings, session_id
        )
    except ReadModelError as exc:
        return _no_read_model(console, exc)
    if detail is None:
        return console.problem(
            404,
            "No such session",
            f"the read model holds no session {session_id!r}",
            "If it was recorded a moment ago, the indexer may not have reached it yet "
            "(`rolltape index status`).",
        )
    try:
        recorded = await read_recorded(console.settings, session_id, erased=detail.erased)
    except (InfraError, KafkaClientError) as exc:
        return _no_log(console, exc)
    versions, judges, grid = _verdict_grid(detail)
    queue = request.query.get("queue", "direct")
    return console.page(
        "session.html",
        title=detail.task or session_id,
        section="sessions",
        detail=detail,
        recorded=recorded,
        versions=versions,
        judges=judges,
        grid=grid,
        covered=_covered(detail),
        tools=tool_summary(detail.tool_calls),
        reviews=_reviews(recorded.events),
        group=group,
        in_group=in_group,
        heads={c.chain: c.head_hash for c in detail.chains},
        queue=queue if queue in QUEUES else "direct",
        just_recorded=request.query.get("recorded"),
        reviewer=console.reviewers.of(request),
        csrf=request["csrf"],
    )


async def _events(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE_KEY]
    session_id = request.match_info["session_id"]
    try:
        detail = await asyncio.to_thread(session_row, console.settings, session_id)
    except ReadModelError as exc:
        return _no_read_model(console, exc)
    try:
        recorded = await read_recorded(
            console.settings, session_id, erased=bool(detail and detail.erased)
        )
    except (InfraError, KafkaClientError) as exc:
        return _no_log(console, exc)
    if detail is None and not recorded.events:
        return console.problem(404, "No such session", f"no session {session_id!r} on the log")
    return console.page(
        "events.html",
        title=f"events of {session_id}",
        section="sessions",
        session_id=session_id,
        events=recorded.events,
        said=recorded.said,
    )


async def _chart(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE_KEY]
    try:
        query = query_of(request.query)
    except BadQuery as exc:
        raise web.HTTPBadRequest(text=f"{exc}\n") from None
    try:
        drawn = await asyncio.to_thread(
            chart,
            console.settings,
            request.match_info["chart"],
            query.where(),
            query.reward or "reward",
        )
    except ReadModelError as exc:
        raise web.HTTPServiceUnavailable(text=f"{exc}\n") from None
    text = console.env.get_template("chart.svg").render(chart=drawn)
    return web.Response(text=text, content_type="image/svg+xml", charset="utf-8")


_DIGEST = re.compile(r"^[0-9a-f]{64}$")


async def _snapshot(console: Console, digest: str) -> WorldSnapshot | web.Response:
    """The world `digest` from the blobs topic, or the page that says why not."""
    if not _DIGEST.match(digest):
        return console.problem(400, "Not a world's digest", f"{digest!r} is not 64 hex digits")
    try:
        return await world(console.settings, digest)
    except BlobsMissingError as exc:
        return console.problem(404, "No such world on the log", str(exc))
    except (InfraError, KafkaClientError) as exc:
        return _no_log(console, exc)


async def _world(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE_KEY]
    snapshot = await _snapshot(console, request.match_info["digest"])
    if isinstance(snapshot, web.Response):
        return snapshot
    against, changes = None, []
    other = request.query.get("against", "").strip()
    if other:
        found = await _snapshot(console, other)
        if isinstance(found, web.Response):
            return found
        against = found
        try:
            changes = await world_diff(console.settings, against, snapshot)
        except (InfraError, KafkaClientError) as exc:
            return _no_log(console, exc)
    try:
        page = await asyncio.to_thread(
            list_view,
            console.settings,
            SessionFilter(world=snapshot.digest),
            text=None,
            limit=20,
            cursor=None,
        )
        sessions = [s.session_id for s in page.page.sessions]
    except ReadModelError:
        sessions = []
    return console.page(
        "world.html",
        title=f"world {snapshot.digest[:12]}",
        section="sessions",
        snapshot=snapshot,
        sessions=sessions,
        against=against,
        changes=changes,
    )


async def _world_file(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE_KEY]
    snapshot = await _snapshot(console, request.match_info["digest"])
    if isinstance(snapshot, web.Response):
        return snapshot
    path = request.match_info["path"]
    try:
        shown = await world_file(console.settings, snapshot, path)
    except BlobsMissingError as exc:
        return console.problem(404, "This file's contents are not on the log", str(exc))
    except (InfraError, KafkaClientError) as exc:
        return _no_log(console, exc)
    if shown is None:
        return console.problem(404, "No such file", f"the world holds no entry {path!r}")
    return console.page(
        "world_file.html",
        title=path,
        section="sessions",
        digest=snapshot.digest,
        shown=shown,
    )


async def _targets(console: Console) -> tuple[dict[str, PromptTarget], str] | web.Response:
    """The prompt targets, and what the read said of how it read them (a scan, a tail)."""
    said: list[str] = []
    try:
        return await prompt_targets(console.settings, say=said.append), " ".join(said)
    except (InfraError, KafkaClientError) as exc:
        return _no_log(console, exc)


async def _prompts(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE_KEY]
    read = await _targets(console)
    if isinstance(read, web.Response):
        return read
    targets, said = read
    return console.page(
        "prompts.html",
        title="Prompt targets",
        section="prompts",
        targets=[targets[name] for name in sorted(targets)],
        said=said or None,
    )


async def _prompt(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE_KEY]
    read = await _targets(console)
    if isinstance(read, web.Response):
        return read
    targets, said = read
    name = request.match_info["target"]
    history = targets.get(name)
    if history is None:
        return console.problem(
            404,
            "No such prompt target",
            f"the log holds no prompt target {name!r} (targets: {', '.join(sorted(targets)) or 'none'})",
        )
    return console.page(
        "prompt.html",
        title=f"prompt target {name}",
        section="prompts",
        history=history,
        said=said or None,
        promoted={p.promotion.version: p.promotion.reason for p in history.promotions},
    )


async def _versions(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE_KEY]
    a = request.query.get("a", "").strip() or None
    b = request.query.get("b", "").strip() or None
    try:
        versions, comparison = await asyncio.to_thread(compared, console.settings, a, b)
    except BadQuery as exc:
        return console.problem(400, "These versions cannot be compared", str(exc))
    except ReadModelError as exc:
        return _no_read_model(console, exc)
    return console.page(
        "versions.html",
        title="Judge versions",
        section="versions",
        versions=versions,
        comparison=comparison,
        a=comparison.a if comparison else None,
        b=comparison.b if comparison else None,
    )


async def _export(request: web.Request) -> web.StreamResponse:
    console = request.app[CONSOLE_KEY]
    session_id = request.match_info["session_id"]
    format = request.query.get("format", "sharegpt")
    if format not in EXPORT_FORMATS:
        return console.problem(
            400,
            "No such export format",
            f"the URL parameter 'format' is one of {', '.join(EXPORT_FORMATS)}, not {format!r}",
        )
    try:
        detail = await asyncio.to_thread(session_row, console.settings, session_id)
        recorded = await read_recorded(
            console.settings, session_id, erased=bool(detail and detail.erased)
        )
    except ReadModelError as exc:
        return _no_read_model(console, exc)
    except (InfraError, KafkaClientError) as exc:
        return _no_log(console, exc)
    if recorded.content == "none":
        return console.problem(404, "No such session", f"no session {session_id!r} on the log")
    written = exported(recorded.trajectory, format) if recorded.trajectory else None
    return console.page(
        "export.html",
        title=f"{session_id} as {format}",
        section="sessions",
        session_id=session_id,
        format=format,
        formats=EXPORT_FORMATS,
        recorded=recorded,
        written=written,
    )


def _verdict_grid(
    detail: SessionDetail,
) -> tuple[list[str], list[str], dict[tuple[str, str], VerdictInfo]]:
    """The judge versions (the live one first), the judges, and each judge's verdict under
    each version: the side-by-side table."""
    grid = {(v.judge, v.judge_version): v for v in detail.verdicts}
    found = {v.judge_version for v in detail.verdicts} | {f.judge_version for f in detail.filters}
    versions = sorted(found, key=lambda v: (v != LIVE_JUDGE_VERSION, v))
    return versions, sorted({v.judge for v in detail.verdicts}), grid


@dataclass(frozen=True)
class ToolSummary:
    """One tool's calls in a session: the timeline shows each; this counts them."""

    name: str
    calls: int
    failed: int
    unanswered: int
    median_ms: float | None


def tool_summary(calls: Sequence[ToolCallInfo]) -> list[ToolSummary]:
    by_name: dict[str, list[ToolCallInfo]] = {}
    for call in calls:
        by_name.setdefault(call.name or "?", []).append(call)
    out = []
    for name, these in sorted(by_name.items()):
        durations = [c.duration_ms for c in these if c.duration_ms is not None]
        out.append(
            ToolSummary(
                name=name,
                calls=len(these),
                failed=sum(1 for c in these if c.success is False),
                unanswered=sum(1 for c in these if c.success is None),
                median_ms=statistics.median(durations) if durations else None,
            )
        )
    return out


def _reviews(events: Sequence[TypedEvent]) -> list[tuple[TypedEvent, dict[str, Any]]]:
    """The session's human verdicts and preferences as recorded on its `verdicts@human` chain:
    each seq once (a record a fork set aside is not shown), payloads that validate only, and
    only those the login that wrote them speaks for."""
    out: list[tuple[TypedEvent, dict[str, Any]]] = []
    seen: set[int] = set()
    for event in events:
        if event.stream != HUMAN_CHAIN or event.seq in seen:
            continue
        seen.add(event.seq)
        try:
            body = event.body
        except PayloadError:
            continue
        if getattr(body, "reviewer", None) == event.producer.principal:
            out.append((event, body.model_dump(mode="json")))
    return out


def _covered(detail: SessionDetail) -> bool:
    """Every chain of the session is covered up to its head by a signed checkpoint."""
    return bool(detail.chains) and all(
        c.checkpoint is not None and c.checkpoint.seq >= c.head_seq for c in detail.chains
    )


def _no_read_model(console: Console, exc: ReadModelError) -> web.Response:
    return console.problem(
        503,
        "The read model cannot be read",
        str(exc),
        "The console shows what the indexer has written: start it with `rolltape serve index`.",
    )


def _no_log(console: Console, exc: Exception) -> web.Response:
    return console.problem(
        503,
        "The log cannot be read",
        str(exc),
        "A session's timeline and raw events are read from Kafka: is the broker up "
        "(`rolltape broker status`)?",
    )


__all__ = ["CONSOLE_KEY", "Console", "console_app"]
