"""From settings to a running processor worker: configs loaded, topics ensured, partitions read."""

from __future__ import annotations

import asyncio
import functools
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import orjson
from pydantic import ValidationError

from rolltape.infra._errors import InfraError
from rolltape.infra.broker import (
    current_connection,
    principal_store,
    replication_factor,
    require_connection,
)
from rolltape.infra.commands.rules import rulebook
from rolltape.infra.judging import LogJudges, register_environment_judges
from rolltape.infra.kafka.keyring import KeysFollower, keys_follower_if_any
from rolltape.infra.kafka.readback import partition_counts
from rolltape.infra.kafka.topics import ensure_plain_topics_sync, provision
from rolltape.infra.keys import judge_key, kek_available, kek_path
from rolltape.infra.settings import Settings
from rolltape.processors import ProcessorConfig
from rolltape.processors.audit import CheckpointSigner
from rolltape.processors.filters import FilterConfig
from rolltape.processors.judges import (
    JUDGES,
    TrainingJudgeConfig,
    TrainingJudgeConfigError,
)
from rolltape.processors.rules import RuleBook, RuleSetError
from rolltape.processors.worker import WorkerConfig, run_worker
from rolltape.schemas import (
    HUMAN_CHAIN,
    LIVE_JUDGE_VERSION,
    TOPIC_SPECS,
    Role,
    Stream,
    software_version,
    topic_name,
)
from rolltape.schemas.clients import KafkaConnection, ModelEndpoint
from rolltape.schemas.plugins import PluginError, load_module


class WorkerSetupError(InfraError, ValueError):
    """The worker cannot start as configured; the message says what to change."""


def _filters_from(path: Path) -> FilterConfig:
    try:
        return FilterConfig.model_validate(orjson.loads(path.read_bytes()))
    except OSError as exc:
        raise WorkerSetupError(f"cannot read filter config {path}: {exc.strerror}") from exc
    except (orjson.JSONDecodeError, ValidationError) as exc:
        raise WorkerSetupError(f"filter config {path} is invalid: {exc}") from exc


def check_llm_judges(llm_judges: tuple[str, ...], models: Mapping[str, ModelEndpoint]) -> None:
    """Judges need the openai client and an endpoint for each logical model they name."""
    if not llm_judges:
        return
    if importlib.util.find_spec("openai") is None:
        raise WorkerSetupError("judges need the openai client: pip install 'rolltape[openai]'")
    unbound = sorted({JUDGES[n].model for n in llm_judges} - set(models))
    if unbound:
        raise WorkerSetupError(
            f"no endpoint for the logical model(s) {', '.join(unbound)}; bind them in "
            'ROLLTAPE_MODELS, e.g. {"grader": {"base_url": "http://host:8000/v1", "model": "m"}}'
        )


def load_plugins(modules: tuple[str, ...]) -> None:
    """Import the modules that register custom judges and reward functions (and environments,
    whose judges become selectable too)."""
    for name in modules:
        try:
            load_module(name, "plugin module")
        except PluginError as exc:
            raise WorkerSetupError(f"{exc} (ROLLTAPE_PLUGINS)") from exc
    register_environment_judges()


class JudgingConfigs(NamedTuple):
    """What decides a judge version's outputs besides the code versions."""

    rules: RuleBook
    filters: FilterConfig
    training_judge: TrainingJudgeConfig


def judging_configs(settings: Settings) -> JudgingConfigs:
    """Plugins imported; rule set, filter and training-judge configs read (shared by the
    worker, replay and the importers)."""
    load_plugins(settings.plugins)
    try:
        rules = rulebook(settings)
        training = (
            TrainingJudgeConfig.from_file(settings.training_judge_file)
            if settings.training_judge_file
            else TrainingJudgeConfig()
        )
    except (RuleSetError, TrainingJudgeConfigError) as exc:
        raise WorkerSetupError(str(exc)) from exc
    filters = _filters_from(settings.filters_file) if settings.filters_file else FilterConfig()
    return JudgingConfigs(rules, filters, training)


def processor_config(
    settings: Settings,
    *,
    judge_version: str = LIVE_JUDGE_VERSION,
    signer: CheckpointSigner | None = None,
) -> ProcessorConfig:
    """What the pure step runs, from settings: the one mapping of settings to a processor
    config, shared by the worker (with the judge's signer) and replay (under a judge version,
    never signing)."""
    configs = judging_configs(settings)
    try:
        config = ProcessorConfig(
            rules=configs.rules,
            filters=configs.filters,
            training_judge=configs.training_judge,
            principal=role_principal(settings, Role.PROCESSOR),
            judge_principal=role_principal(settings, Role.JUDGE),
            writers=stream_writers(settings),
            software_version=software_version(),
            rewards=settings.rewards,
            llm_judges=settings.llm_judges,
            judge_version=judge_version,
            signer=signer,
        )
    except ValueError as exc:
        raise WorkerSetupError(
            f"{exc} (ROLLTAPE_REWARDS / ROLLTAPE_LLM_JUDGES / --judge-version)"
        ) from exc
    check_llm_judges(settings.llm_judges, settings.models)
    return config


