"""rolltape.infra.console: the web console, the read model and the log shown as pages.

`console_app(settings)` is the aiohttp application `rolltape serve console` serves: server-
rendered pages (Jinja2 templates, autoescaped) with one stylesheet and one script shipped in
the package (no build step, no CDN: it works offline), under a Content-Security-Policy that
runs no inline script. docs/console.md says what each page shows.
"""

from rolltape.infra.console._app import CONSOLE_KEY, Console, console_app
from rolltape.infra.console._query import PAGE_SIZE, TAG_PARAMETERS, BadQuery, ListQuery
from rolltape.infra.console._security import (
    CONTENT_SECURITY_POLICY,
    allowed_hosts,
    is_loopback,
)

__all__ = [
    "CONSOLE_KEY",
    "CONTENT_SECURITY_POLICY",
    "PAGE_SIZE",
    "TAG_PARAMETERS",
    "BadQuery",
    "Console",
    "ListQuery",
    "allowed_hosts",
    "console_app",
    "is_loopback",
]
