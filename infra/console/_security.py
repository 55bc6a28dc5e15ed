"""The console's security rules, applied to every response in one middleware.

Recorded text (model output, tool results, file contents, task names) is untrusted. The pages
escape it (the templates autoescape, and no recorded value is ever marked safe); this adds the
second line: a Content-Security-Policy that runs no inline script and loads nothing from
elsewhere, so a string that slipped through as markup still could not run. A `Host` header
other than the console's own address is refused, so a page elsewhere cannot reach a console on
loopback by rebinding a name to 127.0.0.1.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Awaitable, Callable, Collection

from aiohttp import web
from aiohttp.typedefs import Middleware

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""Scripts and styles only from the console's own files: no inline script, no inline style
attribute, no other origin, no framing, forms posted only back to the console."""

HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or `localhost`) is only reachable from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str, port: int) -> frozenset[str] | None:
    """The `Host` headers a console bound to `host:port` answers: its loopback names, or None
    (any) where it listens on a routable address (it is then reached by whatever name the
    network gives it)."""
    if not is_loopback(host):
        return None
    names = {"127.0.0.1", "localhost", "[::1]", host}
    return frozenset(f"{name}:{port}" for name in names)


def security_middleware(hosts: Callable[[], Collection[str] | None]) -> Middleware:
    """The middleware: the `Host` check (`hosts()` is read per request, as the port is known
    only once the site listens), then the headers on every answer, errors included. Pages are
    never cached: they may hold a subject's content."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        allowed = hosts()
        if allowed is not None and request.host not in allowed:
            refused = web.HTTPMisdirectedRequest(
                text=f"this console answers only as {', '.join(sorted(allowed))}\n"
            )
            refused.headers.update(HEADERS)
            raise refused
        started = time.perf_counter()
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            exc.headers.update(HEADERS)
            exc.headers["Cache-Control"] = "no-store"
            raise
        response.headers.update(HEADERS)
        # How long the console took to answer (shown by the browser's tools; `bench console`).
        ms = (time.perf_counter() - started) * 1000
        response.headers["Server-Timing"] = f"app;dur={ms:.1f}"
        if not request.path.startswith("/static/"):
            response.headers["Cache-Control"] = "no-store"
        return response

    return middleware


__all__ = [
    "CONTENT_SECURITY_POLICY",
    "HEADERS",
    "allowed_hosts",
    "is_loopback",
    "security_middleware",
]
