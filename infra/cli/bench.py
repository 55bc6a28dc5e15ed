"""`rolltape bench ...`: scripts that print figures (never timed assertions in tests)."""

from __future__ import annotations

import json
from typing import cast

import typer

from rolltape.infra.broker import require_connection
from rolltape.infra.cli._common import CliError, console, settings
from rolltape.schemas import Role

app = typer.Typer(help="Benchmarks that print figures.", no_args_is_help=True)


@app.command()
def producer(
    calls: int = typer.Option(200_000, min=1, help="Calls timed: hot-path record calls in all."),
    events: int = typer.Option(200_000, min=1, help="Events per run (sustained throughput)."),
    repeats: int = typer.Option(3, min=1, help="Runs; medians are reported."),
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
    json_out: bool = typer.Option(False, "--json", help="Print JSON: the figures."),
) -> None:
    """Hot-path cost of a record call and sustained events/s to the broker."""
    from rolltape.infra.bench.producer import run_producer_bench

    cfg = settings()
    require_connection(cfg, Role.ADMIN)  # a clear error when there is no broker
    r = run_producer_bench(
        cfg,
        partitions=cfg.partitions,
        calls=calls,
        events=events,
        repeats=repeats,
        senders=(1, 2, *senders),
        sessions=sessions,
        sealed=sealed,
    )
    if json_out:
        console.print(r.model_dump_json(indent=2), markup=False)
        return
    console.print(
        f"machine: {r.machine}; {r.repeats} repeats; {r.partitions} partitions; timer overhead {r.timer_overhead_us:.3f} us (subtracted)"
    )
    console.print("(a) hot path, one record call of a ~1 KB turn")
    console.print(
        f"    rolltape Session.turn      p50 {r.recorder.p50_us:7.2f} us   p99 {r.recorder.p99_us:7.2f} us"
    )
    console.print(
        f"    chained JSONL writer       p50 {r.jsonl_writer.p50_us:7.2f} us   p99 {r.jsonl_writer.p99_us:7.2f} us"
    )
    console.print(f"    ratio (writer / rolltape p50): {r.hot_path_ratio:.1f}x")
    console.print(f"(b) sustained, {r.sustained_events} events of ~1 KB, acks=all, idempotent")
    console.print(
        f"    rolltape: {r.recorder_events_per_s:,.0f} events/s (enqueue {r.recorder_enqueue_s:.2f} s, all acknowledged after {r.recorder_until_acked_s:.2f} s)"
    )
    console.print(
        f"    raw aiokafka, pre-encoded values: {r.raw_aiokafka_events_per_s:,.0f} events/s"
    )
    console.print(f"    ratio (rolltape / raw): {r.throughput_ratio:.2f}")
    console.print(
        f"    raw aiokafka, pre-encoded values in hand-built batches (client ceiling): "
        f"{r.raw_batches_events_per_s:,.0f} events/s"
    )
    console.print(
        f"(c) sustained by sender processes, {r.sustained_sessions} sessions; ceiling and ratio "
        "from the same repeats"
    )
    console.print(
        "    ceiling per repeat: "
        + " / ".join(f"{v:,.0f}" for v in r.raw_batches_runs_events_per_s)
    )
    console.print("    senders   events/s   ceiling   ratio   runs (ratio: median of the repeats')")
    for s in r.by_senders:
        runs = " / ".join(f"{v:,.0f}" for v in s.runs_events_per_s)
        console.print(
            f"    {s.senders:>7}   {s.events_per_s:8,.0f}   {s.ceiling_events_per_s:7,.0f}   "
            f"{s.ratio:5.2f}   {runs}"
        )
    two = next((s for s in r.by_senders if s.senders == 2), None)
    if two is not None:
        rate_met = two.events_per_s >= r.goal_events_per_s
        ratio_met = two.ratio >= r.goal_ratio
        console.print(
            f"    goal, two senders: >= {r.goal_events_per_s:,.0f} events/s "
            f"({'met' if rate_met else 'MISSED'}: {two.events_per_s:,.0f}) and >= {r.goal_ratio} "
            f"of the ceiling ({'met' if ratio_met else 'MISSED'}: {two.ratio:.2f})"
        )
    if r.sealed:
        console.print("(d) sessions that name a subject (content sealed), same repeats")
        console.print("    senders   events/s   ratio to unsealed   runs")
        for run in r.sealed:
            runs = " / ".join(f"{v:,.0f}" for v in run.runs_events_per_s)
            verdict = "met" if run.ratio >= run.goal_ratio else "MISSED"
            console.print(
                f"    {run.senders:>7}   {run.events_per_s:8,.0f}   {run.ratio:5.2f} "
                f"(goal >= {run.goal_ratio}: {verdict})   {runs}"
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
    json_out: bool = typer.Option(False, "--json", help="Print JSON: the figures."),
) -> None:
    """Metric-acknowledged to rule-evaluation-readable latency, and worker events/s."""
    from rolltape.infra.bench.rules import run_rules_bench

    cfg = settings()
    require_connection(cfg, Role.ADMIN)  # a clear error when there is no broker
    r = run_rules_bench(
        cfg,
        partitions=cfg.partitions,
        epochs=epochs,
        events=events,
        sessions=sessions,
        two_workers=two_workers,
        concurrent_sessions=at_once,
    )
    if json_out:
        console.print(r.model_dump_json(indent=2), markup=False)
        return
    console.print(f"machine: {r.machine}; {r.partitions} partitions")
    console.print(
        f"(a) metric acknowledged -> rule evaluation readable, {r.epochs} epochs after {r.warmup} warm-up"
    )
    console.print(
        f"    p50 {r.latency_p50_ms:.1f} ms   p99 {r.latency_p99_ms:.1f} ms   max {r.latency_max_ms:.1f} ms"
    )
    console.print(f"(b) {r.events} events (half metrics, half turns) over {r.sessions} sessions")
    console.print(
        f"    worker: {r.worker_events_per_s:,.0f} events/s (first to last output {r.worker_span_s:.2f} s)"
    )
    console.print(
        f"    plain aiokafka consumer, same records: {r.raw_consumer_events_per_s:,.0f} events/s"
    )
    console.print(f"    ratio (worker / consumer): {r.worker_vs_raw_consumer:.2f}")
    if r.two_workers_events_per_s is not None:
        console.print(
            f"    two worker processes in one group, same load on fresh topics: "
            f"{r.two_workers_events_per_s:,.0f} events/s "
            f"({r.two_workers_events_per_s / r.worker_events_per_s:.2f}x one worker)"
        )
    console.print(
        f"    faust agent doing nothing, same records: {r.faust_floor_events_per_s:,.0f} events/s "
        f"(worker / faust floor: {r.worker_vs_faust_floor:.2f})"
    )
    console.print(f"    pure core in memory (no Kafka): {r.pure_core_events_per_s:,.0f} events/s")
    if r.interleaved_events_per_s is not None:
        console.print(
            f"    the same events from {r.concurrent_sessions:,} sessions at once: "
            f"{r.interleaved_events_per_s:,.0f} events/s"
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
    json_out: bool = typer.Option(False, "--json", help="Print JSON: the figures."),
) -> None:
    """Events/s from a topic through replay, fold and ShareGPT export vs the raw consume rate."""
    from rolltape.infra.bench.replay import run_replay_bench

    cfg = settings()
    require_connection(cfg, Role.ADMIN)  # a clear error when there is no broker
    r = run_replay_bench(
        cfg, partitions=cfg.partitions, events=events, sessions=sessions, passes=passes, jobs=jobs
    )
    if json_out:
        console.print(r.model_dump_json(indent=2), markup=False)
        return
    console.print(f"machine: {r.machine}; {r.partitions} partitions")
    medians = f"medians of {r.passes} passes" if r.passes > 1 else "one pass"
    console.print(
        f"{r.events:,} events over {r.sessions:,} sessions (written in {r.load_s:.1f} s); {medians}"
    )
    console.print(f"  raw aiokafka scan of the topic:        {r.raw_events_per_s:,.0f} events/s")
    console.print(
        f"  replay + fold + ShareGPT export:       {r.pipeline_events_per_s:,.0f} events/s "
        f"(ratio to raw {r.pipeline_vs_raw:.2f})"
    )
    console.print(
        f"  stages: read {r.read_s:.2f} s, replay {r.replay_s:.2f} s, fold {r.fold_s:.2f} s, "
        f"export {r.export_s:.2f} s"
    )
    console.print(f"    ({r.export_lines:,} lines, {r.export_bytes / 1e6:.1f} MB)")
    console.print(
        f"  read + decode alone (no processing):   {r.decode_ceiling_events_per_s:,.0f} events/s "
        f"(decode {r.decode_s:.2f} s)"
    )
    verdict = "met" if r.pipeline_vs_decode_ceiling >= 0.5 else "MISSED"
    console.print(
        f"    pipeline / (read + decode): {r.pipeline_vs_decode_ceiling:.2f} (goal >= 0.5: {verdict})"
    )
    console.print(
        f"  rolltape log replay --dry-run, one process: {r.command_events_per_s:,.0f} events/s"
    )
    console.print(
        f"    --jobs {r.jobs}: {r.command_jobs_events_per_s:,.0f} events/s "
        f"({r.command_jobs_events_per_s / r.command_events_per_s:.2f}x)"
    )
    verdict = "met" if r.group_two_vs_one >= 1.6 else "MISSED"
    console.print(
        f"  rolltape log replay --dry-run --group, one member: {r.group_one_events_per_s:,.0f} "
        f"events/s; two members: {r.group_two_events_per_s:,.0f} events/s "
        f"({r.group_two_vs_one:.2f}x, goal >= 1.6: {verdict})"
    )
    console.print(
        f"  rolltape dataset export -f sharegpt (command): {r.export_events_per_s:,.0f} events/s, "
        f"peak RSS {r.export_peak_rss_mb:,.0f} MB"
    )
    console.print(
        f"    same export held in memory: {r.in_memory_export_events_per_s:,.0f} events/s, "
        f"peak RSS {r.in_memory_export_peak_rss_mb:,.0f} MB"
    )
    console.print(f"    `export --help` alone: peak RSS {r.idle_rss_mb:,.0f} MB")


