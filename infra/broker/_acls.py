"""The trust domains (docs/contracts.md) as Kafka ACLs, and the one request that installs them.

    role        writes                                 reads
    agent       events, blobs (its worlds' contents),  events (to resume a session's chain)
                keys (its sessions' wrapped data keys)
    monitor     metrics                                metrics, rules, verdicts (the harness
                                                       waits for them)
    processor   rules, filtered, deadletter, the       events, metrics, keys, verdicts (the
                worker's internal topics, its group    reviewers' chains), what it writes, its
                                                       internal topics
    judge       verdicts, events (its conversations),  events, metrics, rules, filtered, verdicts,
                keys (its subject conversations' keys) blobs (to restore worlds), keys
    projector   trajectories                           every topic of the prefix
    scheduler   jobs (cron jobs and runs)              jobs, through its consumer group
    reviewer    verdicts (human verdicts, on `@human`      verdicts (a chain's head, to extend it)
                chains of their own)
    trainer     events (its runs' lineage: training    events (a chain's head, to extend it)
                sessions)
    reader      -                                      every topic of the prefix, any group but
                                                       the worker's (which it may describe, with
                                                       the offsets of the worker's topics)
    admin       super user: the only one that may delete records or topics, create topics, ACLs

Nothing grants DELETE or ALTER to anyone but admin. The standard authorizer denies what no ACL
allows (`allow.everyone.if.no.acl.found=false`), so the table lists only what is allowed.

Why a hand-built request: aiokafka carries the CreateAcls/DescribeAcls protocol structures but no
admin method for them; Kafka's own `kafka-acls` tool starts a JVM per principal (seconds each),
while one CreateAcls request installs a whole prefix's table in one round trip.
"""

from __future__ import annotations

import asyncio
import time
from enum import IntEnum
from typing import Any

from aiokafka.protocol.admin import (
    CreateAclsRequest_v1,
    DescribeAclsRequest_v1,
)
from aiokafka.protocol.api import Request
from pydantic import BaseModel, ConfigDict

from rolltape.infra.broker._errors import BrokerError
from rolltape.schemas import TOPIC_SPECS, Role, Stream, topic_name
from rolltape.schemas.clients import KafkaConnection


class ResourceType(IntEnum):
    """Kafka's ACL resource type codes, as the CreateAcls/DescribeAcls wire format carries them
    (aiokafka has no such enum); only the kinds rolltape grants on, and ANY for filters."""

    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4


class PatternType(IntEnum):
    """Kafka's ACL pattern type codes on the wire: LITERAL matches one name, PREFIXED every name
    that starts with it, ANY only in filters."""

    ANY = 1
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    """Kafka's ACL operation codes on the wire; the values must stay Kafka's, the broker reads
    them as they are."""

    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class Permission(IntEnum):
    """Kafka's ACL permission codes on the wire. A DENY wins over any ALLOW, which is how the
    worker's consumer group is kept from readers allowed every other group."""

    ANY = 1
    DENY = 2
    ALLOW = 3


class AclError(BrokerError):
    """The broker refused to install or list ACLs."""


class Acl(BaseModel):
    """One rule: `permission` `operation` on a resource for a principal, from any host."""

    model_config = ConfigDict(frozen=True)

    resource: ResourceType
    name: str
    pattern: PatternType
    operation: Operation
    permission: Permission = Permission.ALLOW

    def describe(self) -> str:
        pattern = "prefixed " if self.pattern == PatternType.PREFIXED else ""
        return (
            f"{self.permission.name.lower()} {self.operation.name.lower()} on "
            f"{self.resource.name.lower()} {pattern}{self.name}"
        )


def _topic(stream: Stream, prefix: str, operation: Operation) -> Acl:
    return Acl(
        resource=ResourceType.TOPIC,
        name=topic_name(stream, prefix),
        pattern=PatternType.LITERAL,
        operation=operation,
    )


_READS: dict[Role, tuple[Stream, ...]] = {
    Role.AGENT: (),
    Role.MONITOR: (Stream.RULES, Stream.VERDICTS),
    # Verdicts too: the worker audits and checkpoints the reviewers' chains on that topic.
    Role.PROCESSOR: (Stream.EVENTS, Stream.METRICS, Stream.KEYS, Stream.VERDICTS),
    Role.JUDGE: (
        Stream.EVENTS,
        Stream.METRICS,
        Stream.RULES,
        Stream.FILTERED,
        Stream.BLOBS,
        Stream.KEYS,
    ),
    Role.SCHEDULER: (),
    Role.REVIEWER: (),
    Role.TRAINER: (),
}


def scheduler_group(prefix: str) -> str:
    """The consumer group through which schedulers share the jobs topic's partitions."""
    return f"{prefix}-scheduler"


