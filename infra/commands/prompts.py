"""`rolltape prompts` wiring: prompt targets read from the log (the versions, their lineage, the
champion), and versions recorded by hand (a first version, a person's edit, a manual promotion).

The pure part is rolltape.projections (`fold_prompts`); this reads and writes Kafka.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from rolltape.infra import open_recorder
from rolltape.infra.broker import require_connection
from rolltape.infra.kafka.sessions import SessionScan, scan_sessions
from rolltape.infra.settings import Settings
from rolltape.projections import PromptTarget, fold_prompts
from rolltape.schemas import PromptPromotion, PromptVersion, Role, Stream

_PROMPT_EVENTS = frozenset({"prompt_version", "prompt_promotion"})


async def prompt_targets(settings: Settings) -> dict[str, PromptTarget]:
    """Every prompt target the log holds, with its history."""
    connection = require_connection(settings, Role.READER)
    scan = SessionScan(keeps=lambda env: env.type in _PROMPT_EVENTS)
    with await scan_sessions(
        connection, [Stream.EVENTS], scan, prefix=settings.topic_prefix
    ) as scanned:
        pairs = [(s.session_id, e) for s in scanned.sessions() for e in s.events]
    return fold_prompts(pairs)


def record_version(
    settings: Settings,
    history: PromptTarget,
    content: str,
    *,
    parents: Sequence[str] = (),
    technique: str | None = None,
    rationale: str | None = None,
    promote: str | None = None,
) -> tuple[PromptVersion, PromptPromotion | None]:
    """Record a version of `history`'s target (parents by label or digest, default: the
    champion when there is one), and with `promote` (the reason) a promotion making it the
    champion. A version already recorded is recorded again under the same digest: the log keeps
    who recorded it when; its label stays the first one."""
    refs = list(parents) or (["champion"] if history.champion is not None else [])
    version = PromptVersion.of(
        history.name,
        content,
        parents=tuple(dict.fromkeys(history.find(ref).version.digest for ref in refs)),
        technique=technique,
        rationale=rationale,
    )
    promotion = None
    if promote is not None:
        champion = history.champion
        promotion = PromptPromotion(
            target=history.name,
            version=version.digest,
            replaces=champion.version.digest if champion is not None else None,
            reason=promote,
        )
    recorder = open_recorder(settings)
    try:
        with recorder.session(
            f"prompt versions of {history.name}",
            session_id=f"prompts.{history.name}.{uuid.uuid4().hex[:12]}",
            trainable=False,
            tags=["prompts", f"target={history.name}"],
        ) as session:
            session.prompt_version(version.model_dump())
            if promotion is not None:
                session.prompt_promotion(promotion.model_dump())
    finally:
        recorder.close(60)
    return version, promotion
