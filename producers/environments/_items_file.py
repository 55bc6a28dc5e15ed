"""Environments from a file of items: what `rolltape cron to-env` writes.

Each line is an `Item` whose data holds the task (`prompt`), the skills its tools come from,
optionally a folder whose copy each rollout works in (`workdir`), the answer a successful run
gave (`reference`) and where the item came from (`source`: job, run, session, status, reward).
The reward is explicit and deterministic: the token F1 of the rollout's answer against the
reference (SQuAD's answer metric: lower-cased words, punctuation dropped), passed at 0.5 or
more; an item without a reference scores whether the agent answered at all. Judges that read
the answer (`ROLLTAPE_LLM_JUDGES`) add their verdicts on top, as for any session.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

from rolltape.producers._errors import EnvError
from rolltape.producers.agent import AgentResult, Tool, tools_for
from rolltape.producers.environments._base import (
    Environment,
    Item,
    RewardResult,
    RolloutContext,
    binary,
    continuous,
)

_WORD = re.compile(r"[a-z0-9]+")


def token_f1(answer: str, reference: str) -> float:
    """Word-overlap F1 of an answer against a reference, after SQuAD's answer metric: words are
    lower-cased runs of ASCII letters and digits (unlike SQuAD, articles are kept). When either
    side has no words, 1.0 if both have none, else 0.0 (as SQuAD v2 scores no-answers)."""
    got, want = _WORD.findall(answer.lower()), _WORD.findall(reference.lower())
    if not got or not want:
        return float(got == want)
    common = sum((Counter(got) & Counter(want)).values())
    if not common:
        return 0.0
    precision, recall = common / len(got), common / len(want)
    return 2 * precision * recall / (precision + recall)


class ItemsFileEnv(Environment):
    """`jsonl:PATH`: the items of a file, with their prompts, tools and reference answers."""

    system_prompt = (
        "You are an agent doing a task that used to run on a schedule. Use the tools if the task "
        "needs them, then answer with a short report."
    )

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        stem = re.sub(r"[^a-z0-9]+", "-", path.stem.lower()).strip("-") or "items"
        self.name = f"jsonl-{stem}"[:40].rstrip("-")  # type: ignore[misc]
        try:
            lines = path.read_text().splitlines()
        except OSError as exc:
            raise EnvError(f"cannot read items from {path}: {exc}") from exc
        self._items: list[Item] = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                self._items.append(Item.model_validate(json.loads(line)))
            except ValueError as exc:
                raise EnvError(f"{path}:{number}: not an item: {exc}") from exc

    def items(self, split: str = "train") -> list[Item]:
        return [item for item in self._items if item.split == split]

    def format_prompt(self, item: Item) -> str:
        return str(item.data["prompt"])

    def setup_workdir(self, item: Item, workdir: Path) -> None:
        source = item.data.get("workdir")
        if source and Path(source).is_dir():
            shutil.copytree(source, workdir, dirs_exist_ok=True, symlinks=True)

    def tools(self, item: Item, workdir: Path) -> list[Tool]:
        return tools_for(item.data.get("skills") or (), workdir)

    async def compute_reward(
        self, item: Item, result: AgentResult, ctx: RolloutContext
    ) -> RewardResult:
        reference = item.data.get("reference")
        if not reference:
            return binary(bool(result.final.strip()), reference=None)
        f1 = token_f1(result.final, str(reference))
        return continuous(f1, passed=f1 >= 0.5, metric="token_f1")