def role_acls(role: Role, prefix: str, worker_group: str) -> list[Acl]:
    """What a principal of `role` may do on the topics of `prefix` (admin: nothing, it is a
    super user)."""
    if role == Role.ADMIN:
        return []
    acls = [
        _topic(spec.stream, prefix, Operation.WRITE) for spec in TOPIC_SPECS if role in spec.writers
    ]
    if role in _READS:
        # A writer reads its own domain too: taking over a chain (resume) reads its head. Not
        # blobs nor keys: a recorder never reads them back, and they hold other sessions' files
        # and data keys (an agent writes its sessions' keys but cannot read anyone's).
        written = [
            spec.stream
            for spec in TOPIC_SPECS
            if role in spec.writers and spec.stream not in (Stream.BLOBS, Stream.KEYS)
        ]
        reads = dict.fromkeys([*_READS[role], *written])
        acls += [_topic(stream, prefix, Operation.READ) for stream in reads]
    else:  # projector, reader: everything of the prefix
        acls.append(
            Acl(
                resource=ResourceType.TOPIC,
                name=f"{prefix}.",
                pattern=PatternType.PREFIXED,
                operation=Operation.READ,
            )
        )
        # Trainers and feeds name their own consumer groups; the worker's is not theirs to join.
        acls.append(
            Acl(
                resource=ResourceType.GROUP,
                name="*",
                pattern=PatternType.LITERAL,
                operation=Operation.READ,
            )
        )
        acls.append(
            Acl(
                resource=ResourceType.GROUP,
                name=worker_group,
                pattern=PatternType.LITERAL,
                operation=Operation.READ,
                permission=Permission.DENY,
            )
        )
        # Kafka's tools describe the worker's group (its lag on the raw topics) by listing the
        # offsets of every topic it commits, the worker's internal ones too: to describe them
        # is to see their offsets, not their records.
        acls.append(
            Acl(
                resource=ResourceType.TOPIC,
                name=f"{worker_group}-",
                pattern=PatternType.PREFIXED,
                operation=Operation.DESCRIBE,
            )
        )
    if role == Role.PROCESSOR:
        internal = [Operation.CREATE, Operation.READ, Operation.WRITE, Operation.DESCRIBE_CONFIGS]
        acls += [
            Acl(
                resource=ResourceType.TOPIC,
                name=f"{worker_group}-",
                pattern=PatternType.PREFIXED,
                operation=operation,
            )
            for operation in internal
        ]
        # Its group, and groups it runs beside it (benchmark floors) under the same name.
        acls.append(
            Acl(
                resource=ResourceType.GROUP,
                name=worker_group,
                pattern=PatternType.PREFIXED,
                operation=Operation.READ,
            )
        )
    if role == Role.SCHEDULER:
        # The group that decides which scheduler owns which jobs.
        acls.append(
            Acl(
                resource=ResourceType.GROUP,
                name=scheduler_group(prefix),
                pattern=PatternType.LITERAL,
                operation=Operation.READ,
            )
        )
    return acls


class _CreateAcls(Request[CreateAclsRequest_v1]):  # type: ignore[misc]
    """CreateAcls v1 (prefixed patterns; Kafka 2.0 and later, 4.x included) with any number of
    creations (aiokafka's own request builds exactly one)."""

    API_KEY = 30

    def __init__(self, creations: list[tuple[Any, ...]]) -> None:
        self._creations = creations

    def build(self, request_struct_class: type[CreateAclsRequest_v1]) -> CreateAclsRequest_v1:
        return request_struct_class(self._creations)


class _DescribeAcls(Request[DescribeAclsRequest_v1]):  # type: ignore[misc]
    API_KEY = 29

    def __init__(self, principal: str) -> None:
        self._principal = principal

    def build(self, request_struct_class: type[DescribeAclsRequest_v1]) -> DescribeAclsRequest_v1:
        return request_struct_class(
            ResourceType.ANY,
            None,
            PatternType.ANY,
            self._principal,
            None,
            Operation.ANY,
            Permission.ANY,
        )


async def create_acls(admin_connection: KafkaConnection, grants: dict[str, list[Acl]]) -> int:
    """Install `grants` (principal name -> ACLs) in one request; existing ones stay (creating an
    ACL twice is a no-op). Returns how many were sent."""
    creations = [
        (acl.resource, acl.name, acl.pattern, f"User:{name}", "*", acl.operation, acl.permission)
        for name, acls in sorted(grants.items())
        for acl in acls
    ]
    if not creations:
        return 0
    doing = f"creating {len(creations)} ACLs on {admin_connection}"
    async with admin_connection.started(admin_connection.admin(), doing) as admin:
        response: Any = await admin._send_request(_CreateAcls(creations))
    failures = [
        f"{creation[3]} {creation[1]}: {message or code}"
        for creation, (code, message) in zip(creations, response.creation_responses, strict=True)
        if code != 0
    ]
    if failures:
        raise AclError("the broker refused some ACLs:\n  " + "\n  ".join(failures))
    # The controller commits them; the broker applies them from the metadata log a moment later.
    # Wait until the broker describes them, so a client starting right away is not refused.
    deadline = time.monotonic() + 30
    for name, acls in grants.items():
        while not set(acls) <= set(await describe_acls(admin_connection, name)):
            if time.monotonic() > deadline:
                raise AclError(f"the broker did not apply the ACLs of {name} within 30 s")
            await asyncio.sleep(0.05)
    return len(creations)


async def describe_acls(admin_connection: KafkaConnection, principal: str) -> list[Acl]:
    """The ACLs the broker holds for `principal`."""
    doing = f"listing the ACLs of {principal} on {admin_connection}"
    async with admin_connection.started(admin_connection.admin(), doing) as admin:
        response: Any = await admin._send_request(_DescribeAcls(f"User:{principal}"))
    if response.error_code != 0:
        raise AclError(f"listing ACLs failed: {response.error_message or response.error_code}")
    return sorted(
        (
            Acl(
                resource=ResourceType(resource_type),
                name=name,
                pattern=PatternType(pattern),
                operation=Operation(operation),
                permission=Permission(permission),
            )
            for resource_type, name, pattern, acls in response.resources
            for _principal, _host, operation, permission in acls
        ),
        key=lambda a: (a.resource, a.name, a.operation, a.permission),
    )