def role_principal(settings: Settings, role: Role) -> str:
    """The principal named in the envelopes a role writes: the SASL user it authenticates as,
    else (an unsecured cluster) the role's name; the processor's is ROLLTAPE_PRINCIPAL when set."""
    connection = current_connection(settings, role)
    if connection is not None and connection.principal is not None:
        return connection.principal
    if role == Role.PROCESSOR and settings.principal != "anonymous":
        return settings.principal
    return role.value


def stream_writers(settings: Settings) -> dict[str, frozenset[str]]:
    """For each raw stream, the principals rolltape keeps that may write it: those of its topic's
    writer roles, and admins. Empty when rolltape keeps no principals for this cluster."""
    store = principal_store(settings)
    if store is None:
        return {}
    principals = store.principals()
    writers = {
        spec.stream.value: frozenset(
            p.name for p in principals if p.role in spec.writers or p.role == Role.ADMIN
        )
        for spec in TOPIC_SPECS
        if spec.stream in (Stream.EVENTS, Stream.METRICS)
    }
    # The reviewers' chains on the verdicts topic: reviewers (and admins) only, not judges.
    writers[HUMAN_CHAIN] = frozenset(
        p.name for p in principals if p.role in (Role.REVIEWER, Role.ADMIN)
    )
    return writers


def _worker_keys(connection: KafkaConnection, settings: Settings) -> KeysFollower:
    """The keys topic followed by the worker, as its processor (which reads no erasures chain:
    a key's tombstone is what the step honours)."""
    follower = keys_follower_if_any(connection, settings, erasures=False)
    if follower is None:
        raise WorkerSetupError(f"the key-encryption key went away: {kek_path(settings)}")
    return follower


def can_provision(settings: Settings) -> bool:
    """Whether this process may create topics and ACLs: the cluster has no principals rolltape
    keeps (an unsecured cluster), or rolltape keeps them and holds an admin. A process given
    credentials of its own (ROLLTAPE_SASL_USERNAME) never provisions."""
    if settings.sasl_username:
        return False
    store = principal_store(settings)
    return store is None or any(p.role == Role.ADMIN for p in store.principals())


def worker_config(settings: Settings, *, log_level: str = "warning") -> WorkerConfig:
    """Ensure the topics exist and build the worker's config. The raw topics must have the same
    number of partitions: a session's events and metrics must land on the same worker."""
    key = judge_key(settings)
    signer = None
    if key.exists():
        signer = CheckpointSigner(key.private_key(), interval_s=settings.checkpoint_interval_s)
    processor = processor_config(settings, signer=signer)
    connection = require_connection(settings, Role.PROCESSOR)
    judge = require_connection(settings, Role.JUDGE)
    if can_provision(settings):
        provision(settings)
    raw = [topic_name(Stream.EVENTS, settings.topic_prefix)]
    raw.append(topic_name(Stream.METRICS, settings.topic_prefix))
    raw.append(topic_name(Stream.VERDICTS, settings.topic_prefix))  # the reviewers' chains
    counts = asyncio.run(partition_counts(connection, raw))
    if len(counts) < len(raw):
        raise WorkerSetupError(
            f"the topics {', '.join(t for t in raw if t not in counts)} do not exist or are not "
            f"readable by {connection.principal or 'this client'}; create them with "
            "`rolltape broker up` as an admin (it also grants the processor its reads, the "
            "verdicts topic's among them)"
        )
    events, metrics, verdicts = (counts[t] for t in raw)
    if not events == metrics == verdicts:
        raise WorkerSetupError(
            f"the events topic has {events} partitions, the metrics topic {metrics} and the "
            f"verdicts topic {verdicts}; they must match so that a session's streams (and its "
            "reviewers' verdicts) meet on one worker. Recreate the ones that differ."
        )
    config = WorkerConfig(
        connection=connection,
        judge_connection=judge,
        topic_prefix=settings.topic_prefix,
        app_id=settings.worker_id,
        partitions=events,
        replication_factor=replication_factor(settings),
        processor=processor,
        batch_within_s=settings.worker_batch_window_ms / 1000,
        stall_after_s=settings.worker_stall_after_s,
        judges=functools.partial(LogJudges, settings) if settings.llm_judges else None,
        keys=functools.partial(_worker_keys, connection, settings)
        if kek_available(settings)
        else None,
        log_level=log_level,
        data_dir=settings.state_dir / "worker",
    )
    ensure_plain_topics_sync(
        connection,
        [config.assignment_topic, config.judge_requests_topic, config.judge_results_topic],
        partitions=events,
        replication_factor=replication_factor(settings),
    )
    return config


@dataclass(frozen=True)
class CheckpointKey:
    """The judge's key as a worker signs checkpoints with it: where it is kept, and its id when
    the worker has it to sign with (None: no key there, no signed checkpoints)."""

    path: Path
    key_id: str | None


def checkpoint_key(settings: Settings, config: WorkerConfig) -> CheckpointKey:
    """The judge's key `config` signs checkpoints with, for the worker's start-up lines."""
    key = judge_key(settings)
    return CheckpointKey(key.path, key.key_id() if config.processor.signer is not None else None)


def serve_worker(config: WorkerConfig, *, on_stall: Callable[[], object]) -> None:
    """Run the processors of `config` until SIGINT or SIGTERM (blocks; owns the event loop);
    `on_stall` is called when the worker stops making progress."""
    run_worker(config, on_stall=on_stall)
