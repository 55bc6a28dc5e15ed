"""The LLM-judge agent's work: call each requested judge, record its conversation, return the
verdicts to the session's partition.

Why a separate agent: a model call takes seconds; inside the session agent it would stall every
session on the partition. Results travel back through an internal topic keyed by the judged
session, so the session agent stays the one writer of the session's verdict chain.

LLM verdicts are not reproducible byte for byte (the model may answer differently); their event
ids are (judge version + the judged session's end hashes), so a rerun after a crash is dropped
by id and the first verdict stands.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

from rolltape.processors._session import PRODUCER_NAME, JudgeRequest, JudgeResult
from rolltape.processors.judges import LLM_JUDGES, JudgeRun, run_llm_judge
from rolltape.processors.worker._producers import OutputProducer
from rolltape.schemas import (
    PAYLOAD_MODELS,
    ChainWriter,
    Stream,
    Verdict,
    canonical_bytes,
    topic_name,
)
from rolltape.schemas.clients import ModelEndpoint

log = logging.getLogger("rolltape.processors.worker")


class JudgeRunner:
    """Runs the LLM judges on finished sessions, records each judge's own conversation and
    sends the verdicts back to the session's worker through the results topic."""

    def __init__(
        self,
        producer: OutputProducer,
        *,
        models: dict[str, ModelEndpoint],
        topic_prefix: str,
        results_topic: str,
        software_version: str,
        max_concurrent: int = 8,
        principal: str = "judge",
    ) -> None:
        self.producer = producer
        self.models = models
        self.events_topic = topic_name(Stream.EVENTS, topic_prefix)
        self.results_topic = results_topic
        self._producer_info = {
            "name": PRODUCER_NAME,
            "version": software_version,
            "principal": principal,
        }
        self._clients: dict[str, Any] = {}
        self._limit = asyncio.Semaphore(max_concurrent)

    def _client(self, logical: str, endpoint: ModelEndpoint) -> Any:
        client = self._clients.get(logical)
        if client is None:
            client = self._clients[logical] = endpoint.async_client()
        return client

    async def handle(self, requests: list[JudgeRequest]) -> None:
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
        """Run one LLM judge on one request; its conversation is recorded as a session of its
        own. Never raises for a judge's failure: that is an error verdict."""
        judge = LLM_JUDGES.get(name)
        if judge is None:
            verdict = Verdict(
                judge=f"llm:{name}",
                judge_version="unknown",
                status="error",
                error=f"no LLM judge named {name!r} is registered in this worker",
            )
            return self._result(request, name, verdict)
        endpoint = self.models.get(judge.model)
        if endpoint is None:
            verdict = Verdict(
                judge=f"llm:{name}",
                judge_version=judge.version,
                status="error",
                error=f"no endpoint is bound to the logical model {judge.model!r}; set it in "
                "ROLLTAPE_MODELS",
            )
            return self._result(request, name, verdict)
        async with self._limit:
            run = await run_llm_judge(
                judge, request.transcript, self._client(judge.model, endpoint), endpoint
            )
        judge_session = await self._record_conversation(request, name, run)
        verdict = run.verdict.model_copy(update={"judge_session_id": judge_session})
        return self._result(request, name, verdict)

    def _result(self, request: JudgeRequest, name: str, verdict: Verdict) -> JudgeResult:
        return JudgeResult(
            session_id=request.session_id,
            judge=name,
            verdict=verdict,
            causes=request.causes,
            ts_ns=request.ts_ns,
        )

    async def _record_conversation(self, request: JudgeRequest, name: str, run: JudgeRun) -> str:
        """The judge's conversation as a session of its own: trainable=false, linked to the
        judged session. Each run is a new session id, so a rerun never forks a chain."""
        sid = f"judge.{name}.{uuid.uuid4().hex[:20]}"
        events: list[tuple[str, dict[str, Any]]] = [
            (
                "session_started",
                {
                    "task": f"judge {name} on session {request.session_id}",
                    "model": run.model,
                    "trainable": False,
                    "linked_session_id": request.session_id,
                    "tags": ["judge", name],
                },
            )
        ]
        events += [("turn", {"role": m["role"], "content": m["content"]}) for m in run.messages]
        if run.reply is not None:
            events.append(("turn", {"role": "assistant", "content": run.reply}))
        failed = run.verdict.status == "error"
        events.append(
            (
                "session_ended",
                {
                    "status": "failed" if failed else "completed",
                    "error": run.verdict.error,
                    "outcome": {"usage": run.usage},
                },
            )
        )
        writer: ChainWriter[str] = ChainWriter()
        futures = []
        for event_type, payload in events:
            value, _ = writer.append(
                sid,
                stream=Stream.EVENTS.value,
                session_id=sid,
                ts_ns=time.time_ns(),
                type=event_type,
                payload=PAYLOAD_MODELS[event_type]
                .model_validate(payload)
                .model_dump(mode="python"),
                producer=self._producer_info,
            )
            futures.append(await self.producer.send(self.events_topic, value, key=sid.encode()))
        await asyncio.gather(*futures)
        return sid
