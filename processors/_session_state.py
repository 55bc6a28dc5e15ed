"""`SessionState`: all a worker keeps about one session, and its stored bytes.

Exists apart from the step because the worker's shell (`worker/_shell.py`) saves it to its
state table and reads it back without stepping, and its stored form is a contract of its own:
a newer worker reads the states an older one saved (`tests/golden/processors/`), and a subject
session's transcript is never at rest in clear.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import pydantic_core
from pydantic import TypeAdapter

from rolltape.processors._sealed_values import transcript_purpose
from rolltape.processors.audit import ChainHead
from rolltape.processors.filters import FilterState
from rolltape.processors.judges import TrainingJudgeState, Transcript
from rolltape.processors.rules import RuleState
from rolltape.schemas import ChainHeadLeaf, session_binding
from rolltape.schemas.privacy import ContentKey, seal_value


@dataclass
class SessionState:
    """All a worker keeps about one session (rewritten to a changelog on every update)."""

    last_offsets: dict[str, int] = field(default_factory=dict)
    """topic -> offset of the last record processed: a consumer redelivery is skipped."""
    chains: dict[str, ChainHead] = field(default_factory=dict)
    outputs: dict[str, tuple[int, str]] = field(default_factory=dict)
    """output stream -> (next seq, head hash): the heads of the chains written for the session
    (a ChainWriter's heads)."""
    kind: str | None = None
    task: str | None = None
    """From the events stream's session_started (as `kind`); until it is read, the metrics
    stream's events wait in `early` (the rule set to evaluate them under is the task's)."""
    early: list[tuple[str, str, int, dict[str, Any]]] = field(default_factory=list)
    """(type, hash, ts_ns, payload as decoded) of the metrics stream's events read before the
    session's task was known, in chain order."""
    rules: RuleState = field(default_factory=RuleState)
    filters: FilterState = field(default_factory=FilterState)
    judge: TrainingJudgeState = field(default_factory=TrainingJudgeState)
    ended: dict[str, str] = field(default_factory=dict)
    """stream -> hash of its session_ended."""
    ended_ts: dict[str, int] = field(default_factory=dict)
    """stream -> ts_ns of its session_ended (end-of-session outputs take the latest, whichever
    topic happened to be read last)."""
    end: dict[str, Any] | None = None
    """The events stream's session_ended payload."""
    finished: bool = False
    transcript: Transcript | None = None
    """Kept only for agent sessions that judges will read. A subject session's is stored
    sealed (`sealed_transcript`), and opened again when the state is read back."""
    sealed_transcript: str | None = None
    content_key: str | None = None
    """The id of the data key a subject session's content was opened with: what the outputs
    about that content (verdicts, filter reasons, the stored transcript) are sealed under."""
    unopened: str | None = None
    """Why a subject session's content could not be opened (`erased`, `key unavailable`): it is
    then filtered out, and its judges skipped."""
    review: tuple[str, str, str, int] | None = None
    """(verdict, reviewer, hash, ts_ns) of the first reviewer's verdict the worker read, where
    the filters wait for review (`FilterConfig.require_review`)."""
    review_wait: tuple[int, tuple[str, ...], dict[str, Any]] | None = None
    """(ts_ns, causes, the accepted outcome as dumped) of a finished session's end, while its
    filter outcome waits for that verdict (an accepted outcome holds no reasons: nothing of the
    session's content is kept for it)."""
    judged: dict[str, str] = field(default_factory=dict)
    """LLM judge name -> event id of its verdict (a second result is a duplicate)."""
    outbox: list[tuple[str, str, str, bytes]] = field(default_factory=list)
    """(stream, type, event id, record) of chained outputs saved before they are sent: after a
    crash they are resent byte for byte instead of being derived again, because the raw topics
    may interleave differently on the second read and the output chains must not change.
    Stored as the record's UTF-8 text (every record sealed here is canonical JSON)."""
    tree: dict[str, Any] | None = None
    """A checkpoint log's tree ({"size", "frontier": hex hashes}); None for sessions."""

    def to_bytes(self) -> bytes:
        """The stored form: JSON, with non-finite floats as the canonical tokens (which the
        typed fields read back as floats) and the outbox's records as their UTF-8 text.
        pydantic-core's encoder, not the canonical one: nothing hashes a state, and a batch
        saves every session it touched twice."""
        fields = dict(vars(self))
        key: ContentKey | None = fields.pop("_key", None)
        if self.transcript is not None:  # a model applies its own config (NaN as null): not here
            dumped = self.transcript.model_dump(mode="python")
            if self.content_key is None:
                fields["transcript"] = dumped
            else:  # a subject session's content is never at rest in clear
                fields["transcript"] = None
                if key is not None:
                    plain = pydantic_core.to_json(dumped, inf_nan_mode="strings")
                    purpose = transcript_purpose(self.transcript.session_id)
                    fields["sealed_transcript"] = seal_value(key, purpose, plain)
        return pydantic_core.to_json(fields, inf_nan_mode="strings")

    def use_key(self, key: ContentKey) -> None:
        """Seal this session's stored content under `key` from now on (held in memory only)."""
        self.content_key = key.key_id
        self.__dict__["_key"] = key

    @classmethod
    def from_bytes(cls, data: bytes) -> SessionState:
        """A state from its stored form, by the types of its fields (one adapter for every
        nested part: audit heads, rule, filter and judge states, transcript, outbox)."""
        return _stored_state().validate_json(data)

    def head_leaves(self, sid: str, *, binding: bool = False) -> list[ChainHeadLeaf]:
        """The heads of the raw chains audited and of the chains written for the session (an
        export's line is folded from both), as checkpoint leaves; with `binding`, the leaf that
        binds them all."""
        chains = {s: (c.next_seq - 1, c.head) for s, c in self.chains.items()}
        chains.update({s: (int(o[0]) - 1, str(o[1])) for s, o in self.outputs.items()})
        heads = {s: head for s, head in sorted(chains.items()) if head[0] >= 0}
        leaves = [
            ChainHeadLeaf(stream=s, session_id=sid, seq=q, hash=h) for s, (q, h) in heads.items()
        ]
        if binding:
            leaves.append(session_binding(sid, heads))
        return leaves


@functools.cache
def _stored_state() -> TypeAdapter[SessionState]:
    """Built once, on first use (building the schema takes a few milliseconds)."""
    return TypeAdapter(SessionState)
