"""The CLI reference (docs/cli.md), rendered from the app itself, so it cannot drift from what
`--help` says: `scripts/cli_reference.py` writes it and a test fails when the file is stale.

`commands` is also the one walk over the app that the flag-consistency test uses.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import typer
import typer.core

from rolltape.infra.cli._flags import EXIT_CODES, MEANINGS
from rolltape.infra.cli._group import RENAMED


@dataclass(frozen=True)
class CommandDoc:
    """One command of the app: its path below `rolltape`, its help and its parameters."""

    path: tuple[str, ...]
    command: Any  # typer's click Command (typer vendors click, with no public type for it)

    @property
    def name(self) -> str:
        return " ".join(("rolltape", *self.path))

    def options(self) -> list[Any]:
        return [p for p in self.command.params if isinstance(p, typer.core.TyperOption)]

    def arguments(self) -> list[Any]:
        return [p for p in self.command.params if isinstance(p, typer.core.TyperArgument)]


def commands(app: typer.Typer) -> Iterator[CommandDoc]:
    """Every command of `app` with its path, groups before their commands, in `--help` order."""
    yield from _walk(typer.main.get_command(app), ())


def groups(app: typer.Typer) -> Iterator[tuple[tuple[str, ...], str]]:
    """Every group below the root with its one-line help."""
    root = typer.main.get_command(app)
    for name, sub in getattr(root, "commands", {}).items():
        if hasattr(sub, "commands"):
            yield (name,), _one_line(sub.help or "")


def _walk(command: Any, path: tuple[str, ...]) -> Iterator[CommandDoc]:
    subs = getattr(command, "commands", None)
    if subs is None:
        yield CommandDoc(path, command)
        return
    for name, sub in subs.items():
        yield from _walk(sub, (*path, name))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cell(text: str) -> str:
    return _one_line(text).replace("|", "\\|")


def _default(param: Any) -> str:
    if param.required:
        return "required"
    value = param.default
    if value is None or value is False or value == [] or value == ():
        return ""
    if isinstance(value, list | tuple):
        return ", ".join(str(getattr(v, "value", v)) for v in value)
    return str(getattr(value, "value", value))


def _flags(param: Any) -> str:
    longs = [o for o in param.opts if o.startswith("--")]
    shorts = [o for o in param.opts if not o.startswith("--")]
    names = ", ".join(f"`{o}`" for o in [*longs, *shorts])
    if param.secondary_opts:
        names += " / " + ", ".join(f"`{o}`" for o in param.secondary_opts)
    return names


def render(app: typer.Typer) -> str:
    """docs/cli.md: the groups, every command with its help, arguments and options, the flags
    that mean one thing everywhere, the exit codes, and where each old name went."""
    out: list[str] = [
        "# The `rolltape` command",
        "",
        "Generated from the app by `python scripts/cli_reference.py`; a test fails when this file",
        "is stale. `rolltape COMMAND --help` says the same in the terminal.",
        "",
        "Groups are named for what you want to do, with verbs inside; every long-running service",
        "starts as `rolltape serve <service>` and stops on Ctrl-C or SIGTERM. What a command finds",
        "goes to stdout; progress and errors go to stderr.",
        "",
        "## Exit codes",
        "",
        "| code | meaning |",
        "|---|---|",
        *(f"| {code} | {_cell(text)} |" for code, text in EXIT_CODES.items()),
        "",
        "## Groups",
        "",
        "| group | for |",
        "|---|---|",
    ]
    top_level = [c for c in commands(app) if len(c.path) == 1]
    for path, text in groups(app):
        out.append(f"| [`rolltape {path[0]}`](#rolltape-{path[0]}) | {_cell(text)} |")
    for doc in top_level:
        out.append(f"| `{doc.name}` | {_cell(doc.command.short_help or '')} |")
    out += [
        "",
        "## Flags that mean one thing everywhere",
        "",
        "A flag that several commands take means the same in each: its help starts with these",
        "words, and a short flag always stands for the same long one.",
        "",
        "| flag | meaning |",
        "|---|---|",
        *(f"| `{flag}` | {_cell(text)} |" for flag, text in MEANINGS.items()),
        "",
        "## Renamed commands",
        "",
        "Typing an old name is a usage error (exit 2) that names the new command.",
        "",
        "| old | new |",
        "|---|---|",
        *(f"| `rolltape {old}` | `rolltape {new}` |" for old, new in RENAMED.items()),
        "",
        "## Commands",
    ]
    group = None
    for doc in commands(app):
        if len(doc.path) > 1 and doc.path[0] != group:
            group = doc.path[0]
            out += ["", f"### rolltape {group}"]
        out += ["", f"#### `{doc.name}`", ""]
        out.append(_one_line(doc.command.help or "") if doc.command.help else "")
        arguments, options = doc.arguments(), doc.options()
        if arguments:
            out += ["", "| argument | default | meaning |", "|---|---|---|"]
            for arg in arguments:
                out.append(
                    f"| `{arg.name.upper()}` | {_cell(_default(arg))} | {_cell(arg.help or '')} |"
                )
        if options:
            out += ["", "| option | default | meaning |", "|---|---|---|"]
            for opt in options:
                out.append(f"| {_flags(opt)} | {_cell(_default(opt))} | {_cell(opt.help or '')} |")
    return "\n".join(out) + "\n"


__all__ = ["CommandDoc", "commands", "groups", "render"]
