"""rolltape.infra.kafka: what the commands read from and write to Kafka.

Bounded scans and live follows of the topics (`readback`), the one scanner of the log into
sessions (`sessions`), and the topics themselves with the configs of docs/contracts.md (`topics`).
Clients, the one chain producer among them, come from `rolltape.schemas.clients.KafkaConnection`,
which also translates the client library's errors.
"""
