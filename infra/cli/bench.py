"""`rolltape bench ...`: scripts that print figures (never timed assertions in tests).

Each command parses its options, runs its benchmark from `infra/bench/` and prints what the
result renders (its `render()` text, or `to_json()` with `--json`): the wording of the figures
lives beside the code that measures them.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

import typer

from rolltape.infra.cli._common import CliError, console, settings

app = typer.Typer(help="Benchmarks that print figures.", no_args_is_help=True)


class _Figures(Protocol):
    """What every benchmark returns (`rolltape.infra.bench._figures.Figures`)."""

    def render(self) -> str: ...

    def to_json(self) -> str: ...


def _show(figures: _Figures, json_out: bool) -> None:
    """Print a benchmark's figures: its text, or with `--json` its JSON (as given, no markup)."""
    console.print(figures.to_json() if json_out else figures.render(), markup=False, soft_wrap=True)


def _json() -> Any:
    return typer.Option(False, "--json", help="Print JSON: the figures.")


def _repeats(default: int, said: str = "") -> Any:
    """`--repeats`; `said` adds what the medians are of, e.g. " (of each export)"."""
    return typer.Option(default, min=1, help=f"Runs; medians are reported{said}.")


@app.command()
def producer(
    calls: int = typer.Option(200_000, min=1, help="Calls timed: hot-path record calls in all."),
    events: int = typer.Option(200_000, min=1, help="Events per run (sustained throughput)."),
    repeats: int = _repeats(3),
    senders: list[int] = typer.Option(
        [],
        min=1,
        help="Sender processes for the sustained run: counts besides 1 and 2, which always run "
        "(repeatable).",
    ),
    sessions: int = typer.Option(
        64, min=1, help="Sessions in each run (the sustained events spread over them)."
    ),
    sealed: bool = typer.Option(
        False,
        "--sealed",
        help="Also run each sustained run with every session naming a subject (content sealed).",
    ),
    json_out: bool = _json(),
) -> None:
    """Hot-path cost of a record call and sustained events/s to the broker."""
    from rolltape.infra.bench.producer import run_producer_bench

    cfg = settings()
    _show(
        run_producer_bench(
            cfg,
            partitions=cfg.partitions,
            calls=calls,
            events=events,
            repeats=repeats,
            senders=(1, 2, *senders),
            sessions=sessions,
            sealed=sealed,
        ),
        json_out,
    )


@app.command()
def rules(
    epochs: int = typer.Option(
        1000, min=1, help="Epochs per run, timed for the firing latency (after warm-up)."
    ),
    events: int = typer.Option(100_000, min=1, help="Events per run (worker throughput)."),
    sessions: int = typer.Option(
        100, min=1, help="Sessions in each run (the throughput events spread over them)."
    ),
    two_workers: bool = typer.Option(
        True, help="Also run the throughput load through two worker processes in one group."
    ),
    at_once: int = typer.Option(
        1000,
        min=0,
        help="Also run the same number of events from this many sessions recording at once "
        "(0: not run).",
    ),
    json_out: bool = _json(),
) -> None:
    """Metric-acknowledged to rule-evaluation-readable latency, and worker events/s."""
    from rolltape.infra.bench.rules import run_rules_bench

    cfg = settings()
    _show(
        run_rules_bench(
            cfg,
            partitions=cfg.partitions,
            epochs=epochs,
            events=events,
            sessions=sessions,
            two_workers=two_workers,
            concurrent_sessions=at_once,
        ),
        json_out,
    )


