"""The `rolltape` command's help as a person reads it in a terminal of any width."""

from __future__ import annotations

from typer.main import get_command
from typer.testing import CliRunner

from rolltape.infra.cli import app


def _commands() -> list[tuple[str, ...]]:
    root = get_command(app)
    paths: list[tuple[str, ...]] = []

    def walk(command: object, path: tuple[str, ...]) -> None:
        children = getattr(command, "commands", None)
        if children is None:
            paths.append(path)
            return
        for name, child in children.items():
            walk(child, (*path, name))

    walk(root, ())
    return paths


def test_every_command_help__keeps_each_paragraph_on_one_line_for_the_terminal_to_wrap() -> None:
    """A docstring's line breaks follow the source's width; typer would keep them, so a
    terminal narrower than the source showed every long line broken in two."""
    root = get_command(app)
    checked = 0
    for path in _commands():
        command = root
        for name in path:
            command = command.commands[name]  # type: ignore[attr-defined]
        text = command.help or ""
        for paragraph in text.split("\n\n"):
            assert "\n" not in paragraph, (path, paragraph)
        checked += 1
    assert checked > 30


def test_export_help__at_80_columns_fills_each_line_of_a_paragraph_but_its_last() -> None:
    result = CliRunner().invoke(app, ["export", "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    prose = result.output.split("Options")[0].splitlines()
    paragraphs: list[list[str]] = [[]]
    for line in (line.strip(" │╭─") for line in prose):
        if line:
            paragraphs[-1].append(line)
        elif paragraphs[-1]:
            paragraphs.append([])
    description = [p for p in paragraphs if p and not p[0].startswith("Usage:")]
    assert len(description) == 2, description
    for paragraph in description:
        for line in paragraph[:-1]:
            assert len(line) > 60, paragraph  # broken at a source line, not at the width
