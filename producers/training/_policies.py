"""Decision policies: who decides what to do about the rule that fired.

A policy sees what a human engineer at the terminal would (the canonical rule evaluation from
the worker, the monitor's latest measurements, the current settings and network) and returns
one decision in env_rl's strict schema (`DECISION_SCHEMA`, zubairashfaque/environment_rl
@633b4e7, `src/env_rl/harness/prompt.py`) for the rule the harness asks it to act on. The
scripted policy applies the playbook's remedy; the LLM policy asks a model named "policy"
through the `openai` client with strict structured output, in one conversation per attempt, so
the conversation it had is exactly what it saw (and is recorded as an agent session).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Final, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from rolltape.producers._errors import HarnessError
from rolltape.producers._recorder import Recorder
from rolltape.producers._session import Session
from rolltape.producers.training._digits import ArchitectureSpec
from rolltape.schemas import (
    POLICY_PROMPT_TARGET,
    Decision,
    EditOp,
    EditTarget,
    EventType,
    Metric,
    PromptVersion,
    RemedyDirection,
    RuleEvaluation,
    RuleId,
)
from rolltape.schemas.clients import ModelEndpoint

PRECEDENCE_TEXT = "R7, R6 (stability) > R5, R4 (capacity) > R1, R2 (tuning) > R3 (process)"

PLAYBOOK = """\
You decide how to respond to diagnostic rules that fire while a small CNN trains on 8x8 digit
images. A monitor measures the live model; a rule engine evaluates seven rules each epoch:

R7 exploding gradients: NaN/Inf loss, or the max per-layer gradient norm EMA above 10 for 3
   epochs. Remedy: decrease_lr (about 10x) and clip gradients (clip_grad_norm 1.0).
R6 vanishing gradients: the min per-layer gradient norm EMA below 1e-5 for 3 epochs.
   Remedy: add_bn_or_residual (architecture_change, edit_op add_batchnorm), or increase_lr.
R5 dead activations: the dead-unit fraction (or saturated fraction) EMA above 0.4 for 3 epochs.
   Remedy: swap_activation (architecture_change, edit_op swap_activation, edit_to leaky_relu
   or gelu).
R4 capacity: training accuracy changed less than 0.02 for 3 epochs with healthy gradients.
   Remedy: add_capacity (architecture_change, edit_op add_block).
R1 learning rate: the update/parameter ratio EMA outside [1e-4, 1e-2] for 3 epochs, or a
   validation-loss plateau. Remedy: decrease_lr (ratio too high, plateau) or increase_lr.
R2 batch size: the gradient noise scale EMA outside [50, 5000] for 3 epochs. Remedy:
   increase_batch_size below the band, decrease_batch_size above it (set batch_size_new).
R3 early stop: no validation-loss improvement for 5 epochs. Remedy: stop (the harness restores
   the best checkpoint).

Precedence: {precedence}. Act on the rule you are asked to act on; the harness logs deferrals
for the others. Reply with one decision object: event_type hyperparameter_change,
architecture_change or rule_triggered_no_action; cites (the rule ids you act on);
justification (one or two sentences citing the measurements); remedy_direction; remedy_params
(lr_new, edit_op, edit_to, batch_size_new, clip_grad_norm; null or "none" where unused).
The harness can change the learning rate, clip gradients, rebuild the loader with another batch
size, stop early, swap activations, and add a block or batch norm by restarting from the edited
network with the trained weights carried over.{waived}
"""


BASE_POLICY_PROMPT: Final = PLAYBOOK.format(precedence=PRECEDENCE_TEXT, waived="")
"""The LLM policy's system prompt when the log holds no champion: the playbook."""


class PolicyRemedy(BaseModel):
    """env_rl's `remedy_params` plus rolltape's `batch_size_new` and `clip_grad_norm`.
    Every field is required (null or "none" when unused) and no other is allowed, since OpenAI's
    strict structured output accepts only such schemas."""

    model_config = ConfigDict(extra="forbid")

    lr_new: float | None
    edit_op: EditOp
    edit_to: EditTarget
    batch_size_new: int | None
    clip_grad_norm: float | None


class PolicyDecision(BaseModel):
    """The decision schema a policy answers in (env_rl's, with rolltape's additions); the
    harness adds the epoch."""

    model_config = ConfigDict(extra="forbid")

    event_type: EventType
    cites: list[RuleId]
    justification: str
    remedy_direction: RemedyDirection
    remedy_params: PolicyRemedy

    def at(self, epoch: int) -> Decision:
        """The decision as recorded: this one at `epoch`."""
        return Decision.model_validate({**self.model_dump(), "epoch": epoch})


