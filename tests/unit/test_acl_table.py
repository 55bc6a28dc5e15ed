"""The trust-domain table (docs/contracts.md) as ACLs: who writes what, and only admin deletes."""

from __future__ import annotations

import pytest

from rolltape.infra.broker import role_acls
from rolltape.infra.broker._acls import Operation, PatternType, Permission, ResourceType
from rolltape.schemas import TOPIC_SPECS, Role, Stream, topic_name
from rolltape.schemas.clients import KafkaConnection


def _writes(role: Role) -> set[str]:
    return {
        a.name
        for a in role_acls(role, "p", "p-worker")
        if a.resource == ResourceType.TOPIC
        and a.operation == Operation.WRITE
        and a.pattern == PatternType.LITERAL
    }


@pytest.mark.parametrize("role", [r for r in Role if r != Role.ADMIN])
def test_role_acls__write_exactly_the_topics_whose_spec_names_the_role(role: Role) -> None:
    expected = {topic_name(s.stream, "p") for s in TOPIC_SPECS if role in s.writers}
    assert _writes(role) == expected


@pytest.mark.parametrize("role", list(Role))
def test_role_acls__never_grant_delete_alter_or_all(role: Role) -> None:
    granted = {a.operation for a in role_acls(role, "p", "p-worker")}
    assert not granted & {Operation.DELETE, Operation.ALTER, Operation.ALL}


def test_role_acls__agent_reads_only_its_own_domain_and_reader_may_not_join_the_worker_group() -> (
    None
):
    reads = [a for a in role_acls(Role.AGENT, "p", "g") if a.operation == Operation.READ]
    assert [(a.resource, a.name) for a in reads] == [(ResourceType.TOPIC, "p.events.v1")]
    denied = [a for a in role_acls(Role.READER, "p", "g") if a.permission == Permission.DENY]
    assert [(a.resource, a.name) for a in denied] == [(ResourceType.GROUP, "g")]


def test_role_acls__the_processor_owns_its_internal_topics_and_group() -> None:
    acls = role_acls(Role.PROCESSOR, "p", "p-worker")
    internal = {
        a.operation for a in acls if a.name == "p-worker-" and a.pattern == PatternType.PREFIXED
    }
    assert internal == {
        Operation.CREATE,
        Operation.READ,
        Operation.WRITE,
        Operation.DESCRIBE_CONFIGS,
    }
    assert topic_name(Stream.VERDICTS, "p") not in _writes(Role.PROCESSOR)


def test_kafka_connection__str_never_shows_the_password_and_sasl_needs_credentials() -> None:
    connection = KafkaConnection(
        bootstrap="h:1", security_protocol="SASL_PLAINTEXT", username="agent", password="s3cret"
    )
    assert "s3cret" not in str(connection) + repr(connection)
    assert connection.client_settings()["sasl_plain_password"] == "s3cret"
    with pytest.raises(ValueError, match="needs a SASL username"):
        KafkaConnection(bootstrap="h:1", security_protocol="SASL_PLAINTEXT")


@pytest.mark.parametrize("role", [r for r in Role if r != Role.ADMIN])
def test_role_acls__only_the_roles_that_read_content_read_the_data_keys(role: Role) -> None:
    keys = topic_name(Stream.KEYS, "p")
    reads = any(
        a.operation == Operation.READ
        and a.resource == ResourceType.TOPIC
        and (a.name == keys or (a.pattern == PatternType.PREFIXED and keys.startswith(a.name)))
        for a in role_acls(role, "p", "p-worker")
    )
    content = {Role.PROCESSOR, Role.JUDGE, Role.PROJECTOR, Role.READER}
    assert reads == (role in content)
