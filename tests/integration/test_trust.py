"""Topics are trust domains, enforced by the broker: SASL/SCRAM principals and ACLs."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import RecordsToDelete
from aiokafka.errors import KafkaError
from pydantic import SecretStr

from rolltape.infra.bench._synthetic import synthetic_metric
from rolltape.infra.broker import PrincipalStore, describe_acls
from rolltape.producers import EventsRejectedError, Recorder
from rolltape.schemas import TOPIC_SPECS, Role, Stream, topic_name
from rolltape.schemas.clients import KafkaConnection

from .conftest import Cluster, Topics

pytestmark = pytest.mark.integration
CLI = [sys.executable, "-m", "rolltape.infra"]


async def _write(connection: KafkaConnection, topic: str) -> str | None:
    """None when the broker accepted one record on `topic`, else the error's name."""
    # Not idempotent: the matrix is about topic writes alone (an idempotent producer of a
    # principal that may write nothing is refused a producer id before any topic is named).
    producer = connection.producer(acks="all", request_timeout_ms=10_000)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"probe", key=b"trust-probe")
        return None
    except KafkaError as exc:
        return type(exc).__name__
    finally:
        await producer.stop()


def _cli(*args: str, topics: Topics) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=topics.env(), capture_output=True, text=True, timeout=180
    )


def _managed(cluster: Cluster) -> None:
    if cluster.managed is None:
        pytest.skip("needs rolltape's managed broker (its principals)")


def test_acls__each_principal_writes_only_the_topics_of_its_trust_domain(
    cluster: Cluster, topics: Topics
) -> None:
    _managed(cluster)
    outcomes: dict[tuple[str, str], str | None] = {}

    async def probe() -> None:
        for role in Role:
            connection = topics.connection(role)
            for spec in TOPIC_SPECS:
                topic = topic_name(spec.stream, topics.prefix)
                outcomes[(role.value, spec.stream.value)] = await _write(connection, topic)

    asyncio.run(probe())
    for spec in TOPIC_SPECS:
        for role in Role:
            allowed = role == Role.ADMIN or role in spec.writers
            got = outcomes[(role.value, spec.stream.value)]
            if allowed:
                assert got is None, f"{role.value} could not write {spec.stream.value}: {got}"
            else:
                assert got == "TopicAuthorizationFailedError", (
                    f"{role.value} writing {spec.stream.value}: {got or 'accepted'}"
                )


