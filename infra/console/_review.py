"""Human review in the console: reviewers' logins, the CSRF rule for every form, the queues,
and the handlers that record human verdicts and preferences.

Reading needs the reader principal only; writing needs a reviewer's login. A login is the
reviewer principal's SASL/SCRAM name and password, checked by the cluster itself: the console
opens a `ReviewWriter` with them, which authenticates as it starts, and where rolltape keeps the
principals (the managed broker, ROLLTAPE_PRINCIPALS_FILE) the principal must be of the reviewer
role. The writer stays open while the reviewer is logged in; a cookie (HttpOnly,
SameSite=Strict) names the login, never the password.

Every form carries a CSRF token: a random value set once per browser in a cookie and written
into each form; a POST whose field does not equal the cookie is refused (403), as is one whose
`Origin` is not the console's own. With SameSite=Strict cookies that is two checks where one
would do, on purpose.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote, urlsplit

from aiohttp import web
from aiohttp.typedefs import Middleware
from pydantic import SecretStr, ValidationError

from rolltape.infra._errors import InfraError, ReadModelError
from rolltape.infra.broker import PrincipalError
from rolltape.infra.commands.review import (
    ReviewSetupError,
    check_reviewable,
    cron_review_sessions,
    open_review_writer,
    review_board,
)
from rolltape.infra.index import (
    FILTER_JUDGE,
)
from rolltape.infra.kafka.reviews import (
    RecordedReview,
    ReviewConflictError,
    ReviewError,
    ReviewWriter,
)
from rolltape.infra.settings import Settings
from rolltape.schemas import (
    HumanPreference,
    HumanVerdict,
)
from rolltape.schemas.clients import KafkaClientError

if TYPE_CHECKING:
    from rolltape.infra.console._app import Console

CSRF_COOKIE: Final = "rolltape_csrf"
LOGIN_COOKIE: Final = "rolltape_reviewer"
LOGIN_IDLE_S: Final = 8 * 3600.0
"""A login unused this long is closed (its writer stopped)."""
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class LoginRefused(InfraError):
    """The name and password do not make a reviewer's login here; the message says why."""


@dataclass
class Login:
    """A reviewer logged in: who, and the writer open with their credentials."""

    principal: str
    writer: ReviewWriter
    last_used: float = field(default_factory=time.monotonic)


@dataclass
class Reviewers:
    """The logins of one console, by their cookie's token."""

    settings: Settings
    logins: dict[str, Login] = field(default_factory=dict)

    def of(self, request: web.Request) -> Login | None:
        token = request.cookies.get(LOGIN_COOKIE, "")
        login = self.logins.get(token)
        if login is None:
            return None
        if time.monotonic() - login.last_used > LOGIN_IDLE_S:
            return None  # closed by `sweep`
        login.last_used = time.monotonic()
        return login

    async def log_in(self, name: str, password: str) -> tuple[str, Login]:
        """A new login for `name`, its writer started: the cluster checks the password first,
        and only then is the principal's role looked at (so a wrong password learns nothing
        of who exists)."""
        await self.sweep()
        name = name.strip()
        if not name or not password:
            raise LoginRefused("give a reviewer's name and password")
        as_them = self.settings.model_copy(
            update={"sasl_username": name, "sasl_password": SecretStr(password)}
        )
        try:
            writer = await open_review_writer(as_them)
        except PrincipalError:
            raise LoginRefused(
                "the cluster did not take this name and password: check them "
                "(`rolltape principal show NAME` prints a principal's)"
            ) from None
        except InfraError as exc:  # refused by the cluster, no reviewer, no broker configured
            raise LoginRefused(str(exc)) from exc
        token = secrets.token_urlsafe(32)
        login = Login(writer.principal, writer)
        self.logins[token] = login
        return token, login

    async def log_out(self, request: web.Request) -> None:
        """Close the request's login, if it has one (its writer stopped, its password gone)."""
        login = self.logins.pop(request.cookies.get(LOGIN_COOKIE, ""), None)
        if login is not None:
            await login.writer.__aexit__(None, None, None)

    async def sweep(self) -> None:
        """Close logins idle past `LOGIN_IDLE_S`."""
        now = time.monotonic()
        for token, login in list(self.logins.items()):
            if now - login.last_used > LOGIN_IDLE_S:
                del self.logins[token]
                await login.writer.__aexit__(None, None, None)

    async def close(self) -> None:
        for token in list(self.logins):
            login = self.logins.pop(token)
            await login.writer.__aexit__(None, None, None)


