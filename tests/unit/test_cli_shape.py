"""The CLI's shape: every flag means one thing across the app, the reference in docs/cli.md is
the app's, old names say where they went, and the exit codes are the documented ones."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rolltape.infra.cli import app
from rolltape.infra.cli._flags import MEANINGS
from rolltape.infra.cli._group import RENAMED
from rolltape.infra.cli._reference import commands, render

ROOT = Path(__file__).resolve().parents[2]


def _uses() -> dict[str, list[tuple[str, str, tuple[str, ...]]]]:
    """Long flag -> (command, help, short flags) for every option of every command."""
    uses: dict[str, list[tuple[str, str, tuple[str, ...]]]] = collections.defaultdict(list)
    for doc in commands(app):
        for option in doc.options():
            longs = [o for o in option.opts if o.startswith("--")]
            shorts = tuple(o for o in option.opts if not o.startswith("--"))
            help_text = " ".join((option.help or "").split())
            for flag in longs:
                uses[flag].append((doc.name, help_text, shorts))
    return uses


def test_a_short_flag_stands_for_one_long_flag_everywhere() -> None:
    long_of: dict[str, set[str]] = collections.defaultdict(set)
    for flag, uses in _uses().items():
        for _, _, shorts in uses:
            for short in shorts:
                long_of[short].add(flag)
    clashes = {short: sorted(longs) for short, longs in long_of.items() if len(longs) > 1}
    assert clashes == {}


def test_a_flag_that_several_commands_take_starts_its_help_with_its_one_meaning() -> None:
    problems = []
    for flag, uses in sorted(_uses().items()):
        if len(uses) < 2:
            continue
        meaning = MEANINGS.get(flag)
        if meaning is None:
            problems.append(f"{flag}: taken by {len(uses)} commands, no meaning in _flags.MEANINGS")
            continue
        problems += [
            f"{flag} in `{command}`: help {help_text!r} does not start with {meaning!r}"
            for command, help_text, _ in uses
            if not help_text.startswith(meaning)
        ]
    assert problems == []


def test_every_meaning_is_of_a_flag_the_app_takes() -> None:
    uses = _uses()
    assert [flag for flag in MEANINGS if flag not in uses] == []


def test_the_cli_reference_is_the_apps() -> None:
    written = (ROOT / "docs" / "cli.md").read_text()
    assert written == render(app), "docs/cli.md is stale: run `python scripts/cli_reference.py`"


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED.items()))
def test_an_old_command_name_is_a_usage_error_naming_the_new_one(old: str, new: str) -> None:
    result = CliRunner().invoke(app, [*old.split(), "--help"])
    assert result.exit_code == 2
    assert f"rolltape {new}" in " ".join(result.output.replace("│", " ").split())
    # ... and the new name is a command.
    assert CliRunner().invoke(app, [*new.split(), "--help"]).exit_code == 0


def test_a_command_interrupted_by_ctrl_c_exits_130() -> None:
    import typer

    interrupted = typer.Typer()

    @interrupted.command()
    def stop() -> None:
        raise KeyboardInterrupt

    @interrupted.command()
    def other() -> None:
        """A second command, so that `stop` is a subcommand of the group."""

    from rolltape.infra.cli._group import Group

    interrupted.info.cls = Group
    result = CliRunner().invoke(interrupted, ["stop"])
    assert result.exit_code == 130
    assert "interrupted" in result.output