@app.command()
def replay(
    events: int = typer.Option(1_000_000, min=1, help="Events per run (on the scratch topic)."),
    sessions: int = typer.Option(
        10_000, min=1, help="Sessions in each run (agent sessions, the events spread over them)."
    ),
    passes: int = typer.Option(3, min=1, help="Full passes over the topic (medians reported)."),
    jobs: int = typer.Option(
        2, min=1, help="Processes replaying partitions at once, for the `log replay --jobs` figure."
    ),
    json_out: bool = _json(),
) -> None:
    """Events/s from a topic through replay, fold and ShareGPT export vs the raw consume rate."""
    from rolltape.infra.bench.replay import run_replay_bench

    cfg = settings()
    _show(
        run_replay_bench(
            cfg,
            partitions=cfg.partitions,
            events=events,
            sessions=sessions,
            passes=passes,
            jobs=jobs,
        ),
        json_out,
    )


@app.command()
def cluster(
    events: int = typer.Option(100_000, min=1, help="Events per run (sustained)."),
    repeats: int = _repeats(3, " (on each cluster)"),
    senders: int = typer.Option(1, min=1, help="Sender processes (of the recorder)."),
    sessions: int = typer.Option(
        64, min=1, help="Sessions in each run (the events spread over them)."
    ),
    json_out: bool = _json(),
) -> None:
    """Recording into a three-node cluster (RF 3, min ISR 2) against one node, same run. Starts
    both clusters itself (no ROLLTAPE_BOOTSTRAP needed)."""
    from rolltape.infra.bench.cluster import run_cluster_bench

    _show(
        run_cluster_bench(events=events, repeats=repeats, senders=senders, sessions=sessions),
        json_out,
    )


@app.command()
def monitor(
    steps: int = typer.Option(
        2000, min=1, help="Training steps timed with and without the monitor."
    ),
    block: int = typer.Option(25, min=1, help="Steps per alternating block."),
    width: list[int] = typer.Option([32, 64], min=1, help="Channel widths of the CNN to measure."),
    network: list[str] = typer.Option(
        ["cnn"],
        "--network",
        help="Networks to measure: cnn (the reference CNN, each --width), resnet18, transformer "
        "(batch 256 on random data: for a GPU).",
    ),
    device: str = typer.Option("cpu", help="Where to train: cpu, or cuda (a GPU)."),
    json_out: bool = _json(),
) -> None:
    """Training-step time with the monitor measuring every step vs the same loop without it
    (same process, alternating blocks, medians), and the cost of an epoch's end."""
    from rolltape.infra.bench.monitor import ModelName, cuda_visible, run_monitor_bench

    unknown = [m for m in network if m not in ("cnn", "resnet18", "transformer")]
    if unknown:
        raise typer.BadParameter(
            f"{', '.join(unknown)}: the networks are cnn, resnet18 and transformer",
            param_hint="--network",
        )
    if device not in ("cpu", "cuda"):
        raise typer.BadParameter(f"{device}: cpu or cuda", param_hint="--device")
    if device == "cuda" and not cuda_visible():
        raise typer.BadParameter(
            "no CUDA device is visible to torch here; measure on cpu", param_hint="--device"
        )
    models = cast(tuple[ModelName, ...], tuple(dict.fromkeys(network)))
    _show(
        run_monitor_bench(
            steps=steps, block=block, widths=tuple(width), models=models, device=device
        ),
        json_out,
    )


@app.command()
def capture(
    calls: int = typer.Option(
        3000, min=2, help="Calls timed per client, back to back (half as many in the paused run)."
    ),
    json_out: bool = _json(),
    peer: str | None = typer.Option(
        None,
        help="otel: beside OpenTelemetry's OpenAI instrumentation on a realistic request (the "
        "bench extra: pip install 'rolltape[bench]').",
    ),
) -> None:
    """Latency a captured `chat.completions.create` adds over the bare client, against a local
    server that answers at once (no broker needed: the capture records to a spool)."""
    if peer is None:
        from rolltape.infra.bench.capture import run_capture_benches

        _show(run_capture_benches(calls=calls), json_out)
        return
    if peer != "otel":
        raise typer.BadParameter(f"{peer!r}: the peer measured is otel", param_hint="--peer")
    try:
        from rolltape.infra.bench.capture_peer import run_peer_bench

        figures = run_peer_bench(calls=calls)
    except ImportError as exc:
        raise CliError(
            f"the peer's packages are missing ({exc.name}): pip install 'rolltape[bench]'"
        ) from exc
    _show(figures, json_out)


