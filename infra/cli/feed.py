"""`rolltape serve feed`: push judged sessions to an Atropos API server as they are decided."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.markup import escape

from rolltape.infra.cli._common import (
    KeepEqualScoresOption,
    TokenizerOption,
    check_judge_version,
    err_console,
    settings,
    stop_on_signals,
)
from rolltape.infra.commands.export import open_tokenizer
from rolltape.infra.commands.feed import (
    LIVE_JUDGE_VERSION,
    AtroposFeedOptions,
    AtroposFeedResult,
    FeedProgress,
    Selection,
    buffered,
    feed_atropos,
)


def feed(
    url: Annotated[str, typer.Option(help="The Atropos API server, e.g. http://host:8000.")],
    group_size: Annotated[
        int, typer.Option(min=1, help="Sessions per group (the env's group_size).")
    ],
    tokenizer: TokenizerOption = None,
    score: Annotated[
        str | None,
        typer.Option(
            help="What scores a session: reward, reward:NAME or verdict:JUDGE:KEY (not human: "
            "the feed hands a session out before anyone reviews it). Default: the "
            "sessions' reward, when the log holds rewards of one name (else it says which it "
            "found)."
        ),
    ] = None,
    keep_equal_scores: KeepEqualScoresOption = False,
    accepted_only: Annotated[
        bool, typer.Option("--accepted-only", help="Only sessions the reward filter accepted.")
    ] = False,
    judge_version: Annotated[
        str, typer.Option(help="The judge version whose verdicts to use.")
    ] = LIVE_JUDGE_VERSION,
    group_id: Annotated[str, typer.Option(help="The feed's consumer group.")] = "rolltape-atropos",
    batch_groups: Annotated[int, typer.Option(min=1, help="Groups per POST.")] = 1,
    env_name: Annotated[
        str, typer.Option(help="The environment name the feed registers under.")
    ] = "rolltape",
    max_token_length: Annotated[
        int, typer.Option(min=1, help="The environment's max_token_length, as registered.")
    ] = 8192,
) -> None:
    """Register with the Atropos API server as its environments do (waiting until a trainer
    has registered and started), then follow the topics and POST ScoredDataGroups to
    /scored_data_list as groups fill up. A session is committed only once the server took its
    group for a registered trainer (at least once: a restart resumes from the group's committed
    offsets). Shows what it sent, what waits and what it left out while it runs. Ctrl-C or
    SIGTERM stops."""
    check_judge_version(judge_version)
    chat_tokenizer, _ = open_tokenizer(tokenizer)
    s = settings()
    options = AtroposFeedOptions(
        url=url,
        group_size=group_size,
        selection=Selection(
            judge_version=judge_version, accepted="accepted" if accepted_only else "any"
        ),
        group_id=group_id,
        tokenizer=chat_tokenizer,
        score=score,
        keep_equal_scores=keep_equal_scores,
        batch_groups=batch_groups,
        env_name=env_name,
        max_token_length=max_token_length,
    )

    def started(bootstrap: str) -> None:
        err_console.print(
            f"feeding {url} from {bootstrap} (judge version {judge_version}); Ctrl-C stops"
        )

    def progress(now: FeedProgress) -> None:
        err_console.print(escape(now.line()))

    async def main() -> AtroposFeedResult:
        return await feed_atropos(
            s, options, stop_on_signals(), on_started=started, on_progress=progress
        )

    result = asyncio.run(main())
    reasons = ", ".join(f"{k} {n}" for k, n in sorted(result.skipped.items())) or "none"
    held = f" ({buffered(result.buffered_groups)})" if result.buffered_groups else ""
    err_console.print(
        f"stopped: sent {result.sent_groups} group(s) scored by {result.score}{held}; sessions "
        f"left out: {reasons}"
    )
