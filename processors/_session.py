"""Everything the processors compute about one session, as one pure step per input record.

Invariant: `SessionProcessor.step(state, event, position, out)` is deterministic: the outputs
(sealed records, refusals, judge requests) and the new state depend only on the state, the event,
its log position and the config. `handle` is the one route in: it reads a raw record or a judge
result, dead-letters what cannot be attributed to a session, and steps the rest. The worker,
batch replay and the tests all drive it; the worker only adds Kafka, persistence and the ordering
"outputs acknowledged, then state saved".

Output chains (rules, verdicts, filtered) are per session, like the raw ones; the state carries
their heads, so a crash before the state is saved replays the same inputs into byte-identical
outputs (the same seq, hash and event id), which readers count as redeliveries.

This module is the step alone. What it is told, what it keeps about a session, what it exchanges
with the LLM judges and what it gives back live beside it (`_processor_config.py`,
`_session_state.py`, `_judge_messages.py`, `_outputs.py`; the keys and purposes of sealed values
in `_sealed_values.py`); which event types each raw stream may carry is
`rolltape.schemas.STREAM_EVENT_TYPES`.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Final

from pydantic import BaseModel, ValidationError

from rolltape.processors._judge_messages import JUDGE_RESULTS, JudgeRequest, JudgeResult
from rolltape.processors._outputs import DeadLetter, Emitted, Output, Refused, Requested, StepOutput
from rolltape.processors._processor_config import ProcessorConfig
from rolltape.processors._sealed_values import session_key, transcript_purpose
from rolltape.processors._session_state import SessionState
from rolltape.processors.audit import (
    AUDITOR_VERSION,
    CHECKPOINT_LOG_PREFIX,
    CHECKPOINT_VERSION,
    Admitted,
    ChainHead,
    DeadLettered,
    InputRecord,
    Position,
    Redelivered,
    audit,
    parse_record,
)
from rolltape.processors.filters import FILTER_VERSION, FilterState, observe, outcome
from rolltape.processors.judges import (
    JUDGE_VERSION,
    JUDGES,
    REWARDS,
    TrainingJudgeState,
    Transcript,
    judge,
)
from rolltape.processors.rules import (
    RULES_VERSION,
    EpochOrderError,
    RuleState,
    epoch_order_error,
    evaluate,
    restart_course,
)
from rolltape.schemas import (
    CONTENT_FIELDS,
    HUMAN_CHAIN,
    STREAM_EVENT_TYPES,
    BreakKind,
    ChainBroken,
    ChainHeadLeaf,
    ChainWriter,
    Checkpoint,
    Decision,
    FilterOutcome,
    FilterReason,
    HumanVerdict,
    LiveCheck,
    Metric,
    ModelSpec,
    PayloadError,
    SessionEnded,
    SessionStarted,
    Stream,
    TreeHead,
    TypedEvent,
    UnreadableRecord,
    canonical_bytes,
    canonical_dump_bytes,
    derived_event_id,
    parse_payload,
    read_event,
    versioned_stream,
)
from rolltape.schemas.privacy import (
    SealedContentError,
    open_value,
    seal_content,
    seal_value,
    sealed_key_id,
    withhold_content,
)
from rolltape.schemas.trust import Frontier, consistency_from_frontier, sign_tree_head

log = logging.getLogger("rolltape.processors")

PRODUCER_NAME: Final = "rolltape.processors"
_EVENTS: Final = Stream.EVENTS.value
"""The events stream's name (an enum member's `.value` costs a lookup on every event)."""
_NO_TYPES: Final[frozenset[str]] = frozenset()


def _last_epoch(state: SessionState) -> int:
    """The latest epoch evaluated or waiting to be (a metric must come after it)."""
    waiting = [int(fields["epoch"]) for kind, _, _, fields in state.early if kind == "metric"]
    return max(waiting, default=state.rules.last_epoch)


def _llm_judge_version(name: str, reported: str) -> str:
    """The version a judge's verdict is chained under: the registered judge's, else what its
    verdict reported (a judge no longer registered here)."""
    registered = JUDGES.get(name)
    return registered.version if registered else reported


class SessionProcessor:
    """The pure per-session step; one instance serves every session of a worker."""

    def __init__(self, config: ProcessorConfig) -> None:
        self.config = config
        self._producer = {
            "name": PRODUCER_NAME,
            "version": config.software_version,
            "principal": config.principal,
        }
        self._judge_producer = {**self._producer, "principal": config.judge_principal}

    def step(
        self, state: SessionState, env: TypedEvent, position: Position | None, out: list[StepOutput]
    ) -> None:
        """Process one event whose record's key is its session id, appending its outputs to
        `out` as they are sealed: an output chain's head never moves without its record being
        in `out`, even when a later part of the step raises."""
        if _seen_before(state, position):
            return  # the consumer saw this record before the last saved state: done already
        chain = state.chains.get(env.stream)
        if chain is None:  # not setdefault: it would build a head for every event
            chain = state.chains[env.stream] = ChainHead()
        result = audit(chain, env)
        if isinstance(result, Redelivered):
            return
        assert isinstance(result, Admitted)
        for brk in result.breaks:
            out.append(self._chain_broken(state, position, env, brk.kind, brk.seq, brk.detail))
        if not result.usable:
            return
        writers = self.config.writers.get(env.stream)
        if writers is not None and env.producer.principal not in writers:
            # The broker authenticated whoever wrote it, but the envelope names someone else:
            # either a principal of another trust domain, or a writer lying about itself. The
            # flag makes the session fail its audit and filters; the record still counts for
            # the session's course (its end), so the session is judged, not left open.
            detail = (
                f"the envelope names principal {env.producer.principal!r}, which does not write "
                f"the {env.stream} stream (its writers: {', '.join(sorted(writers))})"
            )
            kind = BreakKind.FOREIGN_PRINCIPAL
            out.append(self._chain_broken(state, position, env, kind, env.seq, detail))
        if env.type not in STREAM_EVENT_TYPES.get(env.stream, _NO_TYPES):
            detail = f"{env.type!r} does not belong on the {env.stream} stream"
            out.append(Refused("wrong_stream", detail))
            return
        content = True
        try:
            if "sealed" in env.payload:
                env, content = self._opened(state, env)
            payload = env.body
        except PayloadError as exc:
            out.append(Refused("invalid_payload", str(exc)[:500]))
            return
        if (
            env.stream == HUMAN_CHAIN
            and getattr(payload, "reviewer", None) != env.producer.principal
        ):
            # A review speaks for the login that wrote it: one naming another reviewer is
            # kept out of every reader's count (the folds skip it too).
            detail = (
                f"the review names reviewer {getattr(payload, 'reviewer', None)!r} but was "
                f"written as {env.producer.principal!r}"
            )
            out.append(Refused("reviewer_not_writer", detail))
            return
        self._use(state, env, payload, out, content=content)
        self._maybe_finish(state, env, out)

    def _opened(self, state: SessionState, env: TypedEvent) -> tuple[TypedEvent, bool]:
        """The event with its sealed content opened, and True; or the event as sealed, and
        False, noting once why its session's content cannot be read here (the filters then
        reject the session and its judges skip it: what they would read is not there)."""
        keys = self.config.keys
        opened, access = (None, "key unavailable") if keys is None else keys.open_event(env)
        if opened is not None:
            if state.content_key is None and keys is not None:
                key = keys.key(env.session_id, sealed_key_id(env.payload) or "")
                if key is not None:
                    state.use_key(key)
            return opened, True
        _cannot_open(state, access, env.hash)
        return env, False

    # -- using a usable event ----------------------------------------------------------------------
    def _use(
        self,
        state: SessionState,
        env: TypedEvent,
        payload: BaseModel,
        out: list[StepOutput],
        *,
        content: bool = True,
    ) -> None:
        """`content`: False for an event whose sealed content could not be opened (its clear
        fields are read, never the empty ones sealing left)."""
        if isinstance(payload, Metric | ModelSpec | LiveCheck):
            if state.kind is not None:  # session_started read (a state saved before tasks were
                # kept has its kind but no task: its metrics go on under the book's fallback)
                self._measured(state, env.session_id, env.hash, env.ts_ns, payload, out)
            elif isinstance(payload, Metric) and payload.epoch <= _last_epoch(state):
                self._refuse_epoch(state, payload.epoch, _last_epoch(state), out)
            else:  # the rule set is the task's: wait for the session_started that names it
                state.early.append((env.type, env.hash, env.ts_ns, dict(env.payload)))
            return
        if isinstance(payload, SessionEnded):
            state.ended[env.stream] = env.hash
            state.ended_ts[env.stream] = env.ts_ns
            if env.stream == _EVENTS:
                state.end = payload.model_dump(mode="json")
        if isinstance(payload, HumanVerdict):
            self._reviewed(state, env, payload, out)
            return
        if env.stream != _EVENTS:
            return
        if isinstance(payload, SessionStarted):
            state.kind, state.task = payload.kind, payload.task
            state.judge.run_config = dict(payload.run_config)
            self._measure_early(state, env.session_id, out)
            judged = payload.trainable and payload.linked_session_id is None
            if (
                payload.kind == "agent"
                and judged
                and (self.config.rewards or self.config.llm_judges)
            ):
                state.transcript = Transcript(session_id=env.session_id)
        elif isinstance(payload, Decision):
            state.judge.add_decision(payload, env.hash)
        if content or env.type in _READ_SEALED:
            observe(state.filters, self.config.filters, payload, env.hash)
        transcript = self._transcript(state, env.session_id)
        if transcript is not None:
            transcript.observe(payload, self.config.transcript_max_chars)

    def _transcript(self, state: SessionState, sid: str) -> Transcript | None:
        """The transcript the judges will read: the one in memory, or the one the stored state
        keeps sealed, opened (None when its key is gone: the session's judges are skipped)."""
        if state.transcript is None and state.sealed_transcript is not None:
            key, access = session_key(self.config.keys, sid, state.content_key)
            try:
                if key is None:
                    raise SealedContentError(access)
                plain = open_value(key, transcript_purpose(sid), state.sealed_transcript)
            except SealedContentError:
                state.unopened = state.unopened or access
                state.sealed_transcript = None
                return None
            state.transcript = Transcript.model_validate_json(plain)
            state.sealed_transcript = None
            state.use_key(key)
        return state.transcript

    def _measured(
        self,
        state: SessionState,
        sid: str,
        event_hash: str,
        ts_ns: int,
        payload: BaseModel,
        out: list[StepOutput],
    ) -> None:
        """Use a metrics-stream event once the session's task is known: a metric is evaluated
        under the task's rule set; training runs' judge keeps metrics, specs and live checks."""
        training = state.kind != "agent"  # only training runs are judged on their epochs
        rules = self.config.rules.for_task(state.task)
        if isinstance(payload, Metric):
            try:
                evaluation, causes = evaluate(rules, state.rules, payload, event_hash)
            except EpochOrderError:
                self._refuse_epoch(state, payload.epoch, state.rules.last_epoch, out)
                return
            out.append(
                self._emit(
                    state,
                    sid,
                    ts_ns,
                    Stream.RULES,
                    "rule_evaluation",
                    evaluation,
                    causes,
                    RULES_VERSION,
                )
            )
            if training:
                state.judge.add_metric(evaluation, payload, event_hash)
        elif isinstance(payload, ModelSpec):
            if payload.phase != "final":  # a new network from here on
                restart_course(rules, state.rules)
            if training:
                state.judge.add_spec(payload, event_hash)
        elif isinstance(payload, LiveCheck) and training:
            state.judge.add_live_check(payload, event_hash)

    def _measure_early(self, state: SessionState, sid: str, out: list[StepOutput]) -> None:
        """The metrics-stream events that waited for the session's task, in chain order."""
        early, state.early = state.early, []
        for kind, event_hash, ts_ns, fields in early:
            measured = parse_payload(kind, fields, lenient=True)
            self._measured(state, sid, event_hash, ts_ns, measured, out)

    @staticmethod
    def _refuse_epoch(state: SessionState, epoch: int, last: int, out: list[StepOutput]) -> None:
        out.append(Refused("epoch_out_of_order", epoch_order_error(epoch, last)))
        state.judge.rejected_metrics += 1

    def _maybe_finish(self, state: SessionState, env: TypedEvent, out: list[StepOutput]) -> None:
        end = state.end
        if state.finished or end is None:
            return
        if any(stream not in state.ended for stream in end.get("streams", ())):
            return  # another of the session's chains has not ended yet
        state.finished = True
        # A session whose session_started never came (lost, or tampered with) is judged on its
        # metrics all the same, under the book's fallback: deterministic, as every chain ended.
        self._measure_early(state, env.session_id, out)
        causes = tuple(state.ended[s] for s in sorted(state.ended))
        # Anchored on the session's ends, not on the record that happened to arrive last: the
        # raw topics interleave differently on every read, the outputs must not.
        self._finish(state, env.session_id, max(state.ended_ts.values()), end, causes, out)
        # Only the chain heads are needed from now on (to flag records after the end).
        state.rules, state.filters, state.judge = RuleState(), FilterState(), TrainingJudgeState()
        state.transcript = state.sealed_transcript = None

    def _finish(
        self,
        state: SessionState,
        sid: str,
        ts_ns: int,
        end: dict[str, Any],
        causes: tuple[str, ...],
        out: list[StepOutput],
    ) -> None:
        key_id = state.content_key
        keys = self.config.keys  # erased since it was read?
        if key_id is not None and keys is not None and (a := keys.access(sid, key_id)) != "opened":
            _cannot_open(state, a, causes[-1])
        if (state.kind or "agent") == "training":
            config = self.config.training_judge
            verdict = judge(
                state.judge,
                status=end["status"],
                outcome=end.get("outcome") or {},
                end_hash=state.ended[Stream.EVENTS.value],
                config=config,
            )
            version = f"{JUDGE_VERSION}:{config.label}"
            out.append(
                self._emit(state, sid, ts_ns, Stream.VERDICTS, "verdict", verdict, causes, version)
            )
            return
        result = outcome(state.filters, self.config.filters)
        if not (self.config.filters.require_review and result.accepted):
            # Rejected on its own record: no review can accept it, so none is waited for.
            self._filter_outcome(state, sid, ts_ns, causes, result, None, out)
        elif state.review is not None:
            self._filter_outcome(state, sid, ts_ns, causes, result, state.review, out)
        else:  # decided by the first reviewer's verdict; an accepted outcome quotes no content
            state.review_wait = (ts_ns, causes, result.model_dump(mode="json"))
        transcript = self._transcript(state, sid)
        if transcript is None:
            return
        for name in self.config.rewards:
            function = REWARDS[name]
            verdict = function.verdict(transcript)
            out.append(
                self._emit(
                    state,
                    sid,
                    ts_ns,
                    Stream.VERDICTS,
                    "verdict",
                    verdict,
                    causes,
                    function.version,
                    part=f"reward:{name}",
                )
            )
        if self.config.llm_judges:
            request = JudgeRequest(
                session_id=sid,
                judges=self.config.llm_judges,
                transcript=transcript,
                causes=causes,
                ts_ns=ts_ns,
            )
            key, _ = session_key(self.config.keys, sid, state.content_key)
            if state.content_key is not None:
                if key is None:
                    return  # erased while it was being judged: nothing to hand a judge
                plain = canonical_bytes(transcript.model_dump(mode="python"))
                sealed = seal_value(key, transcript_purpose(sid), plain)
                request = request.model_copy(
                    update={
                        "transcript": None,
                        "sealed_transcript": sealed,
                        "content_key": key.key_id,
                    }
                )
            value = canonical_bytes(request.model_dump(mode="python"))
            out.append(Requested(sid, value))

    def _filter_outcome(
        self,
        state: SessionState,
        sid: str,
        ts_ns: int,
        causes: tuple[str, ...],
        result: FilterOutcome,
        review: tuple[str, str, str, int] | None,
        out: list[StepOutput],
    ) -> None:
        """The session's filter outcome; with the reviewer's verdict it waited for, anchored on
        the later of the session's end and the verdict, with the verdict among its causes (a
        fail rejects it: `reviewer_failed`), whichever of the two the worker read first: the
        same bytes on every read."""
        if review is not None:
            verdict, reviewer, at, reviewed_ts = review
            ts_ns, causes = max(ts_ns, reviewed_ts), (*causes, at)
            if verdict == "fail":
                failed = FilterReason(
                    code="reviewer_failed", message=f"reviewer {reviewer} failed it", evidence=(at,)
                )
                reasons = tuple(sorted((*result.reasons, failed), key=lambda r: r.code))
                result = result.model_copy(update={"accepted": False, "reasons": reasons})
        label = f"{FILTER_VERSION}:{self.config.filters.label}"
        out.append(
            self._emit(state, sid, ts_ns, Stream.FILTERED, "filter_outcome", result, causes, label)
        )

    def _reviewed(
        self, state: SessionState, env: TypedEvent, review: HumanVerdict, out: list[StepOutput]
    ) -> None:
        """A reviewer's verdict, where the filters wait for review: the first one a reviewer
        wrote decides; a finished session held for it is decided now (also once the setting is
        off again: a held session is never stranded). Later verdicts are the read model's and
        the exports' to weigh."""
        waiting = state.review_wait
        if state.review is not None or not (self.config.filters.require_review or waiting):
            return
        writers = self.config.writers.get(HUMAN_CHAIN)
        if writers is not None and env.producer.principal not in writers:
            return  # flagged as a foreign principal by the audit; it decides nothing
        state.review = (review.verdict, review.reviewer, env.hash, env.ts_ns)
        if waiting is not None:
            ts_ns, causes, held = waiting
            state.review_wait = None
            result = FilterOutcome.model_validate(held)
            self._filter_outcome(state, env.session_id, ts_ns, causes, result, state.review, out)

    def judge_result(
        self, state: SessionState, result: JudgeResult, position: Position | None
    ) -> list[Emitted]:
        """Chain an LLM judge's verdict into the session's verdicts stream (once per judge).
        `position`: the result's place on the judge-results topic; None for a judge a replay
        called itself."""
        if _seen_before(state, position):
            return []
        verdict = result.opened_verdict(self.config.keys)
        if result.judge in state.judged or verdict is None:
            return []  # the judge ran twice (its agent restarted): the first verdict stands
        version = _llm_judge_version(result.judge, verdict.judge_version)
        emitted = self._emit(
            state,
            result.session_id,
            result.ts_ns,
            Stream.VERDICTS,
            "verdict",
            verdict,
            result.causes,
            version,
            part=f"llm:{result.judge}",
        )
        state.judged[result.judge] = emitted.event_id
        return [emitted]

    def llm_verdict_id(self, session_id: str, judge_name: str, causes: tuple[str, ...]) -> str:
        """The event id `judge_result` gives this judge's verdict on the session."""
        version = _llm_judge_version(judge_name, "unknown")
        stream = versioned_stream(Stream.VERDICTS, self.config.judge_version)
        return derived_event_id(stream, session_id, "verdict", version, causes, f"llm:{judge_name}")

    def adopt_verdict(
        self, state: SessionState, session_id: str, judge_name: str, value: bytes
    ) -> Emitted | None:
        """Take an LLM verdict an earlier run of this judge version already wrote as this run's
        (LLM verdicts are not reproducible byte for byte; their ids are), so later outputs chain
        on it. None when it does not sit at the chain's next seq."""
        try:
            env = read_event(value)
        except UnreadableRecord:
            return None
        stream = versioned_stream(Stream.VERDICTS, self.config.judge_version)
        writer = ChainWriter(state.outputs)
        seq, _ = writer.head(stream)
        if env.stream != stream or env.seq != seq or judge_name in state.judged:
            return None
        writer.take_over(stream, seq + 1, env.hash)
        state.judged[judge_name] = env.event_id
        return Emitted(stream, session_id, value, env.event_id, "verdict")

    # -- output chains -----------------------------------------------------------------------------
    def _chain_broken(
        self,
        state: SessionState,
        position: Position | None,
        env: TypedEvent,
        kind: BreakKind,
        seq: int | None,
        detail: str,
    ) -> Emitted:
        if env.stream != HUMAN_CHAIN:
            # A reviewers' fork or a forged review is flagged, and the review set aside: it
            # does not make the session's own record untrustworthy (the folds read it so too).
            state.judge.add_break(env.stream, seq, kind.value, detail)
            state.filters.note("chain_broken", f"{env.stream} seq {seq}: {kind.value}", env.hash)
        payload = ChainBroken(
            stream=env.stream,
            seq=seq,
            reason=kind,
            detail=detail,
            position=None if position is None else str(position),
            auditor_version=AUDITOR_VERSION,
        )
        return self._emit(
            state,
            env.session_id,
            env.ts_ns,
            Stream.VERDICTS,
            "chain_broken",
            payload,
            (env.hash,),
            AUDITOR_VERSION,
            part=f"{kind.value}|{'' if position is None else position}",
        )

    def checkpoint(
        self, state: SessionState, log: str, leaves: Sequence[ChainHeadLeaf], timestamp_ms: int
    ) -> Emitted:
        """Append `leaves` to the checkpoint log whose state is `state` and emit the signed
        tree head, with the proof that it extends the previous one."""
        signer = self.config.signer
        if signer is None:
            raise ValueError("checkpoints need the judge's key (ProcessorConfig.signer)")
        tree = state.tree or {"size": 0, "frontier": []}
        frontier = Frontier(tree["size"], [bytes.fromhex(h) for h in tree["frontier"]])
        hashes = [leaf.leaf_hash() for leaf in leaves]
        proof = consistency_from_frontier(frontier, hashes)
        previous = frontier.size
        for digest in hashes:
            frontier.append(digest)
        head = TreeHead(
            log=log,
            tree_size=frontier.size,
            root_hash=frontier.root().hex(),
            timestamp_ms=timestamp_ms,
            key_id=signer.key_id,
        )
        payload = Checkpoint(
            tree_head=head,
            signature=sign_tree_head(signer.key, head),
            previous_size=previous,
            consistency=tuple(h.hex() for h in proof),
            leaves=tuple(leaves),
        )
        state.tree = {"size": frontier.size, "frontier": [n.hex() for n in frontier.nodes]}
        return self._emit(
            state,
            log,
            timestamp_ms * 1_000_000,
            Stream.VERDICTS,
            "checkpoint",
            payload,
            tuple(leaf.hash for leaf in leaves),
            CHECKPOINT_VERSION,
            part=str(frontier.size),
        )

    def _emit(
        self,
        state: SessionState,
        sid: str,
        ts_ns: int,
        stream: Stream,
        event_type: str,
        payload: BaseModel,
        causes: tuple[str, ...],
        version: str,
        part: str = "",
    ) -> Emitted:
        name = versioned_stream(stream, self.config.judge_version)
        event_id = derived_event_id(name, sid, event_type, version, causes, part)
        writer = ChainWriter(state.outputs)
        dumped = payload.model_dump(mode="python")
        if state.content_key is not None and event_type in CONTENT_FIELDS:
            dumped = self._sealed(state, sid, name, writer.head(name)[0], event_type, dumped)
        value, _ = writer.append(
            name,
            stream=name,
            session_id=sid,
            ts_ns=ts_ns,
            type=event_type,
            payload=canonical_dump_bytes(dumped),
            producer=self._judge_producer if stream == Stream.VERDICTS else self._producer,
            event_id=event_id,
            causes=causes,
        )
        return Emitted(name, sid, value, event_id, event_type)

    def _sealed(
        self,
        state: SessionState,
        sid: str,
        stream: str,
        seq: int,
        event_type: str,
        dumped: dict[str, Any],
    ) -> dict[str, Any]:
        """An output about a subject session's content, sealed under the data key it was read
        with (so erasing that key erases what was said about it too); with its content fields
        left out when the key is gone meanwhile (nothing of an erased session leaves in clear)."""
        key, _ = session_key(self.config.keys, sid, state.content_key)
        if key is not None:
            return seal_content(event_type, dumped, key, stream=stream, session_id=sid, seq=seq)
        return withhold_content(event_type, dumped)


def _cannot_open(state: SessionState, access: str, evidence: str) -> None:
    """Note once why the session's content cannot be read here: the filters reject it and its
    judges skip it (what they would read is not there, or no longer may be)."""
    if state.unopened is None:
        state.unopened = access
        code = "content_erased" if access == "erased" else "content_unavailable"
        detail = f"its content is sealed and its data key is {access} here"
        if access == "erased":
            detail = "its content is sealed and its data key was erased"
        state.filters.note(code, detail, evidence)
    state.transcript = state.sealed_transcript = None


_READ_SEALED: Final = frozenset({"session_started", "session_ended"})
"""Event types whose fields the filters read are all in clear (a session's tools and whether it
is trainable; its status): read even when their sealed content cannot be opened."""


def _seen_before(state: SessionState, position: Position | None) -> bool:
    """Whether the record at `position` was processed before the state was saved (a consumer
    redelivery), noting it as processed otherwise. Inputs from no log are never redeliveries."""
    if position is None:
        return False
    if position.offset <= state.last_offsets.get(position.topic, -1):
        return True
    state.last_offsets[position.topic] = position.offset
    return False


def handle(
    processor: SessionProcessor,
    states: dict[str, SessionState],
    record: InputRecord,
    load: Callable[[str], SessionState] = lambda sid: SessionState(),
    decoded: list[TypedEvent] | None = None,
) -> tuple[str | None, list[Output]]:
    """Route one record, raw or a judge result: dead-letter what cannot be attributed to a
    session, step the rest. A session not in `states` is `load`ed (the worker reads its table;
    tests start fresh). Returns the session touched (None for a dead letter) and the outputs,
    in order. A raw record's event, as the step decoded it (its payload model read once), is
    appended to `decoded` when given: a reader that folds after the step reads it from there
    instead of decoding the record again.

    Total: a step that raises (a bug) dead-letters its record with the error and keeps the
    outputs it sealed before raising, whose chain heads the state already holds."""
    result: JudgeResult | None = None
    event: TypedEvent | None = None
    if record.stream == JUDGE_RESULTS:
        try:
            result = JudgeResult.model_validate_json(record.value)
        except ValidationError as exc:
            return None, [DeadLetter(record, "invalid_judge_result", str(exc)[:500])]
        sid = result.session_id
    else:
        parsed = parse_record(record)
        if isinstance(parsed, DeadLettered):
            return None, [DeadLetter(record, parsed.reason.value, parsed.detail)]
        event, sid = parsed, parsed.session_id
        if sid.startswith(CHECKPOINT_LOG_PREFIX):
            detail = (
                f"session ids starting {CHECKPOINT_LOG_PREFIX!r} name the judge's checkpoint logs"
            )
            return None, [DeadLetter(record, "reserved_session_id", detail)]
        if decoded is not None:
            decoded.append(event)
    state = states.get(sid)
    if state is None:
        state = states[sid] = load(sid)
    stepped: list[StepOutput] = []
    failed: list[Output] = []
    try:
        if result is not None:
            stepped += processor.judge_result(state, result, record.position)
        elif event is not None:
            processor.step(state, event, record.position, stepped)
    except Exception as exc:  # the record is kept with why; the session goes on
        log.exception("processing %s failed; dead-lettered", record.where)
        detail = "".join(traceback.format_exception_only(exc)).strip()
        failed.append(DeadLetter(record, "processor_error", detail[:1000]))
    if not stepped:  # most records: nothing to convert
        return sid, failed
    out: list[Output] = [
        DeadLetter(record, o.reason, o.detail) if isinstance(o, Refused) else o for o in stepped
    ]
    return sid, out + failed
