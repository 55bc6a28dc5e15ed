"""What a harness hands back to the runtime: the typed verdict, the bytes it was read from, and
what the run spent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel


@dataclass(frozen=True)
class HarnessOutcome:
    """One harness run that produced a valid verdict."""

    verdict: BaseModel
    source: bytes
    """The reply or verdict.json as the judge wrote it: its sha256 is recorded with the verdict."""
    model: str
    """The model that answered, as the server named it."""
    usage: dict[str, int] = field(default_factory=dict)
    """Tokens over all calls (prompt_tokens, completion_tokens, total_tokens)."""
    turns: int = 1


def usage_of(completion: Any) -> dict[str, int]:
    """A completion's integer usage counts (none when the server reported none)."""
    usage = completion.usage.model_dump() if getattr(completion, "usage", None) else {}
    return {k: v for k, v in usage.items() if isinstance(v, int)}


def add_usage(total: dict[str, int], more: dict[str, int]) -> None:
    for key, value in more.items():
        total[key] = total.get(key, 0) + value
