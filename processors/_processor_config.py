"""`ProcessorConfig`: what the pure per-session step is told, checked once when it is built.

Exists apart from the step because what builds one (the worker's, replay's and imports' wiring
in `infra/commands/`) and what carries one (`worker/_config.py`) need none of the step itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from rolltape.processors.audit import CheckpointSigner
from rolltape.processors.filters import FilterConfig
from rolltape.processors.judges import JUDGES, REWARDS, TrainingJudgeConfig
from rolltape.processors.rules import RuleBook, default_rulebook
from rolltape.schemas import HUMAN_JUDGE_VERSION, JUDGE_VERSION_PATTERN, LIVE_JUDGE_VERSION
from rolltape.schemas.privacy import Keyring


@dataclass(frozen=True)
class ProcessorConfig:
    """What the pure step needs to know: rules, filters, judges, principals and the label its
    outputs are written under. Frozen: one config serves every session of a worker."""

    rules: RuleBook = field(default_factory=default_rulebook)
    """The rule set of each task: a session's metrics are evaluated under its task's."""
    filters: FilterConfig = field(default_factory=FilterConfig)
    training_judge: TrainingJudgeConfig = field(default_factory=TrainingJudgeConfig)
    principal: str = "processor"
    """The principal named in the rules, filtered and dead-letter chains."""
    judge_principal: str = "judge"
    """The principal named in the verdicts chain (the judge's trust domain)."""
    software_version: str = "0"
    rewards: tuple[str, ...] = ()
    """Reward functions (rolltape.processors.judges.REWARDS) run on every finished agent session."""
    llm_judges: tuple[str, ...] = ()
    """Judges (JUDGES, by name) requested for every finished agent session."""
    transcript_max_chars: int = 32_000
    signer: CheckpointSigner | None = None
    """The judge's key: with it, the worker commits the chain heads it verified to signed
    checkpoint logs; None, no checkpoints (replays never write them)."""
    writers: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """stream -> the principals that may name themselves its writer (those of the roles the
    stream's topic lets write, and admins). A record naming another is flagged and not used;
    a stream not listed is not checked (a cluster whose principals rolltape does not keep)."""
    judge_version: str = LIVE_JUDGE_VERSION
    """The label the outputs are written under: the live worker writes the plain chains
    (`verdicts`), a replay under version V writes `verdicts@V` beside them."""
    keys: Keyring | None = None
    """The data keys that open the content of sessions naming a subject (the worker's follower
    of the keys topic keeps it current; replay reads it once). None: such content is never
    opened, and its sessions are filtered out as `content_unavailable`, their judges skipped."""

    def __post_init__(self) -> None:
        if not re.fullmatch(JUDGE_VERSION_PATTERN, self.judge_version):
            raise ValueError(
                f"judge version {self.judge_version!r} must match {JUDGE_VERSION_PATTERN}"
            )
        if self.judge_version == HUMAN_JUDGE_VERSION:
            raise ValueError(
                f"judge version {HUMAN_JUDGE_VERSION!r} is reserved for human verdicts "
                "(reviewers write it); pick another name for the replay"
            )
        unknown = [n for n in self.rewards if n not in REWARDS]
        unknown += [n for n in self.llm_judges if n not in JUDGES]
        if unknown:
            known = sorted(REWARDS) + sorted(JUDGES)
            raise ValueError(f"unknown judge(s) {', '.join(unknown)}; known: {', '.join(known)}")
