"""`rolltape dataset export | verify | purge`: training files from the recorded sessions of one
judge version, checked offline against the judge's signed chain heads, and purged of sessions
erased since."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from rolltape.infra.cli._common import (
    KeepEqualScoresOption,
    ScoreOption,
    TokenizerOption,
    check_judge_version,
    console,
    err_console,
    say,
    settings,
    transient_progress,
)
from rolltape.infra.commands.export import (
    LIVE_JUDGE_VERSION,
    META_DIR,
    ExportOptions,
    Format,
    Selection,
    Stack,
    collect_judged,
    no_checkpoint_hint,
    open_tokenizer,
    run_export,
)
from rolltape.infra.commands.purge_export import purge_export as purge
from rolltape.infra.commands.verify_export import erasure_list
from rolltape.infra.commands.verify_export import public_key as read_public_key
from rolltape.infra.commands.verify_export import verify_export as check_export

app = typer.Typer(
    help="Training data out: export judged sessions as training files, verify an export offline, "
    "purge erased sessions from one.",
    no_args_is_help=True,
)


def parse_time(text: str | None, option: str) -> int | None:
    """ISO 8601 (`2026-11-20`, `2026-11-20T10:00:00+00:00`; no zone means UTC) to ns."""
    if text is None:
        return None
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise typer.BadParameter(
            f"{text!r} is not an ISO 8601 date or time (e.g. 2026-11-20T10:00:00Z)",
            param_hint=option,
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp()) * 10**9 + moment.microsecond * 1000


@app.command("export")
def export(
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")],
    out: Annotated[
        Path,
        typer.Option(
            "--out", "-o", help="Where to write the data files (.rolltape/ gets the rest)."
        ),
    ],
    judge_version: Annotated[
        str, typer.Option(help="The judge version whose verdicts and filter outcomes to use.")
    ] = LIVE_JUDGE_VERSION,
    accepted_only: Annotated[
        bool, typer.Option("--accepted-only", help="Only sessions the reward filter accepted.")
    ] = False,
    rejected_only: Annotated[
        bool, typer.Option("--rejected-only", help="Only sessions the reward filter rejected.")
    ] = False,
    reviewers: Annotated[
        str,
        typer.Option(
            "--reviewers",
            help="Only sessions the reviewers passed, failed, or left unreviewed (by each "
            "one's latest human verdict; any: all).",
        ),
    ] = "any",
    session: Annotated[
        list[str] | None,
        typer.Option("--session", "-s", help="A session id or shell pattern (repeatable)."),
    ] = None,
    task: Annotated[
        list[str] | None,
        typer.Option(help="The task: only sessions recorded for it, exactly (repeatable)."),
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Only sessions started at or after (ISO 8601).")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Only sessions started before (ISO 8601).")
    ] = None,
    include_unfinished: Annotated[bool, typer.Option(help="Also sessions not ended yet.")] = False,
    include_broken: Annotated[bool, typer.Option(help="Also sessions with chain breaks.")] = False,
    shard_lines: Annotated[int, typer.Option(min=1, help="Lines per output file.")] = 10_000,
    token_budget: Annotated[
        int | None, typer.Option(min=1, help="Compress trajectories to this many tokens.")
    ] = None,
    tokenizer: TokenizerOption = None,
    score: ScoreOption = "reward",
    keep_equal_scores: KeepEqualScoresOption = False,
    stack: Annotated[
        Stack,
        typer.Option(
            help="tokens: write the samples in this training stack's field names (rolltape: "
            "the documented form)."
        ),
    ] = "rolltape",
    overwrite: Annotated[bool, typer.Option(help="Replace an earlier export in --out.")] = False,
    evidence: Annotated[
        bool,
        typer.Option(
            help="Also write the envelopes behind every line and the signed proofs of their "
            "chain heads (.rolltape/*.evidence.jsonl), for `rolltape dataset verify`."
        ),
    ] = False,
) -> None:
    """Write training data: ShareGPT, Atropos groups, per-turn traces, OpenAI or TRL chat JSONL,
    TRL DPO preference pairs from sessions of one group ranked by --score, or token samples
    (tokens: ids, a mask of the policy's sampled tokens, logprobs, reward; in veRL's, SkyRL's,
    slime's, rLLM's or verifiers' field names with --stack).

    Each data file has a sidecar .rolltape/<name>.provenance.jsonl (line for line: sessions,
    trajectory ids, first and last event hash of every chain used) and .rolltape/manifest.json has
    counts, skip reasons and file digests; the folder itself holds only data, so
    datasets.load_dataset("json", data_dir=OUT) loads it as is. Running it twice over the same
    topics writes byte-identical files.
    """
    if accepted_only and rejected_only:
        raise typer.BadParameter("choose one of --accepted-only and --rejected-only")
    check_judge_version(judge_version)
    options = ExportOptions(  # a ValidationError names the option: the boundary says which
        format=format,
        selection=Selection(
            judge_version=judge_version,
            accepted="accepted" if accepted_only else "rejected" if rejected_only else "any",
            sessions=tuple(session or ()),
            tasks=tuple(task or ()),
            since_ns=parse_time(since, "--since"),
            until_ns=parse_time(until, "--until"),
            include_unfinished=include_unfinished,
            include_broken=include_broken,
            reviewed=reviewers,
        ),
        shard_lines=shard_lines,
        token_budget=token_budget,
        score=score,
        keep_equal_scores=keep_equal_scores,
        stack=stack,
    )
    if stack != "rolltape" and format != "tokens":
        raise typer.BadParameter(
            f"--stack {stack} names the fields of token samples: use -f tokens"
        )
    chat_tokenizer, label = open_tokenizer(tokenizer)
    options = options.model_copy(update={"tokenizer": label})
    s = settings()
    with transient_progress(
        TextColumn("reading topics"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
    ) as progress:
        reading = progress.add_task("read", total=None)

        def advance(done: int, total: int) -> None:
            if done % 2000 == 0 or done == total:
                progress.update(reading, completed=done, total=total)

        collected = collect_judged(
            s,
            judge_version,
            on_record=advance,
            narrowing=options.selection.narrowing(),
            evidence=evidence,
            say=say,
        )
    with (
        collected,
        transient_progress(
            TextColumn("folding sessions"), MofNCompleteColumn(), TimeElapsedColumn()
        ) as progress,
    ):
        folding = progress.add_task("fold", total=None)

        def folded(done: int) -> None:
            if done % 500 == 0:
                progress.update(folding, completed=done)

        manifest = run_export(
            collected,
            options,
            out,
            tokenizer=chat_tokenizer,
            overwrite=overwrite,
            evidence=evidence,
            on_session=folded,
        )
    console.print(
        f"{manifest.lines} {format} lines from {manifest.sessions_exported} of "
        f"{manifest.sessions_read} sessions (judge version {judge_version}) in {out}"
    )
    for file in manifest.files:
        console.print(f"  {file.name}: {file.lines} lines, {file.sessions} sessions")
    if manifest.token_sources:
        sources = ", ".join(f"{n} {source}" for source, n in manifest.token_sources.items())
        made = f" (template: {manifest.options.tokenizer})" if manifest.options.tokenizer else ""
        console.print(f"  token ids: {sources}{made}")
    if manifest.skipped:
        reasons = ", ".join(f"{reason} {n}" for reason, n in manifest.skipped.items())
        console.print(f"  skipped: {reasons}")
    if manifest.evidence:
        console.print(
            f"  evidence: {len(manifest.evidence)} file(s) in {out / META_DIR}; check with "
            "`rolltape keys export judge.pub.pem` then "
            f"`rolltape dataset verify {out} --public-key judge.pub.pem`"
        )
    if manifest.skipped.get("no_checkpoint"):
        console.print(
            f"  {no_checkpoint_hint(s, manifest.skipped['no_checkpoint'])}", soft_wrap=True
        )


PublicKeyOption = Annotated[
    Path, typer.Option(help="The judge's public key, PEM (`rolltape keys export FILE`).")
]


@app.command("verify")
def verify_export(
    folder: Annotated[Path, typer.Argument(help="The export folder (with its .rolltape/).")],
    public_key: PublicKeyOption,
    tokenizer: TokenizerOption = None,
    erasures: Annotated[
        Path | None,
        typer.Option(
            help="The erasures file (`rolltape privacy export-erasures FILE`): name erased lines."
        ),
    ] = None,
) -> None:
    """Check an export offline with the judge's public key: every line must re-fold, byte for
    byte, from envelopes whose chains are intact and whose heads the judge signed. Needs no
    Kafka. With --erasures, every line of a session erased since is named too. Exit 1 naming
    each file and line that does not check out."""
    key = read_public_key(public_key)
    erased = None if erasures is None else erasure_list(erasures, key)
    if erased is not None:
        console.print(erased.describe(), highlight=False)
    chat_tokenizer, _ = open_tokenizer(tokenizer)
    result = check_export(folder, key, chat_tokenizer, erased)
    for problem in result.problems:
        console.print(escape(str(problem)), highlight=False)
    what = (
        f"{result.lines} lines in {result.files} file(s) from {result.sessions} sessions, "
        f"judge key {result.key_id}"
    )
    if result.problems:
        err_console.print(f"[red]{len(result.problems)} problem(s)[/red] in {what}")
        raise typer.Exit(1)
    console.print(
        f"verified {what}: every line re-folds byte for byte from intact chains whose heads "
        "the judge signed"
    )


@app.command("purge")
def purge_export(
    folder: Annotated[Path, typer.Argument(help="The export folder, purged in place.")],
    erasures: Annotated[
        Path, typer.Option(help="The erasures file (`rolltape privacy export-erasures FILE`).")
    ],
    public_key: PublicKeyOption,
    tokenizer: TokenizerOption = None,
) -> None:
    """Take the sessions erased since out of an export written before: their lines, their
    provenance and evidence, counted in the manifest as `erased`. An export with evidence is
    rendered again from the sessions that remain, so it still verifies; one without has the
    lines removed. Offline: the erasures file is checked with the judge's public key first."""
    key = read_public_key(public_key)
    erased = erasure_list(erasures, key)
    console.print(erased.describe(), highlight=False)
    chat_tokenizer, _ = open_tokenizer(tokenizer)
    done = purge(folder, erased, tokenizer=chat_tokenizer)
    if done is None:
        console.print(
            f"{folder} holds no line of the {len(erased.sessions)} erased session(s): "
            "nothing to purge",
            highlight=False,
        )
        return
    console.print(
        f"purged {len(done.sessions)} erased session(s) from {folder}: "
        f"{done.lines_before - done.manifest.lines} of {done.lines_before} lines removed; "
        "the manifest, provenance"
        + (" and evidence rewritten" if done.manifest.evidence else " rewritten"),
        highlight=False,
        soft_wrap=True,
    )
