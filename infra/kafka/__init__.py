"""rolltape.infra.kafka: what the commands read from and write to Kafka.

Bounded scans and live follows of the topics (`readback`), the topics themselves with the configs
DESIGN.md asks for (`topics`), and the one producer every command appends to chains with
(`producing`). Clients come from `rolltape.schemas.clients.KafkaConnection`, which translates the
client library's errors.
"""
