"""Running judge specs: one executor for every caller (an environment's runner at the end of a
rollout, the worker on finished sessions, a replay re-judging history).

Each run is a session of its own, recorded through the SDK like any agent (`session.capture`:
every model call with its usage, tool calls and results): trainable=false, linked to the judged
session, tagged `judge`, its `run_config` naming the spec's version and digest, the harness, the
model and the world it read. Judge tokens therefore never become training data (exports skip
untrainable sessions), and judge spend is the judge session's usage, apart from the policy's.

Every failure (no endpoint for the logical model, the model failing, a spent budget, no or an
invalid verdict) becomes an error verdict naming its cause: a failed judge fails the grade, it
never scores 0.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rolltape.producers._errors import JudgeError
from rolltape.producers._recorder import Recorder
from rolltape.producers._session import Session
from rolltape.producers.agent import SandboxLimits
from rolltape.producers.judging._inputs import JudgeInputs, WorldView
from rolltape.producers.judging._null import run_null
from rolltape.producers.judging._outcome import HarnessOutcome
from rolltape.producers.judging._tools import run_tools
from rolltape.schemas import POLICY_MODEL, JudgeSpec, Verdict
from rolltape.schemas.clients import ModelEndpoint

log = logging.getLogger("rolltape.producers.judging")


class JudgeRuntime:
    """Binds logical models to endpoints (`policy`: the rollout's own), keeps one client per
    endpoint, bounds how many judges run at once, and records and runs judge specs."""

    def __init__(
        self,
        recorder: Recorder,
        models: Mapping[str, ModelEndpoint],
        *,
        policy: ModelEndpoint | None = None,
        max_concurrent: int = 8,
        close_recorder: bool = False,
        sandbox_limits: SandboxLimits | None = None,
        unsandboxed: bool = False,
    ) -> None:
        self.recorder = recorder
        self._close_recorder = close_recorder
        self.sandbox_limits = sandbox_limits
        self.unsandboxed = unsandboxed
        """The explicit opt-out: tools judges' shell commands run without a sandbox."""
        self.models = dict(models)
        if policy is not None:
            self.models[POLICY_MODEL] = policy
        self._clients: dict[str, Any] = {}
        self._limit = asyncio.Semaphore(max_concurrent)

    def endpoint(self, logical: str) -> ModelEndpoint:
        endpoint = self.models.get(logical)
        if endpoint is None:
            where = (
                "the rollout's own model; judges outside a rollout bind it in ROLLTAPE_MODELS"
                if logical == POLICY_MODEL
                else "set it in ROLLTAPE_MODELS"
            )
            raise JudgeError(f"no endpoint is bound to the logical model {logical!r} ({where})")
        return endpoint

    def _client(self, logical: str, endpoint: ModelEndpoint) -> Any:
        client = self._clients.get(logical)
        if client is None:
            client = self._clients[logical] = endpoint.async_client()
        return client

    async def run(
        self,
        spec: JudgeSpec,
        judged_session_id: str,
        *,
        inputs: JudgeInputs | None = None,
        world: WorldView | None = None,
        subject: str | None = None,
    ) -> Verdict:
        """Run one judge on one session and return its verdict (an error verdict for any
        failure: this never raises for the judge's own failures). A tools judge needs the
        `world` to grade in and reads `inputs` as files; the verdict names the world's
        snapshot digest. `subject`: the judged session's, which the judge's own session names
        too (its conversation quotes the judged one: erasing the subject erases both)."""
        name = f"llm:{spec.name}"
        try:
            endpoint = self.endpoint(spec.agent.model)
        except JudgeError as exc:
            return self.error(spec, str(exc))
        sid = f"judge.{spec.name}.{uuid.uuid4().hex[:20]}"
        session = self.recorder.session(
            f"judge {spec.name} on session {judged_session_id}",
            session_id=sid,
            model=endpoint.model,
            trainable=False,
            linked_session_id=judged_session_id,
            subject=subject,
            tags=["judge", spec.name],
            run_config={
                "judge": {
                    "name": spec.name,
                    "version": spec.version,
                    "spec": spec.digest,
                    "harness": spec.agent.harness,
                    "model": spec.agent.model,
                    "placement": spec.agent.placement,
                    "budget": spec.agent.budget.model_dump(),
                    "world": world.snapshot.digest if world is not None else None,
                }
            },
        )
        world_detail = {"world": world.snapshot.digest} if world is not None else {}
        async with self._limit:
            try:
                async with asyncio.timeout(spec.agent.budget.seconds):
                    outcome = await self._harness(spec, session, endpoint, inputs, world)
            except asyncio.CancelledError:
                session.end("interrupted", error="the judge run was cancelled")
                raise
            except Exception as exc:  # every failure of a judge is its error verdict
                if isinstance(exc, TimeoutError):
                    error = f"the judge ran past its budget of {spec.agent.budget.seconds:g} s"
                elif isinstance(exc, JudgeError):
                    error = str(exc)
                else:  # not foreseen: named, so that it can be fixed, and never a silent 0
                    log.exception("judge %s failed on %s", spec.name, judged_session_id)
                    error = f"the judge run failed: {type(exc).__name__}: {exc}"[:500]
                session.end("failed", error=error)
                return Verdict(
                    judge=name,
                    judge_version=spec.version,
                    status="error",
                    error=error,
                    details={"spec": spec.digest, **world_detail},
                    judge_session_id=sid,
                )
        source = hashlib.sha256(outcome.source).hexdigest()
        session.end(
            "completed",
            outcome={"usage": outcome.usage, "turns": outcome.turns, "verdict_sha256": source},
        )
        return Verdict(
            judge=name,
            judge_version=spec.version,
            status="ok",
            scores=spec.scores(outcome.verdict),
            details={
                "verdict": outcome.verdict.model_dump(mode="json"),
                "model": outcome.model,
                "spec": spec.digest,
                "harness": spec.agent.harness,
                "verdict_sha256": source,
                **world_detail,
            },
            judge_session_id=sid,
        )

    def error(self, spec: JudgeSpec, message: str) -> Verdict:
        """The error verdict of a judge that could not run at all (no judge session)."""
        return Verdict(
            judge=f"llm:{spec.name}", judge_version=spec.version, status="error", error=message
        )

    async def _harness(
        self,
        spec: JudgeSpec,
        session: Session,
        endpoint: ModelEndpoint,
        inputs: JudgeInputs | None,
        world: WorldView | None,
    ) -> HarnessOutcome:
        client = session.capture(self._client(spec.agent.model, endpoint), family=endpoint.family)
        if spec.agent.harness == "null":
            return await run_null(spec, client, endpoint.model)
        if world is None:
            raise JudgeError("a tools judge grades inside a world, and none was given to it")
        with tempfile.TemporaryDirectory(prefix=f"rolltape-judge-{spec.name}-") as folder:
            run_folder = Path(folder)
            (inputs or JudgeInputs()).write(run_folder)
            return await run_tools(
                spec,
                client,
                endpoint.model,
                session=session,
                world=world.path,
                run_folder=run_folder,
                absent=world.absent,
                limits=self.sandbox_limits,
                unsandboxed=self.unsandboxed,
                family=endpoint.family,
            )

    async def aclose(self) -> None:
        """Close the endpoints' clients, and the recorder when this runtime was given it to own
        (`close_recorder`)."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()
        if self._close_recorder:
            await self.recorder.aclose()
