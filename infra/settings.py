"""Settings: every knob in one typed model, read from ROLLTAPE_* environment variables.

Why one model: the CLI, the SDK, the broker provisioning and the tests must agree on the bootstrap
address, topic prefix and cache folders; reading them in one place keeps them from drifting.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from rolltape.processors.audit import CHECKPOINT_INTERVAL_S
from rolltape.producers import SPOOL_MAX_BYTES, WorldLimits, default_state_dir, spool_dir_in
from rolltape.schemas import DEFAULT_PARTITIONS, DEFAULT_PREFIX
from rolltape.schemas.clients import ModelEndpoint, SaslMechanism, SecurityProtocol


def _xdg(var: str, fallback: str) -> Path:
    base = os.environ.get(var)
    return Path(base) if base else Path.home() / fallback


INDEX_BATCH_RECORDS = 5000
"""Records an indexer folds and commits in one transaction, at most (the default of
`index_batch_records`)."""


class Settings(BaseSettings):
    """rolltape's configuration; each field reads `ROLLTAPE_<FIELD>` from the environment."""

    model_config = SettingsConfigDict(env_prefix="ROLLTAPE_", extra="ignore")

    bootstrap: str | None = None
    """An existing Kafka cluster (host:port[,host:port]); when unset rolltape runs its own broker."""
    security_protocol: SecurityProtocol | None = None
    """PLAINTEXT, SASL_PLAINTEXT, SASL_SSL or SSL; default: SASL_PLAINTEXT when credentials are
    known (the managed broker always has them), else PLAINTEXT (SASL_SSL/SSL with a CA file)."""
    sasl_mechanism: SaslMechanism = "SCRAM-SHA-512"
    sasl_username: str | None = None
    """Authenticate as this principal, whatever the command's role (an external cluster's operator
    hands each process its own credentials)."""
    sasl_password: SecretStr | None = None
    """The password of `sasl_username` (default: looked up in the principals file)."""
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    principals_file: Path | None = None
    """Credentials per role (0600, written by `broker up` and `principal add`); each command
    authenticates as the principal of its role (agent, monitor, processor, judge, projector,
    reader, admin). Default: the managed broker's, in state_dir/broker/principals.json."""
    judge_key_file: Path | None = None
    """The judge's Ed25519 private key (PEM, 0600) that signs checkpoints, created by `broker
    up` or `rolltape keys init`. Default: state_dir/keys/judge.ed25519.pem."""
    checkpoint_interval_s: float = Field(default=CHECKPOINT_INTERVAL_S, gt=0)
    """How often the worker commits the heads of sessions still running (ended ones: at once)."""
    topic_prefix: str = DEFAULT_PREFIX
    partitions: int = Field(default=DEFAULT_PARTITIONS, ge=1)
    """Partitions per topic when `broker up` creates topics; sessions spread across them by key."""
    replication_factor: int = Field(default=1, ge=1)
    """Copies of each partition when topics are created. Left unset, a managed cluster's own
    (three from three nodes on: `rolltape.infra.broker.replication_factor`)."""
    broker_nodes: int = Field(default=1, ge=1, le=9)
    """Nodes of the managed cluster when `broker up` first makes it (`--nodes`); a cluster keeps
    the count it was made with."""

    kafka_version: str = "3.9.1"
    """Apache Kafka release fetched from Maven Central for the managed broker."""
    scala_version: str = "2.13"
    broker_heap: str = "512m"
    cache_dir: Path = Field(default_factory=lambda: _xdg("XDG_CACHE_HOME", ".cache") / "rolltape")
    """Where Maven-fetched broker jars are kept between runs."""
    state_dir: Path = Field(default_factory=default_state_dir)
    """Where the managed broker keeps its data, logs and pid file."""

    principal: str = "anonymous"
    """The principal written into every envelope's producer field (the SASL user when set)."""
    monitor_principal: str = "monitor"
    """The principal the training monitor records under (its own recorder, apart from the
    agent's)."""
    spool_dir: Path | None = None
    """Where the SDK spills events while the broker is unreachable (default: state_dir/spool)."""
    spool_max_bytes: int = Field(default=SPOOL_MAX_BYTES, ge=1024)
    kek_file: Path | None = None
    """The key-encryption key (32 bytes, 0600) that wraps the data keys of sessions that name a
    subject; created on first use. Default: state_dir/keys/kek.bin."""
    kek_provider: str | None = None
    """`package.module:function` returning the key-encryption key (32 bytes) from where it is
    kept (a key management service), instead of `kek_file`. Default: none."""
    redaction_policy: Path | None = None
    """A TOML file of redaction rules the recorders built from settings apply to every event
    before it leaves the process (docs/privacy.md). Default: none."""
    redaction_secret_file: Path | None = None
    """The project's secret that keys the policy's hashes (0600; created on first use). Share
    it between machines whose hashes must agree. Default: state_dir/keys/redaction.secret."""
    senders: int = Field(default=1, ge=1, le=64)
    """Sender processes of a recorder (`Recorder(senders=N)`): 1 seals and sends on a thread of
    the agent's process; N > 1 shards sessions over N processes, for more events/s than one
    core seals (about 50,000 of ~1 KB), at the cost of ~0.5 s to start them."""

    world_max_file_bytes: int = Field(default=WorldLimits().max_file_bytes, ge=0)
    """A rollout's world (its workdir, recorded before any judge reads it) keeps the contents of
    files up to this size; larger ones are recorded by size and sha256, and judges are told
    they are absent."""
    world_max_total_bytes: int = Field(default=WorldLimits().max_total_bytes, ge=0)
    """The contents a world keeps in all (the smallest files first; the rest by hash only)."""

    tools_unsandboxed: bool = False
    """The explicit opt-out of the sandbox: shell tools of agents and judges run as plain
    processes where bubblewrap cannot run. Without it such a tool refuses with the reason."""

    rules_file: Path | None = None
    """One rule set (a JSON file, or a shipped set's name: `reference-monitor`,
    `digits-cnn-calibrated`) for every task the worker judges. Unset: the rule book, where each
    task family has its own (the reference task its calibrated set, others the reference
    monitor's, plus `rules_by_task`)."""
    rules_by_task: dict[str, Path] = Field(default_factory=dict)
    """Task family -> rule set (file or shipped name) added to the rule book, as JSON:
    '{"my-task": "my-task-rules.json"}' judges sessions of `my-task` and `my-task/...`."""
    filters_file: Path | None = None
    """A JSON reward-filter config for the worker."""
    training_judge_file: Path | None = None
    """A JSON training-judge config (the live check's tolerance) for the worker."""
    worker_id: str | None = None
    """The worker's consumer group (default `<topic_prefix>-worker`). Run one group per topic
    prefix: it is the only writer of the output chains."""
    worker_batch_window_ms: int = Field(default=20, ge=1, le=1000)
    """How long the worker lets a batch fill before processing it: larger batches raise
    throughput (one acknowledgement wait per batch), smaller ones cut the firing latency."""
    worker_stall_after_s: float = Field(default=30.0, gt=0)
    """A worker with records waiting on its partitions that processed nothing for this long
    restarts itself in place (faust can stop fetching after a rebalance)."""
    index_url: str | None = None
    """Where the read model is kept: `sqlite:PATH` (one file; the default,
    state_dir/index/<topic_prefix>.sqlite3) or `postgresql://user@host/db` for many hosts and
    many readers (docs/read-model.md)."""
    index_group: str | None = None
    """The indexers' consumer group (default `<topic_prefix>-index`): indexers in one group
    share the partitions and write one store."""
    index_batch_records: int = Field(default=INDEX_BATCH_RECORDS, ge=1, le=100_000)
    """Records an indexer folds and commits in one transaction, at most."""

    plugins: tuple[str, ...] = ()
    """Python modules the worker imports first, as a JSON list: they register custom LLM judges
    and reward functions (`register_llm_judge`, `register_reward`)."""
    rewards: tuple[str, ...] = ()
    """Reward functions the worker runs on finished agent sessions, as a JSON list:
    '["task_pass", "final_reward"]'."""
    llm_judges: tuple[str, ...] = ()
    """LLM judges the worker runs on finished agent sessions, as a JSON list: '["answer_quality"]'."""
    models: dict[str, ModelEndpoint] = Field(default_factory=dict)
    """Logical model names bound to OpenAI-compatible endpoints, as JSON:
    '{"grader": {"base_url": "http://host:8000/v1", "model": "qwen2.5-7b"}}'; `"family":
    "qwen3_coder"` for a server that returns tool calls as text."""

    @field_validator("models")
    @classmethod
    def _known_families(cls, models: dict[str, ModelEndpoint]) -> dict[str, ModelEndpoint]:
        """A misspelt family fails here, when the settings are read, not mid-run."""
        from rolltape.producers.parsing import UnknownFamilyError, check_family

        for name, endpoint in models.items():
            try:
                if endpoint.family is not None:
                    check_family(endpoint.family)
            except UnknownFamilyError as exc:
                raise ValueError(f"model {name!r}: {exc}") from None
        return models

    @property
    def world_limits(self) -> WorldLimits:
        return WorldLimits(
            max_file_bytes=self.world_max_file_bytes, max_total_bytes=self.world_max_total_bytes
        )

    @property
    def index_group_id(self) -> str:
        return self.index_group or f"{self.topic_prefix}-index"

    @property
    def worker_group(self) -> str:
        """The worker's consumer group; its internal topics start with `<group>-`."""
        return self.worker_id or f"{self.topic_prefix}-worker"

    def child_env(self) -> dict[str, str]:
        """ROLLTAPE_* variables that give a child process (a worker, a benchmark's recorder) the
        same cluster, credentials and topics as these settings."""
        fields = (
            "bootstrap",
            "security_protocol",
            "sasl_mechanism",
            "sasl_username",
            "sasl_password",
            "ssl_cafile",
            "ssl_certfile",
            "ssl_keyfile",
            "principals_file",
            "judge_key_file",
            "kek_file",
            "kek_provider",
            "redaction_policy",
            "redaction_secret_file",
            "topic_prefix",
            "state_dir",
            "cache_dir",
            "kafka_version",
            "index_url",
        )
        env = {}
        for name in fields:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            env[f"ROLLTAPE_{name.upper()}"] = str(value)
        return env

    def resolved_spool_dir(self) -> Path:
        """ROLLTAPE_SPOOL_DIR, else the spool folder of the state folder (the recorder's own
        default when the state folder is the default one)."""
        return self.spool_dir if self.spool_dir is not None else spool_dir_in(self.state_dir)
