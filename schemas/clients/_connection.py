"""How to reach and authenticate to a Kafka cluster, and the one place Kafka clients are built.

Why here: the recorder (producers), the worker (processors), feeds (projections) and the CLI
(infra) all open Kafka clients; a security setting must apply to every one of them at once, so the
connection model and the factory live at the bottom of the dependency order, as `ModelEndpoint`
does for model clients. aiokafka is imported only when a client is built.

Every client takes its connection from here:

    KafkaConnection            bootstrap, security protocol, SASL credentials, TLS files
      .producer(**settings)    AIOKafkaProducer
      .chain_producer(**batching)  the one producer for records that extend a chain
      .consumer(*topics, ...)  AIOKafkaConsumer
      .admin(**settings)       AIOKafkaAdminClient
      .client(**settings)      AIOKafkaClient (a bare metadata client: "does it answer?")
      .faust_credentials()     what faust.App(broker_credentials=...) takes
      .started(client, doing)  async context: the client started, used, stopped, with every
                               client-library error raised meanwhile translated into ours

`started` is the one place call sites get the translation (`kafka_errors`): a command opens its
clients with it and maps nothing itself. The long-running writers that retry or spool rather
than stop (the recorder's sender, the worker's reader, the scheduler) handle the client's errors
where they decide what to do with them.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, SecretStr, model_validator

if TYPE_CHECKING:
    from aiokafka import AIOKafkaClient, AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient

from rolltape.schemas.clients._errors import (
    kafka_errors,
    raised_by_client_library,
    translate_kafka_error,
)

Client = TypeVar("Client")

Producer: TypeAlias = "AIOKafkaProducer"
"""The producer `KafkaConnection.producer` builds, for annotations (no import of the client
library where only its type is named)."""

SecurityProtocol = Literal["PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL"]
SaslMechanism = Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]


class KafkaConnection(BaseModel):
    """One cluster address plus who we are on it. `str()` never shows the password."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap: str
    """host:port[,host:port]"""
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism = "SCRAM-SHA-512"
    username: str | None = None
    """The SASL user: the principal the broker authorises (and the one written into envelopes)."""
    password: SecretStr | None = None
    ssl_cafile: Path | None = None
    """CA bundle that signed the brokers' certificates (default: the system's)."""
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None

    @model_validator(mode="after")
    def _credentials_match_protocol(self) -> KafkaConnection:
        sasl = self.security_protocol.startswith("SASL")
        if sasl and (self.username is None or self.password is None):
            raise ValueError(
                f"security protocol {self.security_protocol} needs a SASL username and password"
            )
        if not sasl and self.username is not None:
            raise ValueError(
                f"a SASL username was given but the security protocol is {self.security_protocol}"
                "; use SASL_PLAINTEXT or SASL_SSL"
            )
        return self

    @classmethod
    def plaintext(cls, bootstrap: str) -> KafkaConnection:
        """An unauthenticated connection (a cluster without security, e.g. a developer's)."""
        return cls(bootstrap=bootstrap)

    @property
    def principal(self) -> str | None:
        """The SASL user, or None when the connection is unauthenticated."""
        return self.username

    def __str__(self) -> str:
        who = f"{self.username}@" if self.username else ""
        return f"{who}{self.bootstrap} ({self.security_protocol})"

    def __repr__(self) -> str:
        return f"KafkaConnection({self})"

    # -- the factory ---------------------------------------------------------------------------
    def client_settings(self) -> dict[str, Any]:
        """The keyword arguments every aiokafka client takes for address and security."""
        settings: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": self.security_protocol,
        }
        if self.security_protocol.startswith("SASL"):
            assert self.password is not None  # checked by the validator
            settings.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.username,
                sasl_plain_password=self.password.get_secret_value(),
            )
        context = self.ssl_context()
        if context is not None:
            settings["ssl_context"] = context
        return settings

    def java_properties(self) -> str:
        """The same address and security as a Java client's properties file: what Kafka's own
        tools take (`kafka-consumer-groups --command-config FILE`, the console consumer's
        `--consumer.config`). It holds the password: write it where only its owner reads."""
        lines = [
            f"bootstrap.servers={self.bootstrap}",
            f"security.protocol={self.security_protocol}",
        ]
        if self.security_protocol.startswith("SASL"):
            assert self.password is not None  # checked by the validator
            module = (
                "org.apache.kafka.common.security.plain.PlainLoginModule"
                if self.sasl_mechanism == "PLAIN"
                else "org.apache.kafka.common.security.scram.ScramLoginModule"
            )
            secret = self.password.get_secret_value().replace("\\", "\\\\").replace('"', '\\"')
            lines += [
                f"sasl.mechanism={self.sasl_mechanism}",
                f'sasl.jaas.config={module} required username="{self.username}" '
                f'password="{secret}";',
            ]
        if self.ssl_cafile is not None:
            lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={self.ssl_cafile}"]
        return "\n".join(lines) + "\n"

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for SSL/SASL_SSL, built from the configured files."""
        if not self.security_protocol.endswith("SSL"):
            return None
        context = ssl.create_default_context(
            cafile=str(self.ssl_cafile) if self.ssl_cafile else None
        )
        if self.ssl_certfile is not None:
            context.load_cert_chain(
                str(self.ssl_certfile), str(self.ssl_keyfile) if self.ssl_keyfile else None
            )
        return context

    def producer(self, **settings: Any) -> AIOKafkaProducer:
        from aiokafka import AIOKafkaProducer

        return AIOKafkaProducer(**{**self.client_settings(), **settings})

    def chain_producer(self, **batching: Any) -> AIOKafkaProducer:
        """The producer of every record that extends a chain (the recorder's sender, the
        worker's outputs, the projector, cron's jobs log, replay and imports): idempotent with
        acks=all, so a retried batch is neither lost nor duplicated out of order, which would
        break the chain. Not started yet (the caller starts and stops it). `batching` tunes
        linger, batch and request sizes, timeouts and the client id; `acks` and
        `enable_idempotence` are what this exists to fix, so passing them is a programming
        error."""
        fixed = {"acks", "enable_idempotence"} & set(batching)
        if fixed:
            raise ValueError(f"a chain producer is always idempotent with acks=all: {fixed}")
        return self.producer(
            **{
                "linger_ms": 5,
                "max_request_size": 4 * 1024 * 1024,
                **batching,
                "enable_idempotence": True,
                "acks": "all",
            }
        )

    def consumer(self, *topics: str, **settings: Any) -> AIOKafkaConsumer:
        from aiokafka import AIOKafkaConsumer

        return AIOKafkaConsumer(*topics, **{**self.client_settings(), **settings})

    def admin(self, **settings: Any) -> AIOKafkaAdminClient:
        from aiokafka.admin import AIOKafkaAdminClient

        return AIOKafkaAdminClient(**{**self.client_settings(), **settings})

    def client(self, **settings: Any) -> AIOKafkaClient:
        from aiokafka import AIOKafkaClient

        return AIOKafkaClient(**{**self.client_settings(), **settings})

    @asynccontextmanager
    async def started(self, client: Client, doing: str) -> AsyncIterator[Client]:
        """`client` (one this factory built) started, handed to the block and stopped.
        Whatever the client library raises while starting it, in the block or while stopping
        it becomes one of our `KafkaClientError` kinds saying that it happened while `doing`
        (e.g. "reading rolltape.events.v1 on ..."); other exceptions pass through unchanged.
        In the block only the client library's own exceptions are translated: a timeout or a
        broken pipe of the caller's own code there is not the broker's doing."""
        started: Any = client
        stop = started.close if hasattr(started, "close") else started.stop
        with kafka_errors(doing):
            try:
                if hasattr(started, "bootstrap"):  # a bare metadata client
                    await started.bootstrap()
                else:
                    await started.start()
            except BaseException:
                # A client that failed to start still holds connections and tasks: stop it,
                # and report why it did not start rather than why stopping it failed too.
                with contextlib.suppress(Exception):
                    await stop()
                raise
        try:
            yield client
        except Exception as exc:
            if not raised_by_client_library(exc):
                raise
            raise translate_kafka_error(exc, doing) from exc
        finally:
            with kafka_errors(doing):
                await stop()

    def faust_credentials(self) -> Any:
        """faust's credentials object for `faust.App(broker_credentials=...)` (None: plaintext)."""
        import faust

        if self.security_protocol.startswith("SASL"):
            assert self.password is not None
            return faust.SASLCredentials(
                username=self.username,
                password=self.password.get_secret_value(),
                mechanism=self.sasl_mechanism,
                ssl_context=self.ssl_context(),
            )
        if self.security_protocol == "SSL":
            return faust.SSLCredentials(self.ssl_context())
        return None

    def faust_broker(self) -> str:
        """The broker URL faust takes: one `kafka://` URL per bootstrap address."""
        return ";".join(f"kafka://{address}" for address in self.bootstrap.split(","))
