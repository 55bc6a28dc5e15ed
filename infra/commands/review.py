"""`rolltape review queue | agreement | record | prefer`: human review without a browser, and
the queues and agreement the console's review page shows.

A queue is a read-model filter over the sessions no reviewer has judged yet (the cron runs routed
to `needs_human_review` are read from the jobs topic); agreement compares each judge with the
reviewers (`IndexStore.judge_agreement`). Recording writes as the reviewer principal the
settings name (ROLLTAPE_SASL_USERNAME, or the reviewer of the principals file) through the one
writer of the reviewers' chains (`rolltape.infra.kafka.reviews`), as the console does for a
logged-in reviewer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from rolltape.infra._errors import InfraError
from rolltape.infra.broker import PrincipalError, principal_store, require_connection
from rolltape.infra.index import (
    IndexHeadLocator,
    JudgeAgreement,
    SessionFilter,
    SessionSummary,
    existing_store,
    store_url,
)
from rolltape.infra.kafka.reviews import REVIEW_TIMEOUT_S, RecordedReview, ReviewWriter
from rolltape.infra.settings import Settings
from rolltape.schemas import (
    HumanPreference,
    HumanVerdict,
    Role,
    RunStatus,
    Stream,
    topic_name,
)
from rolltape.schemas.clients import KafkaClientError, partitions_of

SAMPLE_SEED: Final = "rolltape-review"
QUEUE_SIZE: Final = 50

QUEUES: Final[dict[str, str]] = {
    "needs_human_review": "cron runs whose runner routed them to a person",
    "awaiting_review": "completed sessions no filter has decided yet (a filter with "
    "require_review holds them for a reviewer)",
    "rejected": "sessions the reward filter rejected",
    "disagreeing": "sessions whose judges disagree (one ok, one failed)",
    "accepted_sample": "a random sample of accepted sessions",
}
"""Each queue and what it holds; a session leaves every queue once a reviewer judged it."""


class ReviewSetupError(InfraError):
    """A review cannot be recorded as asked (no reviewer principal, no session): the message
    says what to do."""


@dataclass(frozen=True)
class Queue:
    name: str
    about: str
    sessions: tuple[SessionSummary, ...]
    """The sessions waiting, newest first (at most `QUEUE_SIZE`; the sample's, its first)."""
    waiting: int


@dataclass(frozen=True)
class ReviewBoard:
    queues: tuple[Queue, ...]
    agreement: tuple[JudgeAgreement, ...]
    reviewed: int


def review_board(settings: Settings, cron_sessions: tuple[str, ...] | None) -> ReviewBoard:
    """The queues and the judges' agreement with reviewers, from the read model (the cron runs
    routed to review, read from the jobs topic by the caller: `cron_review_sessions`)."""
    store = existing_store(settings)
    try:
        waiting = SessionFilter(reviewed=False)
        filters = {
            "rejected": waiting.model_copy(update={"accepted": False}),
            "disagreeing": waiting.model_copy(update={"disagreeing": True}),
            "awaiting_review": waiting.model_copy(
                update={"filtered": False, "kind": "agent", "status": "completed"}
            ),
        }
        if cron_sessions:
            filters["needs_human_review"] = waiting.model_copy(
                update={"session_ids": cron_sessions}
            )
        queues = []
        for name, about in QUEUES.items():
            if name == "accepted_sample":
                where = waiting.model_copy(update={"accepted": True})
                ids = store.sampled_ids(where, QUEUE_SIZE, SAMPLE_SEED)
                sample = SessionFilter(session_ids=tuple(ids))
                shown = store.list_sessions(sample, limit=QUEUE_SIZE).sessions if ids else ()
                queues.append(Queue(name, about, shown, store.count(where)))
                continue
            asked = filters.get(name)
            if asked is None:
                queues.append(Queue(name, about, (), 0))
                continue
            page = store.list_sessions(asked, limit=QUEUE_SIZE)
            queues.append(Queue(name, about, page.sessions, store.count(asked)))
        reviewed = store.count(SessionFilter(reviewed=True))
        agreement = store.judge_agreement()
    finally:
        store.close()
    return ReviewBoard(tuple(queues), tuple(agreement), reviewed)


async def cron_review_sessions(settings: Settings) -> tuple[str, ...]:
    """The sessions of the cron runs whose runner said a person must look."""
    from rolltape.producers.cron import read_book

    connection = require_connection(settings, Role.READER)
    book = await read_book(connection, prefix=settings.topic_prefix)
    return tuple(sorted(r.session_id for r in book.queue(RunStatus.NEEDS_HUMAN_REVIEW)))


def board(settings: Settings) -> tuple[ReviewBoard, str | None]:
    """`review_board` with the cron runs read from the log (for the CLI), and why they could
    not be read, where they could not (the read model's queues show all the same)."""
    try:
        cron = asyncio.run(cron_review_sessions(settings))
    except (InfraError, KafkaClientError) as exc:
        why = f"the cron runs routed to review could not be read: {exc}"
        return review_board(settings, None), why
    return review_board(settings, cron), None


class ReviewerRefused(ReviewSetupError):
    """The cluster did not answer these credentials, or did not take them."""


_PLAINTEXT = (
    "this cluster does not authenticate its clients (PLAINTEXT): a review is recorded by a "
    "reviewer's login, which needs a cluster with SASL (`rolltape broker up` gives one)"
)


async def open_review_writer(settings: Settings) -> ReviewWriter:
    """A started writer as the settings' reviewer principal: the one way a review is written
    (the CLI with the settings' credentials, the console with a login's). The cluster checks
    the password first, and only then is the principal's role looked at (so a wrong password
    learns nothing of who exists). ReviewerRefused where the cluster did not take them,
    ReviewSetupError for anything else that makes them no reviewer's."""
    connection = require_connection(settings, Role.REVIEWER)
    if connection.principal is None:
        raise ReviewSetupError(_PLAINTEXT)
    refused = ReviewerRefused(
        f"the cluster did not answer or did not take {connection.principal!r}'s name and "
        "password: check them (`rolltape principal show NAME` prints a principal's)"
    )
    topic = topic_name(Stream.VERDICTS, settings.topic_prefix)
    try:
        async with asyncio.timeout(REVIEW_TIMEOUT_S):
            partitions = len(await partitions_of(connection, [topic]))
    except (KafkaClientError, TimeoutError):
        raise refused from None
    store = principal_store(settings)
    if store is not None:
        try:
            role = store.get(connection.principal).role
        except PrincipalError:
            role = None
        if role is not Role.REVIEWER:
            what = f"of role {role.value}" if role is not None else "not one rolltape keeps"
            raise ReviewSetupError(
                f"{connection.principal!r} is a principal {what}, not a reviewer: use a "
                "reviewer's name (`rolltape principal add NAME --role reviewer`)"
            )
    if not partitions:
        raise ReviewSetupError(
            f"{connection.principal!r} cannot see the topic {topic}: it does not exist "
            "(`rolltape broker up` creates it) or this principal may not write it"
        )
    writer = ReviewWriter(
        connection,
        settings.topic_prefix,
        partitions=partitions,
        locate=IndexHeadLocator(store_url(settings), settings.topic_prefix),
    )
    try:
        return await writer.__aenter__()
    except (KafkaClientError, TimeoutError):
        raise refused from None


def record_verdict(
    settings: Settings,
    session_id: str,
    *,
    verdict: str,
    score: float | None = None,
    labels: tuple[str, ...] = (),
    comment: str = "",
) -> RecordedReview:
    """Record a human verdict on `session_id` as the settings' reviewer (a ValidationError
    names a field out of bounds; ReviewSetupError a session there is none of)."""
    check_reviewable(settings, session_id, comment=comment)

    def review(reviewer: str) -> HumanVerdict:
        return HumanVerdict.model_validate(
            {
                "reviewer": reviewer,
                "verdict": verdict,
                "score": score,
                "labels": labels,
                "comment": comment,
            }
        )

    return _written(settings, lambda w: w.verdict(session_id, review(w.principal)))


def record_preference(
    settings: Settings,
    chosen: str,
    rejected: str,
    *,
    labels: tuple[str, ...] = (),
    comment: str = "",
) -> RecordedReview:
    """Record a preference of `chosen` over `rejected` as the settings' reviewer."""
    check_reviewable(settings, chosen, rejected, comment=comment)

    def preference(reviewer: str) -> HumanPreference:
        return HumanPreference(
            reviewer=reviewer, chosen=chosen, rejected=rejected, labels=labels, comment=comment
        )

    return _written(settings, lambda w: w.preference(preference(w.principal)))


def _written(
    settings: Settings, write: Callable[[ReviewWriter], Awaitable[RecordedReview]]
) -> RecordedReview:
    async def main() -> RecordedReview:
        writer = await open_review_writer(settings)
        try:
            return await write(writer)
        finally:
            await writer.__aexit__(None, None, None)

    return asyncio.run(main())


def check_reviewable(settings: Settings, *session_ids: str, comment: str) -> None:
    """Refuse a review of a session the read model does not hold, or a comment about one that
    names a subject (it would be stored in clear, and outlive an erasure)."""
    store = existing_store(settings)
    try:
        for sid in session_ids:
            detail = store.session(sid)
            if detail is None:
                raise ReviewSetupError(
                    f"the read model holds no session {sid!r}: check the id "
                    "(`rolltape sessions list`), or wait for the indexer"
                )
            if comment.strip() and detail.subject_hash is not None:
                raise ReviewSetupError(
                    f"{sid} names a subject: a comment is stored in clear on the verdicts topic "
                    "and would outlive the subject's erasure; record it without --comment"
                )
    finally:
        store.close()


__all__ = [
    "QUEUES",
    "QUEUE_SIZE",
    "SAMPLE_SEED",
    "Queue",
    "ReviewBoard",
    "ReviewSetupError",
    "ReviewerRefused",
    "board",
    "check_reviewable",
    "cron_review_sessions",
    "open_review_writer",
    "record_preference",
    "record_verdict",
    "review_board",
]