@app.command()
def otlp(
    spans: int = typer.Option(100_000, min=1, help="Spans per timed run."),
    batch: int = typer.Option(512, min=1, help="Spans per request (the SDK exporter's default)."),
    connections: int = typer.Option(4, min=1, help="Concurrent keep-alive connections."),
    repeats: int = _repeats(3),
    workers: list[int] = typer.Option(
        [],
        min=2,
        help="Processes that record spans: also measure `serve otlp --workers N` for each N given "
        "(same runs).",
    ),
    json_out: bool = _json(),
) -> None:
    """Spans/s through `rolltape serve otlp` into Kafka: content on the spans over HTTP, as log
    records, over gRPC, against a receiver that only decodes."""
    from rolltape.infra.bench.otlp import run_otlp_bench

    cfg = settings()
    _show(
        run_otlp_bench(
            cfg,
            partitions=cfg.partitions,
            spans=spans,
            spans_per_batch=batch,
            connections=connections,
            repeats=repeats,
            workers=tuple(workers),
        ),
        json_out,
    )


@app.command()
def evidence(
    sessions: int = typer.Option(
        2000, min=1, help="Sessions in each run (agent sessions in the export that is verified)."
    ),
    repeats: int = _repeats(3),
    json_out: bool = _json(),
) -> None:
    """Checkpoint signing and `verify-export` throughput (no broker: the code's own cost)."""
    from rolltape.infra.bench.evidence import run_evidence_bench

    _show(run_evidence_bench(sessions=sessions, repeats=repeats), json_out)


@app.command("export")
def export_bench(
    sessions: int = typer.Option(
        2000, min=1, help="Sessions in each run (agent sessions in each export)."
    ),
    repeats: int = _repeats(5, " (of each export)"),
    json_out: bool = _json(),
) -> None:
    """Export throughput of sessions recorded with a subject (content sealed, opened on export)
    against the same sessions in clear, in the same run (no broker: the code's own cost)."""
    from rolltape.infra.bench.export import run_export_bench

    _show(run_export_bench(sessions=sessions, repeats=repeats), json_out)


@app.command()
def batch(
    rollouts: int = typer.Option(400, min=1, help="Rollouts per concurrency."),
    concurrency: list[int] = typer.Option(
        [1, 8, 64], min=1, help="Rollouts at once: each value given is measured (repeatable)."
    ),
    cron_jobs: int = typer.Option(
        20, min=1, help="Cron jobs due every second (bursts of this many)."
    ),
    cron_fires: int = typer.Option(1000, min=1, help="Cron runs measured after the warm-up."),
    json_out: bool = _json(),
) -> None:
    """The batch runner's rollouts/s against a server that answers at once (its own overhead),
    beside bare model calls; cron's jitter from due time to session start."""
    from rolltape.infra.bench.batch import run_batch_bench

    _show(
        run_batch_bench(
            settings(),
            concurrencies=tuple(concurrency),
            rollouts=rollouts,
            cron_jobs=cron_jobs,
            cron_fires=cron_fires,
        ),
        json_out,
    )


@app.command()
def judges(
    repeats: int = _repeats(9, " (rounds of the world operations)"),
    calls: int = typer.Option(
        200, min=1, help="Calls timed: shell tool calls each way (alternating)."
    ),
    json_out: bool = _json(),
) -> None:
    """Recording and restoring a rollout's world against tar of the same tree; a shell tool
    call in the bubblewrap sandbox against the same command unsandboxed. No broker needed."""
    from rolltape.infra.bench.judges import run_judges_bench

    _show(run_judges_bench(repeats=repeats, calls=calls), json_out)