class DecisionContext(BaseModel):
    """What a policy is shown when the harness asks it to act on `rule`."""

    model_config = ConfigDict(frozen=True)

    epoch: int
    rule: RuleId
    evaluation: RuleEvaluation
    metric: Metric
    lr: float
    batch_size: int
    clip: float | None
    architecture: ArchitectureSpec

    def render(self) -> str:
        m = self.metric
        lines = [
            f"Epoch {self.epoch}. Rules fired: {list(self.evaluation.fired)}. Act on "
            f"{self.rule}, the highest-precedence rule to answer now.",
            "",
            f"Settings: lr = {self.lr:g}, batch_size = {self.batch_size}, "
            f"clip_grad_norm = {self.clip}",
            f"Network: {self.architecture.blocks} blocks of {self.architecture.width} channels, "
            f"activation {self.architecture.activation}, batch norm "
            f"{'on' if self.architecture.batchnorm else 'off'}",
            "",
            "Measured this epoch:",
        ]
        for name in Metric.DIAGNOSTICS:
            value = getattr(m, name)
            if value is not None:
                lines.append(f"  {name} = {value:.4g}")
        lines.append("")
        lines.append("Why each fired rule fired:")
        for rule in self.evaluation.fired:
            lines.append(f"  {rule}: {self.evaluation.rules[rule].reason}")
        return "\n".join(lines)


class AttemptStart(BaseModel):
    """What a policy learns when an attempt starts."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    """The attempt's training session."""
    group_id: str
    """The self-refine run: every attempt's sessions share it."""
    feedback: tuple[str, ...] = ()
    """The verdicts of the earlier attempts, rendered (iterative self-refine)."""
    waived: tuple[str, ...] = ()


class Policy(Protocol):
    """Who decides about fired rules. Per attempt the harness calls `begin` once, `decide` for
    each rule it acts on, then `end`, with None when the attempt failed. A HarnessError from
    `decide` is recorded as a no-action decision; any other exception ends the attempt."""

    name: str

    def begin(self, attempt: AttemptStart) -> str | None:
        """A new attempt starts; returns the id of the session that records the policy's own
        conversation, if it keeps one."""

    def decide(self, context: DecisionContext) -> PolicyDecision:
        """A decision for `context.rule`; HarnessError when none can be had."""

    def end(self, process_score: float | None) -> None:
        """The attempt's verdict is known."""


