"""rolltape.schemas.clients: how rolltape talks to Kafka and to model servers.

One connection model and one factory for every Kafka client (`KafkaConnection`), the one
translation of the client library's errors into ours (`kafka_errors`, under its own root
`KafkaClientError`), one member of a consumer group (`GroupMember`: the one way processes share
partitions), one reader of partitions outside any group (`LogReader`: the one way a topic is
read back), the cluster's administration (topics and configs), the packing of records into batches by
partition, and the binding of a
logical model name to an OpenAI-compatible endpoint. It sits below producers, processors and
projections so that a security setting applies to all of them at once, and apart from
`rolltape.schemas` so that reading the wire format never imports a client library.
"""

from rolltape.schemas.clients._admin import (
    Resource,
    alter_topic_configs,
    create_topics,
    describe_configs,
)
from rolltape.schemas.clients._batches import KeyPartitions, fill_batch, key_partition
from rolltape.schemas.clients._connection import (
    KafkaConnection,
    Producer,
    SaslMechanism,
    SecurityProtocol,
)
from rolltape.schemas.clients._endpoints import ModelEndpoint
from rolltape.schemas.clients._errors import (
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaClientError,
    KafkaRecordError,
    KafkaRequestError,
    KafkaTopicError,
    KafkaUnavailableError,
    kafka_errors,
    not_authorized,
    translate_kafka_error,
)
from rolltape.schemas.clients._group import (
    Fetched,
    GroupMember,
    GroupNotStartedError,
    Ownership,
    Partition,
    group_members,
)
from rolltape.schemas.clients._log_reader import (
    LogReader,
    LogStalledError,
    ReaderNotStartedError,
    partitions_of,
)

__all__ = [
    "Fetched",
    "GroupMember",
    "GroupNotStartedError",
    "KafkaAuthenticationError",
    "KafkaAuthorizationError",
    "KafkaClientError",
    "KafkaConnection",
    "KafkaRecordError",
    "KafkaRequestError",
    "KafkaTopicError",
    "KafkaUnavailableError",
    "KeyPartitions",
    "LogReader",
    "LogStalledError",
    "ModelEndpoint",
    "Ownership",
    "Partition",
    "Producer",
    "ReaderNotStartedError",
    "Resource",
    "SaslMechanism",
    "SecurityProtocol",
    "alter_topic_configs",
    "create_topics",
    "describe_configs",
    "fill_batch",
    "group_members",
    "kafka_errors",
    "key_partition",
    "not_authorized",
    "partitions_of",
    "translate_kafka_error",
]