@app.command()
def prompts(
    rounds: int = typer.Option(3, min=1, help="Rounds of the loop: medians over them."),
    epochs: int = typer.Option(4, min=1, help="Epochs per run (a test run)."),
    json_out: bool = _json(),
) -> None:
    """The prompt loop's own time per round (the tuner's call, recording, the rule) beside the
    monitored training runs it starts, with a server that answers at once; the same scenarios
    run by the harness without the loop as the baseline. Needs a broker and the torch extra."""
    from rolltape.infra.bench.prompts import run_prompts_bench

    _show(run_prompts_bench(settings(), rounds=rounds, epochs=epochs), json_out)


@app.command("index")
def index_bench(
    sessions: int = typer.Option(
        10_000, min=1, help="Sessions in each run (8 records each), indexed."
    ),
    repeats: int = _repeats(3, " (of indexing)"),
    queries: int = typer.Option(200, min=1, help="Askings of each query (p50 and p95)."),
    store: str | None = typer.Option(
        None,
        "--store",
        help="The read model to write: this store (sqlite:PATH or postgresql://...; dropped "
        "first) instead of fresh SQLite files.",
    ),
    log_events: int = typer.Option(
        1_000_000,
        min=0,
        help="Events in the one partition where resume and a 10-session export are timed by "
        "the read model and by scan (needs a broker; 0: leave them out).",
    ),
    json_out: bool = _json(),
) -> None:
    """The read model: indexing rate against decoding the same records in the same run, and the
    p50/p95 of a list with three filters, a session lookup and a full-text search on the store
    it built (no broker: the code's own cost); then, on a broker, a resume and a 10-session
    export by the read model against by scan."""
    from rolltape.infra.bench.index import run_index_bench
    from rolltape.infra.bench.readers import run_readers_bench

    readers = None
    if log_events:
        readers = run_readers_bench(
            settings(), events=log_events, sessions=max(1, log_events // 100), repeats=repeats
        )
    figures = run_index_bench(sessions=sessions, repeats=repeats, queries=queries, store_url=store)
    _show(figures.model_copy(update={"readers": readers}), json_out)


@app.command("tokens")
def tokens_bench(
    sessions: int = typer.Option(
        2000, min=2, help="Sessions in each run (captured: exact ids, in groups of two), exported."
    ),
    repeats: int = _repeats(3, " (of each way)"),
    stream_sessions: int = typer.Option(
        2000,
        min=0,
        help="Sessions on a broker read as a TokenStream and by a plain read (0: leave the "
        "stream out, no broker needed).",
    ),
    json_out: bool = _json(),
) -> None:
    """Token samples per second: `export -f tokens` against the Atropos export of the same
    sessions (no broker: the code's own cost), then, on a broker, the TokenStream against a
    plain read of the same topics."""
    from rolltape.infra.bench.tokens import run_tokens_bench

    figures = run_tokens_bench(
        sessions=sessions,
        repeats=repeats,
        settings=settings() if stream_sessions else None,
        stream_sessions=stream_sessions,
    )
    _show(figures, json_out)


@app.command("console")
def console_bench(
    sessions: int = typer.Option(
        100_000,
        min=1,
        help="Sessions in each run: in the read model (8 records each), besides the big one.",
    ),
    events: int = typer.Option(
        2_000,
        min=4,
        help="Events per run: of the one session on the broker whose page is timed.",
    ),
    requests: int = typer.Option(50, min=1, help="Requests of each page (p50 and p95)."),
    json_out: bool = _json(),
) -> None:
    """The web console: p50/p95 of the sessions list with three filters and of a big session's
    page, as the server answers (round trip on loopback, and the console's own time) and as
    Chromium renders them (to the load event). Needs a broker."""
    from rolltape.infra.bench.console import run_console_bench

    _show(
        run_console_bench(settings(), sessions=sessions, events=events, requests=requests), json_out
    )
