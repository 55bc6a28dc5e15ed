"""The reward-filter config: which finished agent sessions may become training data."""

from __future__ import annotations

import functools
import hashlib
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from rolltape.schemas import canonical_bytes

FILTER_VERSION: Final = "rolltape.filters/2"
"""2: sessions without a prompt or an assistant reply, or flagged `content_missing`, are not
accepted; calls in a session that declares no tools are observed, not rejected."""


class FilterConfig(BaseModel):
    """Frozen: a changed setting is a new config (new digest), named on every outcome."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "default"
    require_completed: bool = True
    """Interrupted and failed sessions are rejected (kept as failure data)."""
    reject_unknown_tools: bool = True
    """A call to a tool name the session did not declare is a hallucination, when it declares
    tools. A session that declares none (most OpenTelemetry instrumentations send no tool
    definitions) has its tools observed instead (`tools_undeclared`), not rejected."""
    require_content: bool = True
    """A session needs a prompt (a task or a user message with text) and an assistant turn
    with content, reasoning or a call, and must not be flagged `content_missing` by its
    producer: an empty conversation is never training data."""
    check_tool_arguments: bool = True
    """Arguments must satisfy the declared tool's JSON Schema."""
    require_reasoning: bool = False
    """Every assistant turn must carry non-empty reasoning (stricter than the Hermes agent's batch
    runner, which drops a sample with no reasoning in any turn: NousResearch/hermes-agent,
    `batch_runner.py`)."""
    min_turns: int = Field(default=1, ge=0)
    """Minimum number of assistant turns."""
    min_reward: float | None = None
    """Minimum final reward (the last `reward` event named "reward"); None: no reward needed."""
    require_review: bool = False
    """A session is decided only once a reviewer has judged it (a human verdict on its
    `verdicts@human` chain): the worker holds its outcome from the session's end until the
    first reviewer's verdict, which rejects it (`reviewer_failed`) when it is a fail. The
    filter's other checks still apply to a pass. For a pipeline that trains only on what a
    person has looked at."""

    @functools.cached_property
    def label(self) -> str:
        # A setting added later leaves the label of every config that does not use it as it
        # was: an outcome's config names the same digest before and after the upgrade.
        dumped = self.model_dump(exclude=set() if self.require_review else {"require_review"})
        digest = hashlib.sha256(canonical_bytes(dumped)).hexdigest()
        return f"{self.name}@{digest[:12]}"
