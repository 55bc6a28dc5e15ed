"""`rolltape broker check`: is this cluster (ROLLTAPE_BOOTSTRAP, or the managed one) set up the
way rolltape's guarantees need, and if not, what to change.

What a guarantee rests on, and so what is checked:

- every topic of the prefix exists, with the configs its spec names (`LogAppendTime`, so the
  broker's clock orders records; compaction where a topic is a table; retention);
- replication: three replicas with `min.insync.replicas` 2 where the cluster has three brokers
  or more (an acks=all write then survives the loss of any one broker), and unclean leader
  election off on the brokers (an out-of-sync replica never becomes leader and drops records);
- the ACLs of every principal rolltape keeps for the cluster, as `role_acls` gives them;
- the clients: rolltape's chain producer is idempotent with acks=all (it is fixed in code; the
  check builds one and reads it back, so a change there shows here).

A cluster with fewer than three brokers cannot replicate that way: it is a warning, not a
problem. Everything is read as the admin (describing configs and ACLs needs it).
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from pydantic import BaseModel

from rolltape.infra.broker import (
    cluster_brokers,
    describe_acls,
    min_insync_for,
    principal_store,
    replication_for,
    require_connection,
    role_acls,
)
from rolltape.infra.settings import Settings
from rolltape.schemas import TOPIC_SPECS, Role, topic_name
from rolltape.schemas.clients import KafkaConnection, describe_configs

Severity = Literal["ok", "warning", "problem"]


class Finding(BaseModel):
    """One thing checked: what, on what, what was found, and what to change when it is not ok."""

    subject: str
    check: str
    severity: Severity
    found: str
    fix: str = ""


class ClusterCheck(BaseModel):
    """Every finding of a check, in the order they were made."""

    bootstrap: str
    brokers: int
    findings: list[Finding]

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "problem"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]


def check_cluster(settings: Settings) -> ClusterCheck:
    """Check the cluster the settings name (module docstring)."""
    return asyncio.run(_check(settings))


async def _check(settings: Settings) -> ClusterCheck:
    admin = require_connection(settings, Role.ADMIN)
    brokers = await cluster_brokers(admin, timeout_s=10.0)
    findings: list[Finding] = []
    want_replicas = replication_for(brokers) if brokers else 1
    if brokers < 3:
        findings.append(
            Finding(
                subject="cluster",
                check="brokers",
                severity="warning",
                found=f"{brokers} broker(s): a broker's loss loses what only it holds",
                fix="run three brokers or more (`rolltape broker up --nodes 3` for a managed "
                "cluster on one machine)",
            )
        )
    findings += await _topic_findings(admin, settings, want_replicas)
    findings += await _broker_findings(admin)
    findings += await _acl_findings(admin, settings)
    findings += await _client_findings(admin)
    return ClusterCheck(bootstrap=admin.bootstrap, brokers=brokers, findings=findings)


def _alter(topic: str, key: str, value: str) -> str:
    return (
        f"`rolltape broker up` as the admin aligns it, or: kafka-configs.sh --alter --entity-type "
        f"topics --entity-name {topic} --add-config {key}={value}"
    )


async def _topic_findings(
    admin: KafkaConnection, settings: Settings, want_replicas: int
) -> list[Finding]:
    wanted = {topic_name(spec.stream, settings.topic_prefix): spec for spec in TOPIC_SPECS}
    doing = f"describing the topics of prefix {settings.topic_prefix} on {admin}"
    async with admin.started(admin.admin(), doing) as client:
        described = {t["topic"]: t for t in await client.describe_topics(list(wanted))}
        present = [n for n in wanted if n in described and not described[n]["error_code"]]
        configs = await describe_configs(client, "topic", present) if present else {}
    out: list[Finding] = []
    for name, spec in wanted.items():
        if name not in present:
            out.append(
                Finding(
                    subject=f"topic {name}",
                    check="exists",
                    severity="problem",
                    found="missing (or not visible to the admin)",
                    fix="`rolltape broker up` as the admin creates it",
                )
            )
            continue
        replicas = min(len(p["replicas"]) for p in described[name]["partitions"])
        severity: Severity = "ok" if replicas >= want_replicas else "problem"
        out.append(
            Finding(
                subject=f"topic {name}",
                check="replication factor",
                severity=severity,
                found=str(replicas),
                fix=""
                if severity == "ok"
                else f"reassign its partitions to {want_replicas} replicas "
                "(kafka-reassign-partitions.sh): a replication factor is not a config",
            )
        )
        current = configs.get(name, {})
        want_isr = str(min_insync_for(replicas))
        isr = current.get("min.insync.replicas", "?")
        isr_ok = isr.isdigit() and int(isr) >= int(want_isr)
        out.append(
            Finding(
                subject=f"topic {name}",
                check="min.insync.replicas",
                severity="ok" if isr_ok else "problem",
                found=isr,
                fix="" if isr_ok else _alter(name, "min.insync.replicas", want_isr),
            )
        )
        for key, value in spec.configs.items():
            have = current.get(key, "?")
            ok = have == value
            out.append(
                Finding(
                    subject=f"topic {name}",
                    check=key,
                    severity="ok" if ok else "problem",
                    found=have,
                    fix="" if ok else _alter(name, key, value),
                )
            )
    return out


async def _broker_findings(admin: KafkaConnection) -> list[Finding]:
    doing = f"describing the brokers' configs on {admin}"
    async with admin.started(admin.admin(), doing) as client:
        cluster: Any = await client.describe_cluster()
        out: list[Finding] = []
        for broker in sorted(cluster["brokers"], key=lambda b: b["node_id"]):
            node = str(broker["node_id"])
            values = (
                await describe_configs(
                    client, "broker", [node], keys=["unclean.leader.election.enable"]
                )
            ).get(node, {})
            unclean = values.get("unclean.leader.election.enable", "?")
            out.append(
                Finding(
                    subject=f"broker {node}",
                    check="unclean.leader.election.enable",
                    severity="ok" if unclean == "false" else "problem",
                    found=unclean,
                    fix=""
                    if unclean == "false"
                    else "set unclean.leader.election.enable=false in its server.properties: an "
                    "out-of-sync replica elected leader drops acknowledged records",
                )
            )
    return out


async def _acl_findings(admin: KafkaConnection, settings: Settings) -> list[Finding]:
    store = principal_store(settings)
    if store is None or admin.principal is None:
        return [
            Finding(
                subject="principals",
                check="ACLs",
                severity="warning",
                found="rolltape keeps no principals for this cluster: ACLs not checked",
                fix="set ROLLTAPE_PRINCIPALS_FILE to the cluster's principals to check theirs",
            )
        ]
    out: list[Finding] = []
    for principal in store.principals():
        if principal.role == Role.ADMIN:
            continue  # a super user: no ACLs
        wanted = set(role_acls(principal.role, settings.topic_prefix, settings.worker_group))
        missing = sorted(wanted - set(await describe_acls(admin, principal.name)), key=str)
        out.append(
            Finding(
                subject=f"principal {principal.name} ({principal.role.value})",
                check="ACLs",
                severity="problem" if missing else "ok",
                found=f"{len(wanted) - len(missing)} of {len(wanted)} granted"
                + (f"; missing: {', '.join(a.describe() for a in missing[:4])}" if missing else ""),
                fix="`rolltape broker up` as the admin grants them" if missing else "",
            )
        )
    return out


async def _client_findings(admin: KafkaConnection) -> list[Finding]:
    producer = admin.chain_producer()  # built, never started: its settings are read back
    acks = producer._sender._acks
    idempotent = producer._txn_manager is not None
    await producer.stop()
    ok = acks == -1 and idempotent
    return [
        Finding(
            subject="clients",
            check="chain producer",
            severity="ok" if ok else "problem",
            found=f"acks={'all' if acks == -1 else acks}, idempotence "
            f"{'on' if idempotent else 'off'}",
            fix="" if ok else "KafkaConnection.chain_producer must be idempotent with acks=all",
        )
    ]