def test_acls__reading_is_limited_to_what_a_role_needs(cluster: Cluster, topics: Topics) -> None:
    _managed(cluster)

    async def can_read(role: Role, stream: Stream) -> bool:
        """Whether `role` gets the probe record written to partition 0 of `stream`'s topic
        (aiokafka does not raise on an unauthorised fetch: it gets nothing)."""
        consumer = topics.connection(role).consumer(enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic_name(stream, topics.prefix), 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            batch = await consumer.getmany(tp, timeout_ms=4000)
            return any(m.value == b"probe" for m in batch.get(tp, []))
        except KafkaError:
            return False
        finally:
            await consumer.stop()

    async def matrix() -> dict[tuple[Role, Stream], bool]:
        admin = topics.connection(Role.ADMIN).producer(acks="all")
        await admin.start()
        try:
            for stream in (Stream.EVENTS, Stream.METRICS, Stream.RULES, Stream.VERDICTS):
                await admin.send_and_wait(topic_name(stream, topics.prefix), b"probe", partition=0)
        finally:
            await admin.stop()
        cases = [
            (Role.READER, Stream.EVENTS),
            (Role.READER, Stream.VERDICTS),
            (Role.PROCESSOR, Stream.METRICS),
            (Role.MONITOR, Stream.RULES),
            (Role.AGENT, Stream.EVENTS),
            (Role.AGENT, Stream.METRICS),
            (Role.AGENT, Stream.VERDICTS),
            (Role.MONITOR, Stream.EVENTS),
            (Role.REVIEWER, Stream.EVENTS),
            (Role.REVIEWER, Stream.VERDICTS),
        ]
        return {case: await can_read(*case) for case in cases}

    got = asyncio.run(matrix())
    assert got == {
        (Role.READER, Stream.EVENTS): True,
        (Role.READER, Stream.VERDICTS): True,
        (Role.PROCESSOR, Stream.METRICS): True,
        (Role.MONITOR, Stream.RULES): True,
        (Role.AGENT, Stream.EVENTS): True,
        (Role.AGENT, Stream.METRICS): False,
        (Role.AGENT, Stream.VERDICTS): False,
        (Role.MONITOR, Stream.EVENTS): False,
        (Role.REVIEWER, Stream.EVENTS): False,
        (Role.REVIEWER, Stream.VERDICTS): True,
    }


def test_authentication__unauthenticated_and_wrong_password_clients_are_refused(
    cluster: Cluster, topics: Topics
) -> None:
    _managed(cluster)
    agent = topics.connection(Role.AGENT)
    wrong = agent.model_copy(update={"password": SecretStr("not-the-password")})
    anonymous = KafkaConnection.plaintext(agent.bootstrap)

    async def refused(connection: KafkaConnection) -> bool:
        producer = connection.producer(request_timeout_ms=5000, metadata_max_age_ms=5000)
        try:
            await asyncio.wait_for(producer.start(), 20)
        except (KafkaError, TimeoutError, OSError):
            return True
        finally:
            await producer.stop()
        try:
            await asyncio.wait_for(
                producer.send_and_wait(topic_name(Stream.EVENTS, topics.prefix), b"x"), 20
            )
        except (KafkaError, TimeoutError, OSError):
            return True
        return False

    assert asyncio.run(refused(wrong))
    assert asyncio.run(refused(anonymous))
    assert asyncio.run(_write(agent, topic_name(Stream.EVENTS, topics.prefix))) is None


def test_acls__only_the_admin_deletes_records_or_topics(cluster: Cluster, topics: Topics) -> None:
    _managed(cluster)
    topic = topic_name(Stream.EVENTS, topics.prefix)
    tp = TopicPartition(topic, 0)

    async def write_one() -> None:
        producer = topics.connection(Role.ADMIN).producer(acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"keep me", partition=0)
        finally:
            await producer.stop()

    async def delete_records(role: Role) -> str | None:
        """None when the broker deleted, else the refusal's name."""
        admin = topics.connection(role).admin()
        await admin.start()
        try:
            await admin.delete_records({tp: RecordsToDelete(before_offset=1)})
            return None
        except KafkaError as exc:
            return type(exc).__name__
        finally:
            await admin.close()

    async def first_offset() -> int:
        consumer = topics.connection(Role.ADMIN).consumer(enable_auto_commit=False)
        await consumer.start()
        try:
            return int((await consumer.beginning_offsets([tp]))[tp])
        finally:
            await consumer.stop()

    async def delete_topic(role: Role) -> int:
        admin = topics.connection(role).admin()
        await admin.start()
        try:
            response: Any = await admin.delete_topics([topic])
            return int(response.topic_error_codes[0][1])
        finally:
            await admin.close()

    asyncio.run(write_one())
    for role in (Role.AGENT, Role.PROCESSOR, Role.READER, Role.PROJECTOR):
        assert asyncio.run(delete_records(role)) == "TopicAuthorizationFailedError", role
        assert asyncio.run(first_offset()) == 0, f"{role.value} deleted records"
        assert asyncio.run(delete_topic(role)) == 29, role  # TOPIC_AUTHORIZATION_FAILED
    assert asyncio.run(delete_records(Role.ADMIN)) is None
    assert asyncio.run(first_offset()) == 1


def test_principals__secrets_are_owner_only_and_printed_only_when_asked(
    cluster: Cluster, topics: Topics
) -> None:
    _managed(cluster)
    assert cluster.managed is not None
    store = cluster.managed.principals
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    server_props = cluster.managed.home / "server.properties"
    assert stat.S_IMODE(os.stat(server_props).st_mode) == 0o600
    listed = _cli("principal", "list", topics=topics)
    assert listed.returncode == 0, listed.stderr
    secrets = [p.password.get_secret_value() for p in store.principals()]
    assert all(secret not in listed.stdout + listed.stderr for secret in secrets)
    for role in Role:
        assert role.value in listed.stdout
    shown = _cli("principal", "show", "agent", "--format", "env", topics=topics)
    assert shown.returncode == 0, shown.stderr
    assert f"ROLLTAPE_SASL_PASSWORD={store.get('agent').password.get_secret_value()}" in (
        shown.stdout
    )


def test_principal_add__a_second_agent_gets_the_agent_acls_on_every_provisioned_prefix(
    cluster: Cluster, topics: Topics
) -> None:
    _managed(cluster)
    assert cluster.managed is not None
    name = f"agent-{topics.prefix}"
    added = _cli("principal", "add", name, "--role", "agent", topics=topics)
    assert added.returncode == 0, added.stdout + added.stderr
    principal = PrincipalStore(cluster.managed.principals.path).get(name)
    connection = topics.connection(Role.AGENT).model_copy(
        update={"username": name, "password": principal.password}
    )
    assert asyncio.run(_write(connection, topic_name(Stream.EVENTS, topics.prefix))) is None
    refused = asyncio.run(_write(connection, topic_name(Stream.METRICS, topics.prefix)))
    assert refused == "TopicAuthorizationFailedError"
    acls = asyncio.run(describe_acls(topics.connection(Role.ADMIN), name))
    assert any(a.name == topic_name(Stream.EVENTS, topics.prefix) for a in acls)
    again = _cli("principal", "add", name, "--role", "agent", topics=topics)
    assert again.returncode == 2 and "exists already" in again.stderr


def test_recorder__a_stream_its_principal_may_not_write_is_rejected_with_why_not_spooled(
    cluster: Cluster, topics: Topics, tmp_path: Path
) -> None:
    _managed(cluster)
    recorder = Recorder(
        topics.connection(Role.AGENT), topic_prefix=topics.prefix, spool_dir=tmp_path / "spool"
    )
    session = recorder.session("fit", session_id="agent-claims-metrics", kind="training")
    synthetic_metric(recorder, session, 0, steps=1, train_loss=1.0)
    with pytest.raises(EventsRejectedError) as raised:
        recorder.close(timeout_s=60)
    assert "TopicAuthorizationFailed" in str(raised.value)
    assert "agent" in str(raised.value) and "metrics" in str(raised.value)
    (report,) = topics.verify("agent-claims-metrics").reports()
    assert report.stream == "events" and report.ok