class ScriptedPolicy:
    """The playbook's remedy for the rule, with the measurement that called for it."""

    name = "scripted"

    def begin(self, attempt: AttemptStart) -> str | None:
        return None  # nothing to record: the playbook is the policy

    def end(self, process_score: float | None) -> None:
        pass

    def decide(self, context: DecisionContext) -> PolicyDecision:
        rule, lr, spec = context.rule, context.lr, context.architecture
        reason = context.evaluation.rules[rule].reason
        signals = context.evaluation.rules[rule].signals

        def decision(event: str, direction: str, why: str, **params: Any) -> PolicyDecision:
            remedy = {
                "lr_new": None,
                "edit_op": "none",
                "edit_to": "none",
                "batch_size_new": None,
                "clip_grad_norm": None,
                **params,
            }
            return PolicyDecision.model_validate(
                {
                    "event_type": event,
                    "cites": [rule],
                    "justification": f"{rule}: {reason}. Playbook: {why}.",
                    "remedy_direction": direction,
                    "remedy_params": remedy,
                }
            )

        if rule == "R7":
            return decision(
                "hyperparameter_change",
                "decrease_lr",
                "drop the learning rate 10x and clip gradients at 1.0",
                lr_new=lr / 10,
                clip_grad_norm=1.0,
            )
        if rule == "R6":
            if not spec.batchnorm:
                return decision(
                    "architecture_change",
                    "add_bn_or_residual",
                    "insert batch norm to give the gradient a highway",
                    edit_op="add_batchnorm",
                )
            return decision(
                "hyperparameter_change", "increase_lr", "raise the learning rate 3x", lr_new=lr * 3
            )
        if rule == "R5":
            if spec.activation != "leaky_relu":
                return decision(
                    "architecture_change",
                    "swap_activation",
                    "swap to LeakyReLU, which cannot kill a unit outright",
                    edit_op="swap_activation",
                    edit_to="leaky_relu",
                )
            return decision(
                "architecture_change",
                "add_bn_or_residual",
                "activations are already leaky: insert batch norm",
                edit_op="add_batchnorm",
            )
        if rule == "R4":
            return decision(
                "architecture_change", "add_capacity", "add a block", edit_op="add_block"
            )
        if rule == "R1":
            ratio = signals.get("update_to_param_ratio.ema")
            if ratio is not None and math.isfinite(ratio) and ratio < 1e-4:
                return decision(
                    "hyperparameter_change",
                    "increase_lr",
                    "updates are too small: raise the learning rate 10x",
                    lr_new=lr * 10,
                )
            return decision(
                "hyperparameter_change",
                "decrease_lr",
                "the step overshoots or validation loss stalls: drop the learning rate 3x",
                lr_new=lr / 3,
            )
        if rule == "R2":
            noise = signals.get("grad_noise_scale.ema")
            if noise is not None and math.isfinite(noise) and noise > 5000:
                return decision(
                    "hyperparameter_change",
                    "decrease_batch_size",
                    "gradients are cleaner than needed: halve the batch size",
                    batch_size_new=max(1, context.batch_size // 2),
                )
            return decision(
                "hyperparameter_change",
                "increase_batch_size",
                "gradients are too noisy: double the batch size",
                batch_size_new=context.batch_size * 2,
            )
        return decision(
            "hyperparameter_change",
            "stop",
            "stop and keep the best checkpoint",
        )


class LLMPolicy:
    """Asks the model bound to the logical name "policy" for each decision, in one growing
    conversation per attempt; records that conversation as an agent session linked to the
    training session and rewards it with the attempt's process score.

    Its system prompt is a version of the `harness.policy` prompt target (`prompt`; default the
    playbook, unrecorded); the conversation's session names the version in its run config, so
    every decision can be traced to the prompt text that produced it. `labels` go into that run
    config too (a prompt loop's round and role)."""

    name = "llm"

    def __init__(
        self,
        endpoint: ModelEndpoint,
        recorder: Recorder,
        *,
        temperature: float = 0.2,
        prompt: PromptVersion | None = None,
        labels: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.seed = seed
        """Sent with every call (a prompt loop's pairs sample alike on a server honouring it)."""
        self.recorder = recorder
        self.temperature = temperature
        self.prompt = prompt
        self.labels = dict(labels or {})
        self.calls = 0
        """Model calls made (the prompt loop's budget counts them)."""
        self._client = endpoint.client()
        self.messages: list[dict[str, str]] = []
        self.session: Session | None = None

    def begin(self, attempt: AttemptStart) -> str | None:
        waived_text = (
            f"\nWaived (the harness cannot act on them; answer rule_triggered_no_action): "
            f"{', '.join(attempt.waived)}."
            if attempt.waived
            else ""
        )
        base = self.prompt.content if self.prompt is not None else BASE_POLICY_PROMPT
        self.messages = [{"role": "system", "content": base.rstrip("\n") + waived_text + "\n"}]
        if attempt.feedback:
            self.messages.append(
                {
                    "role": "system",
                    "content": "Feedback from your earlier attempts at this task (iterative "
                    "self-refine: avoid repeating these violations):\n\n"
                    + "\n\n".join(attempt.feedback),
                }
            )
        self.session = self.recorder.session(
            "decide the training remedies of the digits CNN",
            session_id=f"{attempt.session_id}-policy",
            kind="agent",
            model=self.endpoint.model,
            linked_session_id=attempt.session_id,
            group_id=attempt.group_id,
            tags=["decision_policy", "iterative_self_refine"],
            run_config={
                "mode": "iterative_self_refine",
                "role": "decision_policy",
                "prompt_target": POLICY_PROMPT_TARGET,
                "prompt_version": self.prompt.digest if self.prompt is not None else None,
                **self.labels,
            },
        )
        for message in self.messages:
            self.session.turn("system", message["content"])
        return self.session.session_id

    def decide(self, context: DecisionContext) -> PolicyDecision:
        assert self.session is not None
        prompt = context.render()
        self.messages.append({"role": "user", "content": prompt})
        self.session.turn("user", prompt)
        import openai

        self.calls += 1
        try:
            completion = self._client.chat.completions.parse(
                model=self.endpoint.model,
                messages=self.messages,
                response_format=PolicyDecision,
                temperature=self.temperature,
                **({"seed": self.seed} if self.seed is not None else {}),
            )
        except (ValidationError, json.JSONDecodeError, ValueError, openai.APIError) as exc:
            detail = f"{type(exc).__name__}: {exc}"[:500]
            self.messages.pop()
            self.session.feedback(source="harness", text=f"policy call failed: {detail}")
            raise HarnessError(f"the policy model gave no decision: {detail}") from exc
        message = completion.choices[0].message if completion.choices else None
        if message is None or message.parsed is None:
            refusal = getattr(message, "refusal", None) if message is not None else None
            self.messages.pop()
            self.session.feedback(source="harness", text=f"policy gave no decision: {refusal}")
            raise HarnessError(f"the policy model gave no decision (refusal: {refusal})")
        reply = message.content or message.parsed.model_dump_json()
        self.messages.append({"role": "assistant", "content": reply})
        usage = completion.usage
        self.session.turn(
            "assistant",
            reply,
            reasoning=getattr(message, "reasoning_content", None),
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
        )
        decision: PolicyDecision = message.parsed
        return decision

    def end(self, process_score: float | None) -> None:
        if self.session is None:
            return
        if process_score is not None:
            self.session.reward(process_score, name="reward", source="training_audit")
        self.session.end("completed")
        self.session = None