@app.command()
def cluster(
    events: int = typer.Option(100_000, min=1, help="Events per run (sustained)."),
    repeats: int = typer.Option(3, min=1, help="Runs; medians are reported (on each cluster)."),
    senders: int = typer.Option(1, min=1, help="Sender processes (of the recorder)."),
    sessions: int = typer.Option(
        64, min=1, help="Sessions in each run (the events spread over them)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON: the figures."),
) -> None:
    """Recording into a three-node cluster (RF 3, min ISR 2) against one node, same run. Starts
    both clusters itself (no ROLLTAPE_BOOTSTRAP needed)."""
    from rolltape.infra.bench.cluster import run_cluster_bench

    r = run_cluster_bench(events=events, repeats=repeats, senders=senders, sessions=sessions)
    if json_out:
        console.print(r.model_dump_json(indent=2), markup=False)
        return
    console.print(
        f"machine: {r.machine}; every node on this machine; {r.partitions} partitions; "
        f"{r.repeats} repeats, alternating which cluster goes first"
    )
    console.print(
        f"{r.events:,} events of ~1 KB over {r.sessions} sessions, {r.senders} sender "
        "process(es), acks=all, idempotent; until every event is acknowledged"
    )
    for run in (r.single, r.replicated):
        runs = " / ".join(f"{v:,.0f}" for v in run.runs_events_per_s)
        console.print(
            f"  {run.nodes} node(s), replication factor {run.replication_factor}, min ISR "
            f"{run.min_insync_replicas}: {run.events_per_s:,.0f} events/s ({runs}); brokers' "
            f"CPU {run.broker_cpu_us_per_event:.1f} us an event, all nodes together"
        )
        for problem in run.check_problems:
            console.print(f"    broker check: {problem}", markup=False)
    verdict = "met" if r.ratio >= r.goal_ratio else "MISSED"
    console.print(
        f"  ratio (three nodes / one): {r.ratio:.2f} (per repeat: "
        f"{' / '.join(f'{v:.2f}' for v in r.runs_ratio)}; goal >= {r.goal_ratio}: {verdict})"
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
    json_out: bool = typer.Option(False, "--json", help="Print JSON: the figures."),
) -> None:
    """Training-step time with the monitor measuring every step vs the same loop without it
    (same process, alternating blocks, medians), and the cost of an epoch's end."""
    from rolltape.infra.bench.monitor import ModelName, run_monitor_bench

    unknown = [m for m in network if m not in ("cnn", "resnet18", "transformer")]
    if unknown:
        raise typer.BadParameter(
            f"{', '.join(unknown)}: the networks are cnn, resnet18 and transformer",
            param_hint="--network",
        )
    if device not in ("cpu", "cuda"):
        raise typer.BadParameter(f"{device}: cpu or cuda", param_hint="--device")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise typer.BadParameter(
                "no CUDA device is visible to torch here; measure on cpu", param_hint="--device"
            )
    models = cast(tuple[ModelName, ...], tuple(dict.fromkeys(network)))
    r = run_monitor_bench(
        steps=steps, block=block, widths=tuple(width), models=models, device=device
    )
    if json_out:
        console.print(r.model_dump_json(indent=2), markup=False)
        return
    console.print(f"machine: {r.machine}; torch {r.torch}, {r.threads} threads; device {r.device}")
    console.print("every step measured; SGD with momentum")
    for f in r.results:
        console.print(f"  {f.architecture}, batch {f.batch_size}, {f.steps_each} steps each:")
        console.print(
            f"    step p50: plain {f.plain_step_ms:.3f} ms, monitored {f.monitored_step_ms:.3f} ms"
            f" -> overhead {f.overhead:+.1%} (goal <= {f.goal:.0%}: "
            f"{'met' if f.overhead <= f.goal else 'NOT met'})"
        )
        if f.host_syncs_checked:
            console.print("    host synchronisations in a monitored block: none (CUDA sync debug)")
        console.print(
            f"    epoch end (validation, probe, one host copy, record): {f.epoch_end_ms:.1f} ms "
            f"per epoch, beside {f.train_epoch_ms:.0f} ms of training steps"
        )


