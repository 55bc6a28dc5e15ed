"""The class of every group of the app: an old command name says where it went, and Ctrl-C is
exit 130.

Commands moved when the CLI was regrouped by what a person wants to do. An old name is not run
(one way to do each thing): typing it is a usage error, exit 2, that names the command to type
instead, so a script written for the old names fails at once with the fix in its log rather than
with "No such command".
"""

from __future__ import annotations

from typing import Final

import typer.core
from typer import _click as click

#: Old command path (without `rolltape`) -> the new one.
RENAMED: Final[dict[str, str]] = {
    "worker": "serve worker",
    "otlp serve": "serve otlp",
    "project": "serve projector",
    "feed atropos": "serve feed",
    "cron run": "serve cron",
    "env serve": "serve env",
    "tail": "log tail",
    "verify": "log verify",
    "replay": "log replay",
    "export": "dataset export",
    "verify-export": "dataset verify",
    "purge-export": "dataset purge",
    "erase": "privacy erase",
    "erasures export": "privacy export-erasures",
    "keys rotate-kek": "privacy rotate-kek",
    "batch run": "env run",
}


def _path(ctx: click.Context) -> list[str]:
    """The command path below the root: `["cron"]` inside `rolltape cron`."""
    names: list[str] = []
    while ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return names[::-1]


def moved_to(path: list[str]) -> tuple[str, str] | None:
    """(old, new) for a command path that starts with a renamed command, or None."""
    for length in (2, 1):
        old = " ".join(path[:length])
        if len(path) >= length and old in RENAMED:
            return old, RENAMED[old]
    return None


class Group(typer.core.TyperGroup):
    """A typer group whose unknown command may be an old name: then the error names the new
    one. Every group of the app is one (`typer.Typer(cls=Group)`)."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and self.get_command(ctx, args[0]) is None:
            moved = moved_to([*_path(ctx), *args[:2]])
            if moved is not None:
                old, new = moved
                ctx.fail(f"`rolltape {old}` is now `rolltape {new}`")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> object:
        """Run the command; Ctrl-C is exit 130 with one line on stderr, as a shell reports a
        process stopped by SIGINT (click's own handling says `Aborted!` and exits 1)."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)


__all__ = ["RENAMED", "Group", "moved_to"]
