"""`rolltape feed atropos`: push judged sessions to an Atropos API server as they are decided."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

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
from rolltape.infra.commands.feed import AtroposFeedOptions, AtroposFeedResult, feed_atropos
from rolltape.projections import Selection
from rolltape.schemas import LIVE_JUDGE_VERSION

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
    )

    def started(bootstrap: str) -> None:
        err_console.print(f"feeding {url} from {bootstrap} (judge version {judge_version})")

    async def main() -> AtroposFeedResult:
        return await feed_atropos(s, options, stop_on_signals(), on_started=started)

    result = asyncio.run(main())
    reasons = ", ".join(f"{k} {n}" for k, n in sorted(result.skipped.items())) or "none"
    err_console.print(f"sent {result.sent_groups} group(s); sessions left out: {reasons}")
