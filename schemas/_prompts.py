"""Prompts that a loop can change, as versioned records: the prompt loop's first contract.

A prompt target (the decision harness's LLM policy, an environment's agent system prompt) has
versions. A version is content-addressed (its digest is the sha256 of its target and content,
so the same text is the same version however often it is recorded), names its parents (the
versions it was made from), and says how it was made (a technique, the tuner's rationale). Which
version is the champion is decided by `prompt_promotion` events, never by a file on disk: the
champion, the lineage and the scoreboard are projections of the log.
"""

from __future__ import annotations

import hashlib
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rolltape.schemas._canonical import canonical_bytes

PROMPT_TARGET_PATTERN: Final = r"^[a-z0-9][a-z0-9._:-]{0,63}$"
POLICY_PROMPT_TARGET: Final = "harness.policy"
"""The prompt target of the decision harness's LLM policy (its system prompt); an environment's
agent system prompt is `env.<name>.system`."""
_DIGEST = r"^[0-9a-f]{64}$"


def prompt_digest(target: str, content: str) -> str:
    """The content address of a prompt version: the same text for the same target, the same
    version."""
    return hashlib.sha256(canonical_bytes({"content": content, "target": target})).hexdigest()


class PromptVersion(BaseModel):
    """Payload of a `prompt_version` event: one version of a target's prompt."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str = Field(pattern=PROMPT_TARGET_PATTERN)
    content: str = Field(min_length=1)
    digest: str = Field(pattern=_DIGEST)
    """`prompt_digest(target, content)`, checked on every read."""
    parents: tuple[str, ...] = ()
    """Digests of the versions this one was made from (none for a first version)."""
    technique: str | None = None
    """How it was made (a tuner's technique: `chain_of_thought`, `few_shot`...; `manual`)."""
    rationale: str | None = None
    """Why, in the words of whoever made it."""

    @classmethod
    def of(
        cls,
        target: str,
        content: str,
        *,
        parents: tuple[str, ...] = (),
        technique: str | None = None,
        rationale: str | None = None,
    ) -> PromptVersion:
        return cls(
            target=target,
            content=content,
            digest=prompt_digest(target, content),
            parents=parents,
            technique=technique,
            rationale=rationale,
        )

    @model_validator(mode="after")
    def _addressed(self) -> PromptVersion:
        if self.digest != prompt_digest(self.target, self.content):
            raise ValueError("the digest is not the digest of the target and content")
        if self.digest in self.parents:
            raise ValueError("a version cannot be its own parent")
        return self


class PromptPromotion(BaseModel):
    """Payload of a `prompt_promotion` event: from now on `version` is the target's champion."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str = Field(pattern=PROMPT_TARGET_PATTERN)
    version: str = Field(pattern=_DIGEST)
    replaces: str | None = Field(default=None, pattern=_DIGEST)
    """The champion it replaces (None: the target had none)."""
    reason: str = Field(min_length=1)
    rule: str | None = None
    """The promotion rule that decided it, as its config states it (None: a person did)."""
    figures: dict[str, float] = Field(default_factory=dict)
    """What the rule measured (the score difference and its interval, pass rates)."""
