"""The judge agent's work: make each requested judge's spec for the finished session, run it,
and return the verdicts to the session's partition.

Why a separate agent: a judge run takes seconds; inside the session agent it would stall every
session on the partition. Results travel back through an internal topic keyed by the judged
session, so the session agent stays the one writer of the session's verdict chain.

Running a spec (binding its model, recording the judge's own session, budgets, harnesses) is
the judge runtime's, handed in by whoever builds the worker (rolltape.infra wires
rolltape.producers.judging): the pure packages never import the producer SDK.

A request about a session naming a subject carries its transcript sealed under the session's data
key; the runner opens it with the worker's keyring, runs the judges on it (recording each judge's
own conversation under the same subject, so erasing the subject erases it too) and seals the
verdict before it travels back. A request whose key was erased meanwhile is judged by no one.

Verdicts are not reproducible byte for byte (the model may answer differently); their event
ids are (judge version + the judged session's end hashes), so a rerun after a crash is dropped
by id and the first verdict stands.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from rolltape.processors._judge_messages import JudgeRequest, JudgeResult
from rolltape.processors.judges import JUDGES, Transcript
from rolltape.processors.worker._producers import OutputProducer
from rolltape.schemas import JudgeSpec, Verdict, canonical_bytes
from rolltape.schemas.privacy import Keyring

log = logging.getLogger("rolltape.processors.worker")


class JudgeExecutor(Protocol):
    """Runs one judge spec on the session a request is about (its transcript, and for a tools
    judge its recorded world); every failure of the judge is an error verdict, never an
    exception (rolltape.infra.judging.LogJudges is one). `subject`: whose data the judged
    session holds, which the judge's own recorded conversation names too (None: no subject)."""

    async def run(
        self, spec: JudgeSpec, request: JudgeRequest, *, subject: str | None = None
    ) -> Verdict: ...

    async def aclose(self) -> None: ...


class JudgeRunner:
    """Runs the requested judges on finished sessions and sends the verdicts back to the
    session's worker through the results topic."""

    def __init__(
        self,
        executor: JudgeExecutor | None,
        *,
        producer: OutputProducer | None = None,
        results_topic: str = "",
        keys: Keyring | None = None,
    ) -> None:
        self.executor = executor
        self.producer = producer
        """Where `handle` sends results (the worker); a replay calls `judge` itself."""
        self.results_topic = results_topic
        self.keys = keys
        """What opens subject sessions' transcripts and seals their verdicts (the processor
        config's keyring)."""

    async def handle(self, requests: list[JudgeRequest]) -> None:
        """Judge a batch of requests and send every result to the results topic."""
        if self.producer is None:
            raise ValueError("handle sends results: this runner was built without a producer")
        jobs = [(r, name) for r in requests for name in r.judges]
        results = await asyncio.gather(*(self.judge(r, name) for r, name in jobs))
        futures = []
        for request, result in zip((r for r, _ in jobs), results, strict=True):
            value = canonical_bytes(result.model_dump(mode="python"))
            futures.append(
                await self.producer.send(self.results_topic, value, key=request.session_id.encode())
            )
        await asyncio.gather(*futures)

    async def judge(self, request: JudgeRequest, name: str) -> JudgeResult:
        """Run one judge on one request. Never raises for a judge's failure: that is an error
        verdict; a hook that finds nothing to judge gives no verdict, nor does a session whose
        data key is gone. A verdict about a subject session comes back sealed."""
        opened, access = request.opened(self.keys)
        if opened is None or opened.transcript is None:
            log.info("judge %s skips %s: its data key is %s", name, request.session_id, access)
            return self._result(request, name, None)
        result = await self._judge(opened, opened.transcript, name)
        return result.sealed(self.keys)

    async def _judge(self, request: JudgeRequest, transcript: Transcript, name: str) -> JudgeResult:
        judge = JUDGES.get(name)
        if judge is None:
            return self._error(request, name, "unknown", f"no judge named {name!r} is registered")
        try:
            spec = judge.specs(transcript)
        except Exception as exc:  # a plugin's hook: its failure is the judge's, not the worker's
            log.exception("judge %s could not make its spec for %s", name, request.session_id)
            return self._error(request, name, judge.version, f"the judge's hook failed: {exc!r}")
        if spec is None:
            return self._result(request, name, None)
        if self.executor is None:
            return self._error(request, name, judge.version, "this worker runs no judges")
        subject = None
        if request.content_key is not None and self.keys is not None:
            subject = self.keys.subject(request.session_id)
        try:
            verdict = await self.executor.run(spec, request, subject=subject)
        except Exception as exc:  # an executor's own failure is this judge's, not the worker's
            log.exception("judge %s failed on %s", name, request.session_id)
            return self._error(request, name, judge.version, f"the judge run failed: {exc!r}")
        return self._result(request, name, verdict)

    def _error(self, request: JudgeRequest, name: str, version: str, error: str) -> JudgeResult:
        verdict = Verdict(judge=f"llm:{name}", judge_version=version, status="error", error=error)
        return self._result(request, name, verdict)

    def _result(self, request: JudgeRequest, name: str, verdict: Verdict | None) -> JudgeResult:
        return JudgeResult(
            session_id=request.session_id,
            judge=name,
            verdict=verdict,
            content_key=request.content_key,
            causes=request.causes,
            ts_ns=request.ts_ns,
        )
