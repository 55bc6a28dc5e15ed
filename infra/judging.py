"""Judges wired to settings and the log: the runtime that runs judge specs, and the executor
the worker and replay hand judge requests to.

A judge request names the judged session's world by digest; for a tools judge the executor
restores that world from the blobs topic into a fresh folder (a clean room: files that were too
large to keep are absent, and the judge is told) and gives the judge the session's transcript as
its input files. Null judges read their prompt alone.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

from rolltape.infra import open_recorder
from rolltape.infra._errors import InfraError
from rolltape.infra.broker import current_connection, require_connection
from rolltape.infra.index import IndexBlobLocator, store_url
from rolltape.infra.kafka.blobs import read_world, restore_world
from rolltape.infra.settings import Settings
from rolltape.processors import JudgeRequest
from rolltape.processors.judges import JUDGES, Judge, Transcript
from rolltape.producers import Recorder, WorldError
from rolltape.producers.agent import AgentResult
from rolltape.producers.environments import (
    Environment,
    RewardResult,
    environment_names,
    load_environment,
)
from rolltape.producers.judging import JudgeInputs, JudgeRuntime, WorldView
from rolltape.schemas import JudgeSpec, Role, Verdict
from rolltape.schemas.clients import KafkaClientError, ModelEndpoint


def open_judge_runtime(
    settings: Settings,
    *,
    recorder: Recorder | None = None,
    policy: ModelEndpoint | None = None,
) -> JudgeRuntime:
    """What runs judge specs, from settings: the endpoints of ROLLTAPE_MODELS (`policy` bound
    to the rollout's own endpoint when given), the sandbox opt-out (ROLLTAPE_TOOLS_UNSANDBOXED),
    and where judge runs are recorded: `recorder` (an environment's runner records its judges
    beside its rollouts), else a recorder of the judge's principal with its own spool folder,
    owned and closed by the runtime (the worker, replay)."""
    owned = recorder is None
    if recorder is None:
        connection = current_connection(settings, Role.JUDGE)
        authenticated = connection is not None and connection.principal is not None
        recorder = open_recorder(
            settings,
            role=Role.JUDGE,
            spool_dir=settings.resolved_spool_dir() / "judge",
            senders=1,
            **({} if authenticated else {"principal": Role.JUDGE.value}),
        )
    return JudgeRuntime(
        recorder,
        settings.models,
        policy=policy,
        close_recorder=owned,
        unsandboxed=settings.tools_unsandboxed,
    )


class LogJudges:
    """The worker's and replay's judge executor: a judge runtime, with the world of a tools
    judge restored from the log."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.runtime = open_judge_runtime(settings)

    async def run(
        self, spec: JudgeSpec, request: JudgeRequest, *, subject: str | None = None
    ) -> Verdict:
        transcript = request.transcript
        if transcript is None:
            return self.runtime.error(spec, f"the request for {request.session_id} is sealed")
        inputs = JudgeInputs(
            task={"prompt": transcript.task, "environment": transcript.environment},
            transcript=transcript.render(),
            trace=transcript.model_dump(mode="json"),
        )
        sid = request.session_id
        if spec.agent.harness == "null":
            return await self.runtime.run(spec, sid, inputs=inputs, subject=subject)
        if transcript.world is None:
            return self.runtime.error(spec, f"session {sid} recorded no world for a tools judge")
        connection = require_connection(self.settings, Role.JUDGE)
        prefix = self.settings.topic_prefix
        # The read model says where the world's blobs are; what it lacks is scanned for.
        locate = IndexBlobLocator(store_url(self.settings), prefix)
        try:
            snapshot = await read_world(connection, transcript.world, prefix=prefix, locate=locate)
            limit = self.settings.world_max_total_bytes
            if snapshot.stored_bytes > limit:  # a manifest from the log names its own limits
                return self.runtime.error(
                    spec,
                    f"world {snapshot.digest[:12]} keeps {snapshot.stored_bytes:,} bytes, more "
                    f"than this judge restores (ROLLTAPE_WORLD_MAX_TOTAL_BYTES={limit:,})",
                )
            with tempfile.TemporaryDirectory(prefix="rolltape-world-") as folder:
                path = Path(folder) / "world"
                await restore_world(connection, snapshot, path, prefix=prefix, locate=locate)
                view = WorldView(path, snapshot, restored=True)
                return await self.runtime.run(spec, sid, inputs=inputs, world=view, subject=subject)
        except (InfraError, KafkaClientError, WorldError, OSError, ValueError) as exc:
            return self.runtime.error(spec, f"the world could not be restored: {exc}")

    async def aclose(self) -> None:
        await self.runtime.aclose()


def register_environment_judges() -> None:
    """Make every registered environment's judges (its `judge_versions`) selectable by name
    for the worker and replay, which run them on recorded rollouts of that environment: the
    environment's own hook makes the spec from the item and the rollout as the log holds it. A
    name already registered (a plugin's judge) is left as it is."""
    for env_name in environment_names():
        env = load_environment(env_name)
        for judge_name, version in env.judge_versions.items():
            if judge_name not in JUDGES:
                hook = functools.partial(_environment_spec, env, judge_name)
                JUDGES.register(judge_name, Judge(judge_name, version, hook))


def _environment_spec(
    env: Environment, judge_name: str, transcript: Transcript
) -> JudgeSpec | None:
    """The spec `env` makes for one of its rollouts, from the recorded transcript; None for a
    session that is no rollout of `env`, an item it no longer has, or one the hook does not
    judge (its reward settles the grade)."""
    where = transcript.environment or {}
    if where.get("name") != env.name:
        return None
    items = {i.item_id: i for i in env.items(str(where.get("split", "train")))}
    item = items.get(str(where.get("item_id")))
    if item is None or not transcript.rewards:
        return None
    recorded = transcript.rewards[-1]
    outcome = transcript.outcome
    reward = RewardResult(
        reward=recorded.value,
        shape=outcome.get("shape", "composite"),
        passed=bool(outcome.get("passed", False)),
        components=dict(recorded.components),
    )
    messages = _messages(transcript)
    result = AgentResult(
        final=next((m["content"] for m in reversed(messages) if m["role"] == "assistant"), ""),
        stop=outcome.get("stop", "answered"),
        iterations=sum(1 for m in messages if m["role"] == "assistant"),
        tool_calls=sum(1 for i in transcript.items if i.kind == "tool_call"),
        tool_errors=0,
        messages=tuple(messages),
    )
    specs = [s for s in env.judges(item, result, reward) if s.name == judge_name]
    return specs[0] if specs else None


def _messages(transcript: Transcript) -> list[dict[str, Any]]:
    """The conversation as chat messages, as far as a transcript keeps it."""
    messages: list[dict[str, Any]] = []
    for item in transcript.items:
        if item.kind == "turn":
            messages.append({"role": item.role, "content": item.text})
        elif item.kind == "tool_call":
            call = {"type": "function", "function": {"name": item.role, "arguments": item.text}}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        else:
            messages.append({"role": "tool", "tool_call_id": item.role, "content": item.text})
    return messages
