"""The layout is the architecture: dependencies point one way and public APIs are curated."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import rolltape.infra
import rolltape.processors
import rolltape.producers
import rolltape.producers.capture
import rolltape.producers.cron
import rolltape.producers.environments
import rolltape.producers.parsing
import rolltape.producers.privacy
import rolltape.producers.training
import rolltape.projections
import rolltape.schemas
import rolltape.schemas.clients
import rolltape.schemas.plugins
import rolltape.schemas.privacy
import rolltape.schemas.trust
from rolltape.schemas import RolltapeError

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {
    "schemas": set(),
    "producers": {"schemas"},
    "processors": {"schemas"},
    "projections": {"schemas", "processors"},
    "infra": {"schemas", "producers", "processors", "projections"},
}


def imported_packages(folder: str) -> set[str]:
    found = set()
    for path in (ROOT / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if isinstance(node, ast.Call):  # `-m rolltape.infra`, import_module("rolltape.x")
                names += [
                    c.value
                    for arg in node.args
                    for c in ast.walk(arg)
                    if isinstance(c, ast.Constant)
                    and isinstance(c.value, str)
                    and c.value.startswith("rolltape.")
                ]
            for name in names:
                parts = name.split(".")
                in_ours = len(parts) > 1 and parts[1] in ALLOWED
                if parts[0] == "rolltape" and in_ours and parts[1] != folder:
                    found.add(parts[1])
                if parts[0] in ALLOWED and parts[0] != "rolltape":
                    found.add(f"bare:{parts[0]}")
    return found


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_layering__each_package_imports_only_the_packages_below_it(folder: str) -> None:
    """Imports, and module names passed to calls (a process started with `-m rolltape.x`)."""
    assert imported_packages(folder) <= ALLOWED[folder]


def test_public_api__is_pinned() -> None:
    assert set(rolltape.producers.__all__) == {
        "BacklogFullError",
        "ChainConflictError",
        "ResumeError",
        "EventsRejectedError",
        "FlushResult",
        "FlushTimeoutError",
        "HarnessError",
        "HeadInLog",
        "HeadLocator",
        "LogFollower",
        "MonitorError",
        "ProducerError",
        "PromptLoopError",
        "Recorder",
        "RecorderClosedError",
        "RecorderError",
        "RejectedEvent",
        "SPOOL_MAX_BYTES",
        "SandboxError",
        "SenderDiedError",
        "Session",
        "SpoolFullError",
        "ToolRun",
        "WorldError",
        "WorldLimits",
        "__version__",
        "current_session",
        "default_state_dir",
        "first_record_from",
        "fresh_interpreter",
        "keep_client_logs_in",
        "read_head",
        "record_tool",
        "reset_world",
        "restore_snapshot",
        "rules_and_verdicts_follower",
        "spool_dir_in",
        "take_snapshot",
    }
    assert set(rolltape.infra.__all__) == {
        "InfraError",
        "Settings",
        "open_monitor_recorder",
        "open_recorder",
    }
    assert set(rolltape.producers.training.__all__) == {
        "BASE_POLICY_PROMPT",
        "DEFAULT_SUITE",
        "PLAYBOOK",
        "POLICY_PROMPT_TARGET",
        "SCENARIOS",
        "ArchitectureSpec",
        "AttemptResult",
        "AttemptStart",
        "DecisionContext",
        "DigitsData",
        "DigitsNet",
        "Harness",
        "HarnessConfig",
        "HarnessTester",
        "LLMPolicy",
        "LogFollower",
        "MonitorConfig",
        "Policy",
        "PolicyDecision",
        "Scenario",
        "ScriptedPolicy",
        "SelfRefineResult",
        "TrainingMonitor",
        "TrainingRun",
        "apply",
        "build_model",
        "carry_weights",
        "feedback_text",
        "max_policy_calls",
        "rules_and_verdicts_follower",
        "start_run",
        "violation_line",
    }
    assert rolltape.producers.capture.__all__ == ["capture"]
    assert {"CronJobs", "JobSpec", "Scheduler", "CronRunContext", "RunOutcome"} <= set(
        rolltape.producers.cron.__all__
    )
    assert {"Environment", "Item", "RewardResult", "evaluate", "run_rollout"} <= set(
        rolltape.producers.environments.__all__
    )
    assert set(rolltape.producers.parsing.__all__) == {
        "ALIASES",
        "FAMILIES",
        "ParsedCompletion",
        "UnknownFamilyError",
        "check_family",
        "declared_tools",
        "parse",
        "split_reasoning",
        "structured_calls",
    }
    assert set(rolltape.processors.__all__) == {
        "JUDGE_RESULTS",
        "Conflict",
        "Replayer",
        "ReplayedSession",
        "ReplayRecord",
        "ReplayResult",
        "WritePlan",
        "plan_writes",
        "replay",
        "replay_order",
        "DeadLetter",
        "Emitted",
        "JudgeRequest",
        "JudgeResult",
        "Output",
        "ProcessorConfig",
        "ProcessorError",
        "Refused",
        "Requested",
        "SessionProcessor",
        "SessionState",
        "StepOutput",
        "handle",
    }
    for name in rolltape.schemas.__all__:
        assert getattr(rolltape.schemas, name) is not None
    assert sorted(rolltape.schemas.__all__) == [
        "AgentSpec",
        "BLOB_CHUNK_BYTES",
        "BlobAssembler",
        "BlobChunk",
        "BlobError",
        "BreakKind",
        "CHAINED_STREAMS",
        "CONTENT_FIELDS",
        "CONTENT_MISSING",
        "CanonicalEncodingError",
        "CaseScoring",
        "ChainBreak",
        "ChainBroken",
        "ChainBrokenEvent",
        "ChainHeadLeaf",
        "ChainReport",
        "ChainVerifier",
        "ChainWriter",
        "Checkpoint",
        "CheckpointEvent",
        "CronJob",
        "CronJobEvent",
        "CronRun",
        "CronRunEvent",
        "DEFAULT_PARTITIONS",
        "DEFAULT_PREFIX",
        "DERIVED_STREAMS",
        "DataKeyRecord",
        "Decision",
        "DecisionEvent",
        "Detection",
        "ERASURES_SESSION",
        "EVENT_CLASSES",
        "EditOp",
        "EditTarget",
        "Envelope",
        "EnvelopeError",
        "Erasure",
        "ErasureEvent",
        "EvaluatedItem",
        "Evaluation",
        "EvaluationEvent",
        "Event",
        "EventType",
        "FINAL_STATUSES",
        "Feedback",
        "FeedbackEvent",
        "FilterOutcome",
        "FilterOutcomeEvent",
        "FilterReason",
        "GENESIS_HASH",
        "Goal",
        "HUMAN_CHAIN",
        "HUMAN_JUDGE_VERSION",
        "Harness",
        "HumanPreference",
        "HumanPreferenceEvent",
        "HumanVerdict",
        "HumanVerdictEvent",
        "INPUT_CHUNK",
        "INT_MAX",
        "INT_MIN",
        "JOB_ID_PATTERN",
        "JUDGE_NAME_PATTERN",
        "JUDGE_VERSION_PATTERN",
        "JobAction",
        "JobDefinition",
        "JobState",
        "JudgeBudget",
        "JudgeSpec",
        "LINEAGE_TAG",
        "LIVE_JUDGE_VERSION",
        "LayerSpec",
        "LinkVerdict",
        "LiveCheck",
        "LiveCheckEvent",
        "Metric",
        "MetricEvent",
        "ModelCheckpoint",
        "ModelCheckpointEvent",
        "ModelError",
        "ModelErrorEvent",
        "ModelSpec",
        "ModelSpecEvent",
        "PAYLOAD_MODELS",
        "POLICY_MODEL",
        "POLICY_PROMPT_TARGET",
        "PRECEDENCE",
        "PROMPT_TARGET_PATTERN",
        "PairedResult",
        "PayloadError",
        "Placement",
        "Producer",
        "ProducerInfo",
        "PromotionFigures",
        "PromotionRule",
        "PromptDecision",
        "PromptDecisionEvent",
        "PromptPromotion",
        "PromptPromotionEvent",
        "PromptReview",
        "PromptVersion",
        "PromptVersionEvent",
        "REFERENCE_TASK",
        "REVIEW_LABEL_PATTERN",
        "RULE_CLASS",
        "RUN_ID_PATTERN",
        "RecordTooLargeError",
        "RemedyDirection",
        "RemedyParams",
        "RetryPolicy",
        "ReviewQueue",
        "Reward",
        "RewardEvent",
        "Role",
        "RolltapeError",
        "RuleClass",
        "RuleEvaluation",
        "RuleEvaluationEvent",
        "RuleFigures",
        "RuleId",
        "RuleOutcome",
        "RuleSetFigures",
        "RulesetEvaluation",
        "RulesetEvaluationEvent",
        "RunStatus",
        "SCHEMA_VERSION",
        "SESSION_ID_PATTERN",
        "STREAM_EVENT_TYPES",
        "SchemaError",
        "SessionEnded",
        "SessionEndedEvent",
        "SessionResumed",
        "SessionResumedEvent",
        "SessionStarted",
        "SessionStartedEvent",
        "Stream",
        "TOPIC_SPECS",
        "ToolCall",
        "ToolCallEvent",
        "ToolParseError",
        "ToolParseErrorEvent",
        "ToolResult",
        "ToolResultEvent",
        "ToolSpec",
        "TopicSpec",
        "TrainedSample",
        "TrainerLog",
        "TrainerLogEvent",
        "TrainingInput",
        "TrainingInputEvent",
        "TreeHead",
        "Turn",
        "TurnEvent",
        "TypedEvent",
        "UnknownEvent",
        "UnreadableRecord",
        "VERDICT_FILE",
        "Verdict",
        "VerdictError",
        "VerdictEvent",
        "VerdictSource",
        "Violation",
        "WorldEntry",
        "WorldSnapshot",
        "WorldSnapshotEvent",
        "blob_records",
        "canonical_bytes",
        "canonical_dump_bytes",
        "classify_link",
        "codec_implementation",
        "decode",
        "derived_event_id",
        "export_json_schemas",
        "hash_of",
        "json_schemas",
        "parse_payload",
        "parse_verdict",
        "prompt_digest",
        "raw_event_id",
        "read_blob_record",
        "read_event",
        "reread_event",
        "restore_non_finite",
        "result_failed",
        "seal",
        "session_binding",
        "software_version",
        "split_reasoning",
        "split_stream",
        "stream_of_topic",
        "topic_name",
        "versioned_stream",
        "world_digest",
    ]
    assert sorted(rolltape.schemas.clients.__all__) == sorted(
        [
            "KafkaConnection",
            "SaslMechanism",
            "SecurityProtocol",
            "KafkaAuthenticationError",
            "KafkaAuthorizationError",
            "KafkaClientError",
            "KafkaRecordError",
            "KafkaRequestError",
            "KafkaTopicError",
            "KafkaUnavailableError",
            "kafka_errors",
            "not_authorized",
            "translate_kafka_error",
            "KeyPartitions",
            "fill_batch",
            "key_partition",
            "ModelEndpoint",
            "Producer",
            "Fetched",
            "GroupMember",
            "GroupNotStartedError",
            "Ownership",
            "Partition",
            "group_members",
            "LogReader",
            "LogStalledError",
            "ReaderNotStartedError",
            "partitions_of",
            "Resource",
            "alter_topic_configs",
            "create_topics",
            "describe_configs",
        ]
    )
    assert sorted(rolltape.schemas.plugins.__all__) == [
        "DuplicatePluginError",
        "PluginError",
        "PluginLoadError",
        "Registry",
        "UnknownPluginError",
        "load_module",
        "load_object",
    ]
    assert sorted(rolltape.schemas.trust.__all__) == sorted(
        [
            "LogTree",
            "consistency_from_frontier",
            "erasure_signed_by",
            "key_id",
            "load_private_key",
            "load_public_key",
            "sign_erasure",
            "sign_tree_head",
            "tree_head_signed_by",
            "Frontier",
        ]
    )
    assert sorted(rolltape.schemas.privacy.__all__) == sorted(
        [
            "Access",
            "ContentKey",
            "Keyring",
            "KeyEncryptionKey",
            "SealedContentError",
            "associated_data",
            "open_content",
            "open_value",
            "seal_content",
            "seal_value",
            "sealed_key_id",
            "withhold_content",
        ]
    )
    assert sorted(rolltape.producers.privacy.__all__) == sorted(
        [
            "PATTERNS",
            "SECRETS",
            "Pattern",
            "Redaction",
            "RedactionError",
            "RedactionRule",
            "Redactor",
        ]
    )
    for name in rolltape.projections.__all__:
        assert getattr(rolltape.projections, name) is not None
    assert sorted(rolltape.projections.__all__) == [
        "AtroposSink",
        "AtroposSinkError",
        "ChainSpan",
        "Checkpoints",
        "Chosen",
        "ChosenStore",
        "ContentKeys",
        "Decided",
        "ErasureList",
        "ErasuresFileError",
        "ExportFile",
        "ExportLine",
        "ExportOptions",
        "Exporting",
        "FeedItem",
        "FeedbackRecord",
        "FileSink",
        "FoldError",
        "Format",
        "InclusionProof",
        "LINEAGE_EVENT_TYPES",
        "Lineage",
        "LineageRun",
        "MANIFEST",
        "META_DIR",
        "Manifest",
        "MemorySink",
        "MemoryStore",
        "Message",
        "ModelLineage",
        "Narrowing",
        "PROMPT_EVENT_TYPES",
        "PreferenceRecord",
        "ProjectionError",
        "PromptLookupError",
        "PromptTarget",
        "ReviewRecord",
        "RewardRecord",
        "Selection",
        "SessionEvidence",
        "SortKey",
        "Tally",
        "TechniqueTally",
        "ToolCallRecord",
        "ToolOutcome",
        "ToolStats",
        "Trajectory",
        "TrajectoryFeed",
        "UnknownModelError",
        "VerdictRecord",
        "build_export",
        "checked_event",
        "evidence_problems",
        "fold",
        "fold_lineage",
        "fold_prompts",
        "order_key",
        "read_erasures",
        "run_projector",
        "session_evidence",
        "session_start",
        "tool_failed",
        "trajectory_record",
    ]


def test_schemas__loads_no_client_library_and_no_crypto() -> None:
    """What a third party imports to verify a chain: the wire format alone. The Kafka client,
    the model client and the crypto library load only with `schemas.clients` / `schemas.trust`."""
    import subprocess
    import sys

    code = (
        "import sys, rolltape.schemas\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & {'aiokafka', 'faust', 'openai', "
        "'cryptography', 'kafka'})\n"
        "sys.exit(' '.join(loaded) or None)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr.strip()) == (0, "")


def test_cli__starts_without_importing_torch() -> None:
    """Only the commands that train import the torch extra; the rest start fast without it."""
    import subprocess
    import sys

    code = "import sys, rolltape.infra.cli; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


def test_packaging__every_package_folder_is_listed_for_the_wheel() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {
        "rolltape." + ".".join(init.parent.relative_to(ROOT).parts)
        for top in ALLOWED
        for init in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert set(config["packages"]) == folders
    assert set(config["package-dir"]) == folders


@pytest.mark.parametrize(
    "root",
    [
        "rolltape.schemas.SchemaError",
        "rolltape.schemas.clients.KafkaClientError",
        "rolltape.schemas.plugins.PluginError",
        "rolltape.producers.ProducerError",
        "rolltape.processors.ProcessorError",
        "rolltape.projections.ProjectionError",
        "rolltape.infra.InfraError",
    ],
)
def test_exceptions__every_package_root_is_a_rolltape_error(root: str) -> None:
    module_name, _, class_name = root.rpartition(".")
    assert issubclass(getattr(importlib.import_module(module_name), class_name), RolltapeError)


@pytest.mark.parametrize(
    ("package", "root"),
    [
        ("schemas", "rolltape.schemas.SchemaError"),
        ("schemas/clients", "rolltape.schemas.clients.KafkaClientError"),
        ("schemas/plugins", "rolltape.schemas.plugins.PluginError"),
        ("producers", "rolltape.producers.ProducerError"),
        ("processors", "rolltape.processors.ProcessorError"),
        ("projections", "rolltape.projections.ProjectionError"),
        ("infra", "rolltape.infra.InfraError"),
    ],
)
def test_exceptions__each_package_raises_under_its_one_root(package: str, root: str) -> None:
    module_name, _, class_name = root.rpartition(".")
    base = getattr(importlib.import_module(module_name), class_name)
    strays = []
    for path in sorted((ROOT / package).rglob("*.py")):
        if "tasks" in path.parts or path.name == "__main__.py":
            continue  # the bug-fix environment's task projects are data, not the package
        if package == "schemas" and "clients" in path.parts:
            continue  # Kafka client errors have a root of their own (bad data is not an outage)
        if package == "schemas" and "plugins" in path.parts:
            continue  # plugin errors have a root of their own (a broken plugin is not bad data)
        text = path.read_text()
        for name in re.findall(r"^class ([A-Za-z]\w*)\(", text, re.M):  # private: internal
            dotted = ".".join(("rolltape", *path.relative_to(ROOT).with_suffix("").parts))
            module = importlib.import_module(dotted.removesuffix(".__init__"))
            cls = getattr(module, name)
            if (
                isinstance(cls, type)
                and issubclass(cls, BaseException)
                and not issubclass(cls, base)
                and cls is not RolltapeError  # the one root above every package's
            ):
                strays.append(f"{dotted}.{name}")
    assert strays == []
