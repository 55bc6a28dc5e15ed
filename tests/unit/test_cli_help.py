"""The `rolltape` command's help as a person reads it in a terminal of any width."""

from __future__ import annotations

from typer.testing import CliRunner

from rolltape.infra.cli import app
from rolltape.infra.cli._reference import commands


def test_every_command_help__keeps_each_paragraph_on_one_line_for_the_terminal_to_wrap() -> None:
    """A docstring's line breaks follow the source's width; typer would keep them, so a
    terminal narrower than the source showed every long line broken in two."""
    checked = 0
    for doc in commands(app):
        text = doc.command.help or ""
        for paragraph in text.split("\n\n"):
            assert "\n" not in paragraph, (doc.name, paragraph)
        checked += 1
    assert checked > 30


def test_dataset_export_help__at_80_columns_fills_each_line_of_a_paragraph_but_its_last() -> None:
    result = CliRunner().invoke(
        app, ["dataset", "export", "--help"], env={"COLUMNS": "80"}, terminal_width=80
    )
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
