"""`rolltape broker up | down | status | logs`."""

from __future__ import annotations

import typer
from rich.markup import escape

from rolltape.infra.cli._common import console, err_console, settings
from rolltape.infra.commands.broker import (
    BrokerUp,
    broker_down,
    broker_logs,
    broker_status,
    broker_up,
    with_nodes,
)
from rolltape.infra.commands.broker_check import check_cluster

app = typer.Typer(help="Run or inspect the Kafka broker rolltape records to.", no_args_is_help=True)


@app.command()
def up(
    nodes: int | None = typer.Option(
        None,
        min=1,
        max=9,
        help="Nodes of the managed cluster when it is first made (default 1, or "
        "ROLLTAPE_BROKER_NODES); three replicate every topic three ways with min ISR 2. A "
        "cluster keeps the count it was made with.",
    ),
) -> None:
    """Start the managed broker (unless ROLLTAPE_BOOTSTRAP names one), create the topics and the
    judge's signing key; start the nodes of a managed cluster that are down.

    The managed broker authenticates every client (SASL/SCRAM-SHA-512) and lets each principal
    write only its own trust domain; `rolltape principal list` shows who exists."""
    cfg = settings()
    if nodes is not None:
        cfg = with_nodes(cfg, nodes)
    _print_up(broker_up(cfg, as_admin=True, on_step=_step))


def _step(line: str) -> None:
    """A slow step about to start (the first start fetches the Kafka jars): on stderr."""
    err_console.print(line, markup=False)


def _print_up(done: BrokerUp) -> None:
    """What `broker up` did, line by line (the demo does the same work and prints a summary)."""
    if done.managed is None:
        console.print(f"using the cluster at {done.cluster}")
    else:
        state = done.managed.state
        pids = ", ".join(str(n.pid) for n in state.nodes)
        size = f"{len(state.nodes)} nodes " if len(state.nodes) > 1 else ""
        console.print(
            f"Kafka {state.kafka_version} (KRaft) {size}is up at {state.bootstrap} (pid {pids}); "
            f"logs in {done.managed.log_dir}"
        )
        if not state.secure:
            err_console.print(
                "[yellow]warning:[/yellow] this broker's storage was formatted before rolltape "
                "provisioned principals: it runs PLAINTEXT and enforces no ACLs. To secure "
                f"it, stop it and remove {done.managed.home} (its records go with it)."
            )
    for status in done.topics or ():
        note = f"  [yellow]{status.note}[/yellow]" if status.note else ""
        console.print(
            f"  {status.topic:<32} {status.action.value:<15} {status.partitions} partitions{note}"
        )
    if done.not_provisioned:
        err_console.print(f"[yellow]topics not provisioned:[/yellow] {done.not_provisioned}")
    if done.principals:
        names = ", ".join(f"{name} ({role.value})" for name, role in done.principals)
        console.print(f"principals: {names}; secrets in {done.principals_file} (mode 0600)")
    new = "new judge key" if done.judge_key_created else "judge key"
    console.print(f"{new} {done.judge_key_id}: public key in {done.judge_public_key}")
    console.print(f"bootstrap: {done.bootstrap}")


@app.command()
def down() -> None:
    """Stop the managed broker cleanly; its data stays for the next `up`."""
    stopped = broker_down(settings())
    console.print("broker stopped" if stopped else "no managed broker was running")


@app.command()
def status() -> None:
    """Print the bootstrap address when a broker answers; then, for a managed cluster of several
    nodes, each node, and any partition that is offline or under-replicated; then each consumer
    group reading the prefix's topics (the worker's among them) with its lag per topic. Exit 0
    when it answers and is healthy, 1 when it does not answer or is not healthy."""
    found = broker_status(settings())
    if found.bootstrap is None:
        err_console.print(found.problem)
        raise typer.Exit(1)
    console.print(found.bootstrap)
    for node in found.nodes if len(found.nodes) > 1 else []:
        alive = f"up (pid {node.pid})" if node.up else "down"
        console.print(f"  node {node.node_id}  {node.address:<22} {alive}")
    health = found.partitions
    for what, names in (("offline", health.offline), ("under-replicated", health.under_replicated)):
        if names:
            more = f" and {len(names) - 12} more" if len(names) > 12 else ""
            err_console.print(f"{len(names)} partition(s) {what}: {', '.join(names[:12])}{more}")
    for group in found.groups:
        members = "?" if group.members is None else str(group.members)
        per_topic = ", ".join(f"{t.topic} {t.lag}" for t in group.topics)
        console.print(
            f"  group {escape(group.group)}  {members} member(s)  lag {group.lag} ({per_topic})",
            highlight=False,
            soft_wrap=True,
        )
    if found.problem:
        err_console.print(f"not healthy: {found.problem}")
        raise typer.Exit(1)
    if len(found.nodes) > 1:
        console.print(
            f"  healthy: {len(found.nodes)} nodes up, {health.partitions} partitions fully "
            "replicated"
        )


@app.command()
def check(
    verbose: bool = typer.Option(False, "--passing", help="Show the checks that pass too."),
) -> None:
    """Check the cluster (ROLLTAPE_BOOTSTRAP, or the managed one) against what rolltape's
    guarantees need: the topics' replication, min ISR and configs, unclean leader election off,
    every principal's ACLs, the clients' acks=all and idempotence; each problem with what to
    change. Exit 1 when there is a problem (warnings alone: 0)."""
    report = check_cluster(settings())
    console.print(f"{report.bootstrap}: {report.brokers} broker(s)", highlight=False)
    for finding in report.findings:
        if finding.severity == "ok" and not verbose:
            continue
        mark = {"ok": "ok", "warning": "[yellow]warning[/yellow]", "problem": "[red]problem[/red]"}
        console.print(
            f"  {mark[finding.severity]}  {escape(finding.subject)}: {escape(finding.check)} = "
            f"{escape(finding.found)}",
            soft_wrap=True,
        )
        if finding.fix:
            console.print(f"      fix: {escape(finding.fix)}", soft_wrap=True, highlight=False)
    ok = sum(f.severity == "ok" for f in report.findings)
    console.print(f"{ok} ok, {len(report.warnings)} warning(s), {len(report.problems)} problem(s)")
    if report.problems:
        raise typer.Exit(1)


@app.command()
def logs(
    lines: int = typer.Option(50, "--lines", "-n", help="How many lines of each log."),
) -> None:
    """Show the end of the managed broker's logs."""
    console.print(broker_logs(settings(), lines), markup=False)
