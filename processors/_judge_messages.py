"""The messages between the step and the LLM-judge agent on the worker's internal topics: a
finished session's request, and the judge's result on its way back.

Exists apart from the step because the judge runner (`worker/_judging.py`) and replay read and
write them without stepping a session; a subject session's content travels in them sealed under
its data key, so the internal topics keep no copy of it that erasure does not reach.
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel

from rolltape.processors._sealed_values import session_key, transcript_purpose, verdict_purpose
from rolltape.processors.judges import Transcript
from rolltape.schemas import Verdict, canonical_bytes
from rolltape.schemas.privacy import Access, Keyring, SealedContentError, open_value, seal_value

JUDGE_RESULTS: Final = "judge_results"
"""The `InputRecord.stream` of records from the worker's internal judge-results topic."""


class JudgeRequest(BaseModel):
    """A finished session handed to the LLM-judge agent (internal topic, keyed by session).
    A subject session's transcript travels sealed under its data key (`content_key`), so the
    internal topic keeps no copy of its content that erasure does not reach; the judge agent
    opens it (`opened`)."""

    session_id: str
    judges: tuple[str, ...]
    transcript: Transcript | None = None
    sealed_transcript: str | None = None
    content_key: str | None = None
    """The id of the session's data key its transcript and verdicts are sealed under."""
    causes: tuple[str, ...]
    ts_ns: int

    def opened(self, keys: Keyring | None) -> tuple[JudgeRequest | None, Access]:
        """This request with its transcript in clear, or None and why not (its key erased
        since the session ended, or not held here)."""
        if self.sealed_transcript is None:
            return self, "clear"
        key, access = session_key(keys, self.session_id, self.content_key)
        if key is None:
            return None, access
        try:
            plain = open_value(key, transcript_purpose(self.session_id), self.sealed_transcript)
        except SealedContentError:
            return None, "key unavailable"
        transcript = Transcript.model_validate_json(plain)
        return self.model_copy(update={"transcript": transcript, "sealed_transcript": None}), access


class JudgeResult(BaseModel):
    """A judge's verdict on its way back to the session's verdict chain; None when the judge's
    hook found nothing to judge (no verdict is chained). About a subject session, the verdict
    travels sealed under the session's data key (`content_key`), as its request did."""

    session_id: str
    judge: str
    verdict: Verdict | None
    sealed_verdict: str | None = None
    content_key: str | None = None
    causes: tuple[str, ...]
    ts_ns: int

    def sealed(self, keys: Keyring | None) -> JudgeResult:
        """This result as it may travel: its verdict sealed when `content_key` names a key (a
        verdict about a session whose key is gone meanwhile travels as no verdict)."""
        if self.content_key is None or self.verdict is None:
            return self
        key, _ = session_key(keys, self.session_id, self.content_key)
        sealed = None
        if key is not None:
            plain = canonical_bytes(self.verdict.model_dump(mode="python"))
            sealed = seal_value(key, verdict_purpose(self.session_id, self.judge), plain)
        return self.model_copy(update={"verdict": None, "sealed_verdict": sealed})

    def opened_verdict(self, keys: Keyring | None) -> Verdict | None:
        """The verdict, opened when it travelled sealed; None when there is none, or its key is
        gone (the session was erased while it was judged)."""
        if self.sealed_verdict is None:
            return self.verdict
        key, _ = session_key(keys, self.session_id, self.content_key)
        if key is None:
            return None
        purpose = verdict_purpose(self.session_id, self.judge)
        try:
            return Verdict.model_validate_json(open_value(key, purpose, self.sealed_verdict))
        except SealedContentError:
            return None
