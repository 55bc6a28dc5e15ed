"""The cluster's administration in rolltape's terms: creating topics and reading or setting
topic and broker configs, over an admin client `KafkaConnection.admin` built.

Provisioning (`infra/kafka/topics.py`) and `rolltape broker check` need these; the client
library's request types (`NewTopic`, `ConfigResource`) and its per-resource error codes stay
here, and a code the broker answers with becomes one of our `KafkaClientError` kinds, as every
other client error does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from rolltape.schemas.clients._errors import translate_kafka_error

Resource = Literal["topic", "broker"]

_ALREADY_EXISTS = 36
"""TOPIC_ALREADY_EXISTS: another provisioner created it first, which is what was wanted."""


def _refusal(code: int, message: str | None, doing: str) -> Exception:
    from aiokafka.errors import for_code

    refused = for_code(code)(message or "")
    error = translate_kafka_error(refused, doing)
    error.__cause__ = refused
    return error


def _resource(kind: Resource, name: str, configs: Mapping[str, Any] | None) -> Any:
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    of = ConfigResourceType.TOPIC if kind == "topic" else ConfigResourceType.BROKER
    return ConfigResource(of, name, dict(configs) if configs is not None else None)


async def create_topics(
    admin: Any,
    names: Sequence[str],
    *,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, Mapping[str, str]] | None = None,
) -> None:
    """Create `names` (each with `configs[name]` when given); a topic that exists already
    counts as created, any other refusal is raised as our kind."""
    from aiokafka.admin import NewTopic

    response = await admin.create_topics(
        [
            NewTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=replication_factor,
                topic_configs=dict((configs or {}).get(name, {})),
            )
            for name in names
        ]
    )
    for name, code, *rest in response.topic_errors:
        if code not in (0, _ALREADY_EXISTS):
            message = " ".join(str(r) for r in rest if r)
            raise _refusal(code, message, f"creating topic {name}")


async def describe_configs(
    admin: Any, kind: Resource, names: Iterable[str], keys: Iterable[str] | None = None
) -> dict[str, dict[str, str]]:
    """name -> config key -> value, of topics or brokers (a broker by its node id); only
    `keys` when given."""
    asked = None if keys is None else dict.fromkeys(keys)
    described = await admin.describe_configs([_resource(kind, n, asked) for n in names])
    return {
        str(name): {entry[0]: entry[1] for entry in entries}
        for response in described
        for *_, name, entries in response.resources
    }


async def alter_topic_configs(admin: Any, configs: Mapping[str, Mapping[str, str]]) -> None:
    """Set each topic's `configs[name]`; a refusal is raised as our kind."""
    altered = await admin.alter_configs(
        [_resource("topic", name, values) for name, values in configs.items()]
    )
    for response in altered:
        for code, message, _rtype, name in response.resources:
            if code != 0:
                raise _refusal(code, message, f"setting the configs of topic {name}")


__all__ = ["Resource", "alter_topic_configs", "create_topics", "describe_configs"]
