"""`rolltape feed atropos`: push judged sessions to an Atropos API server as they are decided."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from rolltape.infra.broker import require_connection
from rolltape.infra.cli._common import (
    KeepEqualScoresOption,
    ScoreOption,
    TokenizerOption,
    check_judge_version,
    err_console,
    settings,
    stop_on_signals,
)
from rolltape.infra.commands.export import open_tokenizer
from rolltape.projections import AtroposSink, AtroposSinkError, Selection, TrajectoryFeed
from rolltape.schemas import LIVE_JUDGE_VERSION, Role

app = typer.Typer(help="Stream judged sessions to training pipelines.", no_args_is_help=True)


@app.command()
def atropos(
    url: Annotated[str, typer.Option(help="The Atropos API server, e.g. http://host:8000.")],
    group_size: Annotated[
        int, typer.Option(min=1, help="Sessions per group (the env's group_size).")
    ],
    tokenizer: TokenizerOption = None,
    score: ScoreOption = "reward",
    keep_equal_scores: KeepEqualScoresOption = False,
    accepted_only: Annotated[
        bool, typer.Option("--accepted-only", help="Only accepted sessions.")
    ] = False,
    judge_version: Annotated[str, typer.Option(help="Whose verdicts to use.")] = LIVE_JUDGE_VERSION,
    group_id: Annotated[str, typer.Option(help="The feed's consumer group.")] = "rolltape-atropos",
    batch_groups: Annotated[int, typer.Option(min=1, help="Groups per POST.")] = 1,
) -> None:
    """Follow the topics and POST ScoredDataGroups to /scored_data_list as groups fill up (at
    least once: a restart resumes from the group's committed offsets). Ctrl-C or SIGTERM stops."""
    check_judge_version(judge_version)
    chat_tokenizer, _ = open_tokenizer(tokenizer)
    s = settings()
    connection = require_connection(s, Role.READER)
    selection = Selection(
        judge_version=judge_version, accepted="accepted" if accepted_only else "any"
    )

    async def main() -> tuple[int, dict[str, int]]:
        stop = stop_on_signals()
        sink = AtroposSink(
            url,
            group_size=group_size,
            tokenizer=chat_tokenizer,
            score=score,
            keep_equal_scores=keep_equal_scores,
            batch_groups=batch_groups,
        )
        async with TrajectoryFeed(
            connection,
            group_id=group_id,
            prefix=s.topic_prefix,
            selection=selection,
            auto_ack=False,  # a session is processed once its group reached the server
        ) as feed:
            err_console.print(
                f"feeding {url} from {connection.bootstrap} (judge version {judge_version})"
            )
            try:
                async for item in feed.until(stop):
                    for settled in await sink.add(item.trajectory):
                        feed.ack(settled)
            finally:
                for settled in await sink.close():
                    feed.ack(settled)
        return sink.sent_groups, dict(sink.skipped)

    try:
        sent, skipped = asyncio.run(main())
    except AtroposSinkError as exc:  # the sink cannot know that the feed resumes
        raise AtroposSinkError(
            f"{exc}; restart the feed to resume from its group's committed offsets"
        ) from exc
    reasons = ", ".join(f"{k} {n}" for k, n in sorted(skipped.items())) or "none"
    err_console.print(f"sent {sent} group(s); sessions left out: {reasons}")
