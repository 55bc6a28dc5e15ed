"""What every benchmark's result has: it says how it is printed, as text and as JSON.

`rolltape bench NAME` runs a benchmark and prints `render()` (or `to_json()` with `--json`); the
figures and their wording live beside the code that measures them.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator

from pydantic import BaseModel


class Figures(BaseModel):
    """A benchmark's result: its fields are the `--json` figures, `lines()` the text."""

    @abstractmethod
    def lines(self) -> Iterator[str]:
        """The text `rolltape bench` prints, one line at a time."""

    def render(self) -> str:
        """The text, as one string (lines joined by newlines, no final one)."""
        return "\n".join(self.lines())

    def to_json(self) -> str:
        """What `--json` prints: the figures."""
        return self.model_dump_json(indent=2)


def machine_line(machine: str, *notes: str) -> str:
    """The first line of every benchmark's text: where it ran, then what the run was."""
    return "; ".join((f"machine: {machine}", *notes))