@app.command()
def capture(
    calls: int = typer.Option(
        3000, min=2, help="Calls timed per client, back to back (half as many in the paused run)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON: the figures."),
    peer: str | None = typer.Option(
        None,
        help="otel: beside OpenTelemetry's OpenAI instrumentation on a realistic request (the "
        "bench extra: pip install 'rolltape[bench]').",
    ),
) -> None:
    """Latency a captured `chat.completions.create` adds over the bare client, against a local
    server that answers at once (no broker needed: the capture records to a spool)."""
    if peer is not None:
        if peer != "otel":
            raise typer.BadParameter(f"{peer!r}: the peer measured is otel", param_hint="--peer")
        _peer(calls, json_out)
        return
    from rolltape.infra.bench.capture import run_capture_bench

    runs = [run_capture_bench(calls=calls), run_capture_bench(calls=calls // 2, gap_ms=5.0)]
    if json_out:
        console.print(json.dumps([r.model_dump() for r in runs], indent=2), markup=False)
        return
    console.print(f"machine: {runs[0].machine}")
    console.print("bare and captured clients take turns call by call against a local server")
    console.print("that answers at once; added = median of the paired differences")
    for r in runs:
        when = "back to back" if not r.gap_ms else f"{r.gap_ms:.0f} ms pause between calls"
        console.print(f"({when}, {r.calls_each} calls each)")
        console.print(
            f"    bare openai client   p50 {r.bare_p50_us:8.1f} us  p99 {r.bare_p99_us:8.1f} us"
        )
        console.print(
            f"    captured             p50 {r.captured_p50_us:8.1f} us  p99 {r.captured_p99_us:8.1f} us"
        )
        console.print(f"    added, end to end    p50 {r.added_p50_us:8.1f} us")
        console.print(
            f"    recording in call    p50 {r.in_call_p50_us:8.1f} us  p99 {r.in_call_p99_us:8.1f} us"
        )
        console.print(f"    recording code alone p50 {r.code_alone_p50_us:8.1f} us (no HTTP)")
    console.print(f"goal: added p50 <= {runs[0].goal_added_p50_us:.0f} us")


def _peer(calls: int, json_out: bool) -> None:
    try:
        from rolltape.infra.bench.capture_peer import run_peer_bench

        r = run_peer_bench(calls=calls)
    except ImportError as exc:
        raise CliError(
            f"the peer's packages are missing ({exc.name}): pip install 'rolltape[bench]'"
        ) from exc
    if json_out:
        console.print(r.model_dump_json(indent=2), markup=False)
        return
    console.print(f"machine: {r.machine}")
    console.print(
        "a system prompt, a user message, one tool; a reply with content and a tool call;",
        highlight=False,
    )
    console.print(
        f"bare, rolltape and otel take turns in {r.rounds} rounds of "
        f"{r.calls_each // max(r.rounds, 1)} calls ({r.calls_each} each)",
        highlight=False,
    )
    console.print("    (us)           p50       p99   added p50   added p99", highlight=False)
    for w in r.ways:
        console.print(
            f"    {w.name:<9} {w.p50_us:8.1f}  {w.p99_us:8.1f}    {w.added_p50_us:8.1f}    "
            f"{w.added_p99_us:8.1f}",
            highlight=False,
        )
    met50 = "met" if r.ratio_p50 <= r.goal_ratio_p50 else "NOT met"
    met99 = "met" if r.ratio_p99 <= r.goal_ratio_p99 else "NOT met"
    console.print(
        f"rolltape / otel added: p50 {r.ratio_p50:.2f} (goal <= {r.goal_ratio_p50:.1f}: {met50}),"
        f" p99 {r.ratio_p99:.2f} (goal <= {r.goal_ratio_p99:.1f}: {met99})",
        highlight=False,
    )
    versions = ", ".join(f"{k} {v}" for k, v in r.otel_versions.items())
    console.print(f"otel: {versions}", highlight=False)


@app.command()
def otlp(
    spans: int = typer.Option(100_000, min=1, help="Spans per timed run."),
    batch: int = typer.Option(512, min=1, help="Spans per request (the SDK exporter's default)."),
    connections: int = typer.Option(4, min=1, help="Concurrent keep-alive connections."),
    repeats: int = typer.Option(3, min=1, help="Runs; medians are reported."),
    workers: list[int] = typer.Option(
        [],
        min=2,
        help="Processes that record spans: also measure `serve otlp --workers N` for each N given "
        "(same runs).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON: the figures."),
) -> None:
    """Spans/s through `rolltape serve otlp` into Kafka: content on the spans over HTTP, as log
    records, over gRPC, against a receiver that only decodes."""
    from rolltape.infra.bench.otlp import run_otlp_bench

    cfg = settings()
    require_connection(cfg, Role.ADMIN)  # a clear error when there is no broker
    r = run_otlp_bench(
        cfg,
        partitions=cfg.partitions,
        spans=spans,
        spans_per_batch=batch,
        connections=connections,
        repeats=repeats,
        workers=tuple(workers),
    )
    if json_out:
        console.print(r.model_dump_json(indent=2), markup=False)
        return
    runs = ", ".join(f"{v:,.0f}" for v in r.receiver_runs)
    console.print(
        f"machine: {r.machine}; {r.repeats} repeats of {r.spans:,} spans in requests of "
        f"{r.spans_per_batch} over {r.connections} connections (agent traces: chat and "
        "execute_tool spans with their messages)"
    )
    console.print(
        f"    rolltape serve otlp, acknowledged into Kafka: {r.receiver_spans_per_s:,.0f} "
        f"spans/s (runs {runs}; {r.events_per_span:.2f} records per span)"
    )
    console.print(
        f"    baseline receiver that only decodes:        {r.decode_only_spans_per_s:,.0f} spans/s"
    )
    console.print(
        f"    ratio (rolltape / baseline): {r.ratio:.2f} (goal >= {r.goal_ratio:.2f}: "
        f"{'met' if r.ratio >= r.goal_ratio else 'MISSED'})"
    )
    if r.receiver_cpu_us_per_span is not None and r.decode_only_cpu_us_per_span is not None:
        waited = (
            ": the rest it waited for the load generator" if (r.decode_only_busy or 0) < 0.9 else ""
        )
        console.print(
            f"    receiver CPU per span: {r.receiver_cpu_us_per_span:.1f} µs (busy "
            f"{r.receiver_busy:.0%} of the run); baseline {r.decode_only_cpu_us_per_span:.1f} µs "
            f"(busy {r.decode_only_busy:.0%}{waited}); ratio in CPU {r.cpu_ratio:.2f}"
        )
        console.print(
            f"    CPU per span with content as log records {r.logs_cpu_us_per_span:.1f} µs, "
            f"over gRPC {r.grpc_cpu_us_per_span:.1f} µs"
        )
    for label, rate, ratio in (
        (
            f"content as log records ({r.log_records_per_span:.1f} per span)",
            r.logs_spans_per_s,
            r.logs_ratio,
        ),
        ("spans over gRPC", r.grpc_spans_per_s, r.grpc_ratio),
    ):
        verdict = "met" if ratio >= 0.8 else "MISSED"
        console.print(
            f"    {label}: {rate:,.0f} spans/s, {ratio:.2f} of spans over HTTP "
            f"(goal >= 0.80: {verdict})"
        )
    for n, rate in r.workers_spans_per_s.items():
        console.print(
            f"    otlp serve --workers {n}: {rate:,.0f} spans/s "
            f"({rate / r.receiver_spans_per_s:.2f}x one process)"
        )
    verdict = "met" if r.receiver_spans_per_s >= r.goal_spans_per_s else "MISSED"
    console.print(
        f"    goal >= {r.goal_spans_per_s:,.0f} spans/s on one process: {verdict} (anchor: the "
        f"OpenTelemetry Collector, ~{r.anchor_collector_spans_per_s_per_core:,.0f} spans/s per core)"
    )


@app.command()
def evidence(
    sessions: int = typer.Option(
        2000, min=1, help="Sessions in each run (agent sessions in the export that is verified)."
    ),
    repeats: int = typer.Option(3, min=1, help="Runs; medians are reported."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON: the figures."),
) -> None:
    """Checkpoint signing and `verify-export` throughput (no broker: the code's own cost)."""
    from rolltape.infra.bench.evidence import run_evidence_bench

    r = run_evidence_bench(sessions=sessions, repeats=repeats)
    if json_out:
        console.print(r.model_dump_json(indent=2), markup=False)
        return
    console.print(f"machine: {r.machine}; {r.repeats} repeats (medians)")
    console.print("(a) checkpoint signing (the worker, per partition and batch)")
    console.print(f"    Ed25519 signature alone         {r.sign_only_per_s:10,.0f} /s")
    console.print(f"    checkpoint of 2 leaves          {r.checkpoints_per_s_2_leaves:10,.0f} /s")
    console.print(
        f"    checkpoint of 100 leaves        {r.checkpoints_per_s_100_leaves:10,.0f} /s "
        f"({r.leaves_per_s_100_leaves:,.0f} leaves/s)"
    )
    console.print(f"(b) an export of {r.sessions} sessions with evidence (ShareGPT, one line each)")
    console.print(f"    export --evidence (no Kafka)    {r.export_lines_per_s:10,.0f} lines/s")
    console.print(f"    verify-export                   {r.verify_lines_per_s:10,.0f} lines/s")
    console.print(f"    hashing the evidence alone      {r.hash_only_lines_per_s:10,.0f} lines/s")
    console.print(f"    ratio (verify / hashing alone): {r.verify_ratio:.2f}")


@app.command("export")
def export_bench(
    sessions: int = typer.Option(
        2000, min=1, help="Sessions in each run (agent sessions in each export)."
    ),
    repeats: int = typer.Option(5, min=1, help="Runs; medians are reported (of each export)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON: the figures."),
) -> None:
    """Export throughput of sessions recorded with a subject (content sealed, opened on export)
    against the same sessions in clear, in the same run (no broker: the code's own cost)."""
    from rolltape.infra.bench.export import run_export_bench

    r = run_export_bench(sessions=sessions, repeats=repeats)
    if json_out:
        console.print(r.model_dump_json(indent=2), markup=False)
        return
    console.print(f"machine: {r.machine}; {r.repeats} repeats (medians)")
    console.print(
        f"export of {r.sessions} sessions ({r.events_per_session} events each) to ShareGPT"
    )
    console.print("(Kafka reading left out: the same work for both)")
    console.print(f"    in clear                        {r.clear_sessions_per_s:10,.0f} sessions/s")
    console.print(
        f"    sealed, opened on export        {r.sealed_sessions_per_s:10,.0f} sessions/s"
    )
    console.print(f"    opening alone                   {r.open_us_per_event:10.1f} µs/event")
    verdict = "met" if r.ratio >= r.goal_ratio else "MISSED"
    console.print(f"    ratio (sealed / clear): {r.ratio:.3f}; goal >= {r.goal_ratio}: {verdict}")


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
    json_out: bool = typer.Option(False, "--json", help="Print JSON: the figures."),
) -> None:
    """The batch runner's rollouts/s against a server that answers at once (its own overhead),
    beside bare model calls; cron's jitter from due time to session start."""
    from rolltape.infra.bench.batch import run_batch_bench

    cfg = settings()
    require_connection(cfg, Role.ADMIN)  # a clear error when there is no broker
    r = run_batch_bench(
        cfg,
        concurrencies=tuple(concurrency),
        rollouts=rollouts,
        cron_jobs=cron_jobs,
        cron_fires=cron_fires,
    )
    if json_out:
        console.print(r.model_dump_json(indent=2), markup=False)
        return
    console.print(f"machine: {r.machine}")
    console.print(
        "(a) batch runner: one-call rollouts, recorded on scratch topics, reward at once; "
        "bare calls to the same server as the floor"
    )
    console.print("    concurrency   rollouts/s   bare calls/s   ratio")
    for run in r.runs:
        console.print(
            f"    {run.concurrency:>11}   {run.rollouts_per_s:10,.1f}   "
            f"{run.bare_calls_per_s:12,.1f}   {run.ratio:5.2f}"
        )
    c = r.cron
    console.print(
        f"(b) cron: {c.fires:,} runs of {c.jobs} jobs due every second (after {c.warmup_s:.0f} s "
        "of warm-up), runner returns at once"
    )
    console.print(
        f"    due -> session start    p50 {c.jitter_p50_ms:7.1f} ms   p99 {c.jitter_p99_ms:7.1f} ms"
        f"   max {c.jitter_max_ms:7.1f} ms"
    )
    console.print(
        f"    asyncio wake-up floor   p50 {c.asyncio_floor_p50_ms:7.1f} ms   "
        f"p99 {c.asyncio_floor_p99_ms:7.1f} ms"
    )


@app.command()
def judges(
    repeats: int = typer.Option(
        9, min=1, help="Runs; medians are reported (rounds of the world operations)."
    ),
    calls: int = typer.Option(
        200, min=1, help="Calls timed: shell tool calls each way (alternating)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON: the figures."),
) -> None:
    """Recording and restoring a rollout's world against tar of the same tree; a shell tool
    call in the bubblewrap sandbox against the same command unsandboxed. No broker needed."""
    from rolltape.infra.bench.judges import run_judges_bench

    r = run_judges_bench(repeats=repeats, calls=calls)
    if json_out:
        console.print(r.model_dump_json(indent=2), markup=False)
        return
    console.print(f"machine: {r.machine}; {r.repeats} repeats, medians")
    console.print("(a) a world recorded (snapshot + blob records) and restored, against GNU tar")
    console.print("    (goal: each ratio at most 2)")
    for s in r.snapshots:
        console.print(f"    {s.files:,} files, {s.bytes / 2**20:.0f} MB:", highlight=False)
        console.print(
            f"      record  {s.record_p50_ms:7.1f} ms  tar -cf {s.tar_create_p50_ms:7.1f} ms  "
            f"ratio {s.record_ratio:.2f}",
            highlight=False,
        )
        console.print(
            f"      restore {s.restore_p50_ms:7.1f} ms  tar -xf {s.tar_extract_p50_ms:7.1f} ms  "
            f"ratio {s.restore_ratio:.2f}",
            highlight=False,
        )
    if r.sandbox is None:
        console.print(f"(b) sandbox: not measured: {r.sandbox_problem}")
        return
    b = r.sandbox
    console.print(f"(b) a shell tool call ({b.command!r}, {b.calls} each way)", highlight=False)
    console.print(
        f"    bubblewrap {b.sandboxed_p50_ms:.1f} ms, unsandboxed {b.unsandboxed_p50_ms:.1f} ms,"
        f" added {b.added_p50_ms:.1f} ms (goal: at most 20 ms)",
        highlight=False,
    )


@app.command()
def prompts(
    rounds: int = typer.Option(3, min=1, help="Rounds of the loop: medians over them."),
    epochs: int = typer.Option(4, min=1, help="Epochs per run (a test run)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON: the figures."),
) -> None:
    """The prompt loop's own time per round (the tuner's call, recording, the rule) beside the
    monitored training runs it starts, with a server that answers at once; the same scenarios
    run by the harness without the loop as the baseline. Needs a broker and the torch extra."""
    from rolltape.infra.bench.prompts import run_prompts_bench

    cfg = settings()
    require_connection(cfg, Role.ADMIN)  # a clear error when there is no broker
    r = run_prompts_bench(cfg, rounds=rounds, epochs=epochs)
    if json_out:
        console.print(r.model_dump_json(indent=2), markup=False)
        return
    console.print(f"machine: {r.machine}")
    console.print(
        f"prompt loop on harness.policy, held out {', '.join(r.heldout)}, {r.epochs} epochs "
        "per run, a server that answers at once",
        highlight=False,
    )
    console.print("    round   seconds   runs   in runs   loop's own   share   model calls")
    for x in r.rounds:
        console.print(
            f"    {x.round:>5}   {x.seconds:7.2f}   {x.runs:>4}   {x.run_seconds:7.2f}   "
            f"{x.overhead_seconds:10.3f}   {x.overhead_share:5.1%}   {x.model_calls:>11}",
            highlight=False,
        )
    console.print(
        f"    median round {r.median_round_s:.2f} s, loop's own {r.median_overhead_s:.3f} s "
        f"({r.median_overhead_share:.1%}; goal at most {r.goal_overhead_share:.0%}: "
        f"{'met' if r.met else 'NOT met'})",
        highlight=False,
    )
    console.print(
        f"    a held-out run: {r.loop_run_p50_s:.2f} s in the loop, {r.bare_run_p50_s:.2f} s "
        "run by the harness alone (median)",
        highlight=False,
    )