def csrf_middleware(origins: Callable[[], frozenset[str] | None]) -> Middleware:
    """Gives every browser its CSRF token (`request["csrf"]`, set in a cookie on the first
    answer) and refuses a POST that does not carry it or comes from another origin."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        token = request.cookies.get(CSRF_COOKIE, "")
        fresh = len(token) < 32
        if fresh:
            token = secrets.token_urlsafe(32)
        request["csrf"] = token
        if request.method == "POST":
            allowed = origins() or frozenset({f"{request.scheme}://{request.host}"})
            origin = request.headers.get("Origin")
            if origin is not None and origin not in allowed:
                raise web.HTTPForbidden(text=f"a form from {origin} is not this console's\n")
            site = request.headers.get("Sec-Fetch-Site")
            if site is not None and site not in ("same-origin", "none"):
                raise web.HTTPForbidden(text=f"a form sent from a {site} page is refused\n")
            form = await request.post()
            sent = str(form.get("csrf", ""))
            if fresh or not hmac.compare_digest(sent.encode(), token.encode()):
                raise web.HTTPForbidden(
                    text="this form's CSRF token is missing or stale: reload the page and "
                    "send it again\n"
                )
        response = await handler(request)
        if fresh:
            response.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="Strict", path="/")
        return response

    return middleware


def reviewers_of(request: web.Request) -> Reviewers:
    from rolltape.infra.console._app import CONSOLE_KEY

    return request.app[CONSOLE_KEY].reviewers


def _console(request: web.Request) -> Console:
    from rolltape.infra.console._app import CONSOLE_KEY

    return request.app[CONSOLE_KEY]


def _local(path: str) -> str:
    """A path to return to after a form: this console's own, never another site's (no scheme,
    no host, no backslash or control character a browser or URL library would drop or turn
    into a host)."""
    parts = urlsplit(path)
    plain = all(c.isprintable() and c != "\\" for c in path)
    local = path.startswith("/") and not path.startswith("//")
    if plain and local and not parts.netloc and not parts.scheme:
        return path
    return "/review"


async def login_page(request: web.Request) -> web.StreamResponse:
    console = _console(request)
    return console.page(
        "login.html",
        title="Log in to review",
        section="review",
        csrf=request["csrf"],
        reviewer=None,
        next=_local(request.query.get("next", "/review")),
        refused=None,
    )


async def log_in(request: web.Request) -> web.StreamResponse:
    console = _console(request)
    form = await request.post()
    target = _local(str(form.get("next", "/review")))
    await console.reviewers.log_out(request)  # a login again replaces the one before
    try:
        token, _ = await console.reviewers.log_in(
            str(form.get("name", "")), str(form.get("password", ""))
        )
    except LoginRefused as exc:
        return console.page(
            "login.html",
            401,
            title="Log in to review",
            section="review",
            csrf=request["csrf"],
            reviewer=None,
            next=target,
            refused=str(exc),
        )
    answer = web.HTTPSeeOther(target)
    answer.set_cookie(LOGIN_COOKIE, token, httponly=True, samesite="Strict", path="/")
    raise answer


async def log_out(request: web.Request) -> web.StreamResponse:
    await _console(request).reviewers.log_out(request)
    answer = web.HTTPSeeOther("/review")
    answer.del_cookie(LOGIN_COOKIE, path="/")
    raise answer


async def board_page(request: web.Request) -> web.StreamResponse:
    from rolltape.infra.console._app import _no_read_model

    console = _console(request)
    said: list[str] = []
    cron: tuple[str, ...] | None
    try:
        cron = await cron_review_sessions(console.settings)
    except (InfraError, KafkaClientError) as exc:
        cron = None
        said.append(f"the cron runs routed to review could not be read: {exc}")
    try:
        board = await asyncio.to_thread(review_board, console.settings, cron)
    except ReadModelError as exc:
        return _no_read_model(console, exc)
    return console.page(
        "review.html",
        title="Review",
        section="review",
        board=board,
        said=said,
        filter_judge=FILTER_JUDGE,
        reviewer=console.reviewers.of(request),
        csrf=request["csrf"],
    )


def _labels(text: str) -> tuple[str, ...]:
    return tuple(sorted({part.strip().lower() for part in text.split(",") if part.strip()}))


def _heads(form: Mapping[str, Any]) -> dict[str, str]:
    """The chain heads the page showed the reviewer (`head:<chain>` fields)."""
    return {
        key[len("head:") :]: str(value)
        for key, value in form.items()
        if key.startswith("head:") and str(value)
    }


async def _logged_in(request: web.Request) -> tuple[Console, str, Login]:
    """The console, the session of the form's address and the reviewer who sent it; the login
    page (and back here) when no reviewer is logged in."""
    console = _console(request)
    session_id = request.match_info["session_id"]
    login = console.reviewers.of(request)
    if login is None:
        back = f"/sessions/{quote(session_id, safe='')}"
        raise web.HTTPSeeOther(f"/login?next={quote(back, safe='')}")
    return console, session_id, login


async def _written(
    console: Console, what: str, write: Awaitable[RecordedReview]
) -> web.StreamResponse:
    """The recorded review's session page, or the page that says why the log did not take it."""
    try:
        recorded = await write
    except ReviewConflictError as exc:
        return console.problem(409, "Another review came first", str(exc))
    except (ReviewError, KafkaClientError, TimeoutError) as exc:
        return console.problem(503, f"The log did not take this {what}", str(exc) or "timed out")
    where = f"/sessions/{quote(recorded.session_id, safe='')}"
    raise web.HTTPSeeOther(f"{where}?recorded={recorded.seq}#review")


async def _unreviewable(console: Console, *session_ids: str, comment: str) -> web.Response | None:
    """The page that says why these sessions cannot be reviewed so (none there, or a comment
    about a subject's session), or None."""
    try:
        await asyncio.to_thread(check_reviewable, console.settings, *session_ids, comment=comment)
    except ReviewSetupError as exc:
        return console.problem(400, "This review cannot be recorded", str(exc))
    except ReadModelError as exc:
        return console.problem(503, "The read model cannot be read", str(exc))
    return None


async def record_verdict(request: web.Request) -> web.StreamResponse:
    console, session_id, login = await _logged_in(request)
    form = await request.post()
    refused = await _unreviewable(console, session_id, comment=str(form.get("comment", "")))
    if refused is not None:
        return refused
    try:
        score_text = str(form.get("score", "")).strip()
        verdict = HumanVerdict(
            reviewer=login.principal,
            verdict=str(form.get("verdict", "")),
            score=float(score_text) if score_text else None,
            labels=_labels(str(form.get("labels", ""))),
            comment=str(form.get("comment", "")),
            queue=str(form.get("queue", "direct") or "direct"),
            reviewed=_heads(form),
        )
    except (ValidationError, ValueError) as exc:
        return console.problem(400, "This verdict cannot be recorded", _first_error(exc))
    return await _written(console, "verdict", login.writer.verdict(session_id, verdict))


async def record_preference(request: web.Request) -> web.StreamResponse:
    console, session_id, login = await _logged_in(request)
    form = await request.post()
    other = str(form.get("other", "")).strip()
    chosen = str(form.get("chosen", ""))
    if not other:
        return console.problem(400, "This preference cannot be recorded", "name the other session")
    refused = await _unreviewable(console, session_id, other, comment=str(form.get("comment", "")))
    if refused is not None:
        return refused
    try:
        preference = HumanPreference(
            reviewer=login.principal,
            chosen=session_id if chosen != "other" else other,
            rejected=other if chosen != "other" else session_id,
            group_id=str(form.get("group_id", "")) or None,
            labels=_labels(str(form.get("labels", ""))),
            comment=str(form.get("comment", "")),
            reviewed=_heads(form),
        )
    except (ValidationError, ValueError) as exc:
        return console.problem(400, "This preference cannot be recorded", _first_error(exc))
    return await _written(console, "preference", login.writer.preference(preference))


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error.get("loc", ()))
        return f"{where}: {error.get('msg', '')}" if where else str(error.get("msg", ""))
    return str(exc)


__all__ = [
    "CSRF_COOKIE",
    "LOGIN_COOKIE",
    "LoginRefused",
    "Reviewers",
    "board_page",
    "csrf_middleware",
    "log_in",
    "log_out",
    "login_page",
    "record_preference",
    "record_verdict",
]
