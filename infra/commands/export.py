"""`rolltape dataset export` wiring: read the topics, fold every session, write the files.

The pure parts (selection, rendering, sharding, manifest) are rolltape.projections; this module
only reads Kafka, checks each record's hash, and writes what the projections return.

Memory stays flat however long the log: the scan files each record under its session in a
spill on disk (rolltape.infra.kafka.sessions), sessions are folded one at a time, the chosen trajectories wait in
the spill sorted into export order, and lines go to their files as they are rendered.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import orjson
from pydantic import ValidationError

from rolltape.infra._errors import InfraError
from rolltape.infra.broker import require_connection
from rolltape.infra.index import locate_sessions
from rolltape.infra.kafka.keyring import keyring_if_any
from rolltape.infra.kafka.readback import Located
from rolltape.infra.kafka.sessions import SessionScan, scan_sessions
from rolltape.infra.kafka.spill import SpilledStore
from rolltape.infra.keys import JudgeKeyError, judge_key
from rolltape.infra.settings import Settings
from rolltape.processors.audit import CHECKPOINT_LOG_PREFIX
from rolltape.projections import (
    MANIFEST,
    META_DIR,
    Checkpoints,
    ExportFile,
    Exporting,
    ExportLine,
    ExportOptions,
    FoldError,
    Format,
    Manifest,
    Narrowing,
    Selection,
    SessionEvidence,
    Trajectory,
    build_export,
    fold,
    session_evidence,
    session_start,
)
from rolltape.projections.exporters import ChatTokenizer, Stack, load_tokenizer
from rolltape.schemas import (
    HUMAN_CHAIN,
    LIVE_JUDGE_VERSION,
    Role,
    Stream,
    TypedEvent,
    versioned_stream,
)
from rolltape.schemas.clients import KafkaConnection

if TYPE_CHECKING:
    from rolltape.schemas.privacy import Keyring

__all__ = [
    "LIVE_JUDGE_VERSION",
    "META_DIR",
    "Collected",
    "ExportError",
    "ExportOptions",
    "FolderSink",
    "Format",
    "Selection",
    "Stack",
    "collect",
    "collect_judged",
    "collect_narrowed",
    "no_checkpoint_hint",
    "open_tokenizer",
    "prepare_folder",
    "read_manifest",
    "render_export",
    "run_export",
    "tokenizer_label",
]


class ExportError(InfraError, ValueError):
    """The export cannot run as asked (output folder in use, unusable tokenizer)."""


class Collected(SessionScan):
    """A scan for an export: the events chains and one judge version's verdict and filter
    chains (the checkpoint logs among the verdicts, for evidence)."""

    def __init__(
        self, judge_version: str = LIVE_JUDGE_VERSION, keyring: Keyring | None = None
    ) -> None:
        self.judge_version = judge_version
        self.wanted = frozenset(
            [
                *(versioned_stream(s, judge_version) for s in (Stream.VERDICTS, Stream.FILTERED)),
                HUMAN_CHAIN,
            ]
        )
        """The derived chains kept: the judge version's verdicts and filter outcomes, and the
        reviewers' verdicts (whatever the judge version)."""
        super().__init__(self._exported, keyring)

    def _exported(self, env: TypedEvent) -> bool:
        return env.stream == Stream.EVENTS.value or env.stream in self.wanted


_COLLECTED = (Stream.EVENTS, Stream.VERDICTS, Stream.FILTERED)
"""The streams an export reads."""


async def collect(
    connection: KafkaConnection,
    *,
    prefix: str,
    judge_version: str,
    on_record: Callable[[int, int], None] | None = None,
    keys_from: Settings | None = None,
    located: Located | None = None,
) -> Collected:
    """Read the events topic and the judge version's verdict and filter chains (with
    `located`, only the records the read model located there). With `keys_from`, the sealed
    content of sessions that name a subject is opened with the keys topic and those settings'
    key-encryption key (rolltape.infra.kafka.keyring); without it, or without a KEK on this
    machine, such sessions are left out as `key_unavailable`."""
    keyring = None if keys_from is None else await keyring_if_any(connection, keys_from)
    return await scan_sessions(
        connection,
        _COLLECTED,
        Collected(judge_version, keyring),
        prefix=prefix,
        on_record=on_record,
        located=located,
    )


async def collect_narrowed(
    settings: Settings,
    judge_version: str,
    narrowing: Narrowing | None = None,
    *,
    on_record: Callable[[int, int], None] | None = None,
    evidence: bool = False,
    keys: bool = True,
    say: Callable[[str], None] | None = None,
) -> Collected:
    """`collect` from the topics of `settings`, read as the reader, with their keys (unless
    `keys` is false: a reader of ids and event types needs no sealed content). With a
    `narrowing` that leaves sessions out, only those sessions' records (and, for `evidence`,
    the checkpoint logs) are read where the read model can say where they lie; else the whole
    log is, and `say` is told why in one line. A scan files every session; the caller keeps
    those `narrowing.picks` (as `run_export` does), so both ways give the same output."""
    connection = require_connection(settings, Role.READER)
    located = None
    if narrowing is not None and narrowing.narrows:
        prefixes = (CHECKPOINT_LOG_PREFIX,) if evidence else ()
        located = await locate_sessions(
            settings, connection, _COLLECTED, narrowing, with_prefixes=prefixes, say=say
        )
    return await collect(
        connection,
        prefix=settings.topic_prefix,
        judge_version=judge_version,
        on_record=on_record,
        keys_from=settings if keys else None,
        located=located,
    )


def collect_judged(
    settings: Settings,
    judge_version: str,
    on_record: Callable[[int, int], None] | None = None,
    *,
    narrowing: Narrowing | None = None,
    evidence: bool = False,
    say: Callable[[str], None] | None = None,
) -> Collected:
    """`collect_narrowed`, run to its end (for the CLI)."""
    return asyncio.run(
        collect_narrowed(
            settings, judge_version, narrowing, on_record=on_record, evidence=evidence, say=say
        )
    )


def no_checkpoint_hint(settings: Settings, sessions: int) -> str:
    """Why an --evidence export left `sessions` out, naming the cause this machine can see:
    without a judge key no worker using these settings signs anything, and a worker reads the
    key only when it starts."""
    left = f"{sessions} session(s) were left out because no signed checkpoint covers them"
    key = judge_key(settings)
    if not key.exists():
        return (
            f"{left}: there is no judge key at {key.path}, so the worker signs no checkpoints. "
            "Create one with `rolltape keys init` (`rolltape broker up` and `rolltape demo` "
            "create it when there is none) and restart `rolltape serve worker`: sessions it decides "
            "from then on carry evidence"
        )
    try:
        kid = key.key_id()
    except JudgeKeyError as exc:
        return f"{left}: the judge key is unusable: {exc}"
    return (
        f"{left}: the judge key {kid} exists ({key.path}) but no worker signed them. Is "
        "`rolltape serve worker` running and caught up? A worker reads the key when it starts: "
        "sessions decided by one started before the key existed stay unsigned; restart it "
        "for the sessions to come"
    )


def tokenizer_label(folder: Path) -> str:
    """The tokenizer's folder name and a digest of its files: what the manifest records (never
    the machine path)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return f"{folder.name}@sha256:{digest.hexdigest()[:16]}"


def open_tokenizer(path: Path | None) -> tuple[ChatTokenizer | None, str | None]:
    """The tokenizer in `path` and the label the manifest records (none without a path); an
    unusable folder is an `ExportError` that says why."""
    if path is None:
        return None, None
    try:
        return load_tokenizer(path), tokenizer_label(path)
    except ValueError as exc:
        raise ExportError(str(exc)) from exc


def read_manifest(folder: Path) -> Manifest:
    """The export's manifest; ExportError when the folder holds no export."""
    path = folder / MANIFEST
    if not path.exists():
        raise ExportError(f"{folder} holds no export ({MANIFEST} is missing)")
    try:
        return Manifest.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise ExportError(f"{path} is not an export manifest: {exc}") from exc


def prepare_folder(out: Path, *, overwrite: bool) -> None:
    """Make `out` ready for an export: empty, or holding an export that `overwrite` lets go
    (its manifest first, so a folder left half-written holds no manifest)."""
    existing = out / MANIFEST
    if out.exists() and any(out.iterdir()):
        if not existing.exists():
            raise ExportError(f"{out} is not empty and holds no export: choose an empty folder")
        if not overwrite:
            raise ExportError(f"{out} already holds an export: pass --overwrite to replace it")
        old = orjson.loads(existing.read_bytes())
        existing.unlink()
        names = [n for e in old.get("files", []) for n in (e.get("name"), e.get("provenance_name"))]
        for name in [*names, *old.get("evidence", [])]:
            if isinstance(name, str) and _ours(name):
                (out / name).unlink(missing_ok=True)
    (out / META_DIR).mkdir(parents=True, exist_ok=True)


class FolderSink:
    """A `FileSink` writing into the export folder, a file handle per open file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._open: dict[str, BinaryIO] = {}

    def append(self, name: str, data: bytes) -> None:
        handle = self._open.get(name)
        if handle is None:
            handle = self._open[name] = (self.folder / name).open("wb")
        handle.write(data)

    def close(self, name: str) -> None:
        handle = self._open.pop(name, None)
        if handle is None:
            (self.folder / name).write_bytes(b"")
        else:
            handle.close()

    def close_all(self) -> None:
        for name in list(self._open):
            self.close(name)


def _ours(name: str) -> bool:
    """A file name an earlier manifest may ask us to remove: in the folder or its .rolltape/."""
    parts = name.split("/")
    return ".." not in parts and (len(parts) == 1 or (len(parts) == 2 and parts[0] == META_DIR))


def render_export(
    trajectories: list[Trajectory],
    options: ExportOptions,
    *,
    source: dict[str, Any],
    tokenizer: ChatTokenizer | None,
    skipped: dict[str, int],
) -> tuple[list[tuple[str, bytes]], Manifest]:
    """The export's files and manifest: what `export` writes and `verify-export` reproduces."""
    return build_export(
        trajectories,
        options,
        source=source,
        tokenizer=tokenizer,
        count_tokens=_token_counter(tokenizer, options),
        extra_skipped=skipped,
    )


def run_export(
    collected: Collected,
    options: ExportOptions,
    out: Path,
    *,
    tokenizer: ChatTokenizer | None = None,
    overwrite: bool = False,
    evidence: bool = False,
    on_session: Callable[[int], None] | None = None,
) -> Manifest:
    """Fold every session of `collected`, a session at a time, and write the export into `out`,
    the manifest last (a folder with a manifest holds a complete export). Chosen trajectories
    wait in the spill, so memory stays flat. `on_session(n)`: after each session folded."""
    if collected.judge_version != options.selection.judge_version:
        raise ExportError(
            f"the records were collected for judge version {collected.judge_version!r}, the "
            f"export asks for {options.selection.judge_version!r}"
        )
    if evidence and options.selection.judge_version != LIVE_JUDGE_VERSION:
        raise ExportError(
            "--evidence proves the live judge's chains; a replayed judge version is not "
            "checkpointed: export without --evidence, or from the live version"
        )
    prepare_folder(out, overwrite=overwrite)
    store = collected.spill.store()
    exporting = Exporting(
        options, store, tokenizer=tokenizer, count_tokens=_token_counter(tokenizer, options)
    )
    checkpoints = None
    narrowing = options.selection.narrowing()
    picked: list[str] | None = [] if narrowing.narrows else None
    """The sessions read and counted (None: every one): a narrowed export counts only the
    sessions it picks, the same whether the read model located them or a scan filed them."""
    if evidence:
        logs = {s.session_id: s.derived for s in collected.sessions(CHECKPOINT_LOG_PREFIX)}
        checkpoints = Checkpoints(logs)
        if picked is not None:
            picked.extend(logs)
    folded = 0
    for recorded in collected.sessions():
        if not recorded.events:
            continue  # only derived records (a checkpoint log, a judge's own chains)
        if (
            narrowing.narrows
            and narrowing.picks(recorded.session_id, session_start(recorded.events)) is False
        ):
            continue
        session, access = collected.opened(recorded)
        if (
            session is not None
            and access == "opened"
            and narrowing.picks(session.session_id, session_start(session.events)) is False
        ):
            continue  # a subject's session, its task read once opened
        if picked is not None:
            picked.append(recorded.session_id)
        if session is None:
            exporting.left_out(access.replace(" ", "_"))  # erased, key_unavailable
            continue
        folded += 1
        if on_session is not None:
            on_session(folded)
        try:
            trajectory = fold(
                session.events, session.derived, judge_version=options.selection.judge_version
            )
        except FoldError as exc:
            exporting.left_out(exc.reason)
            continue
        if checkpoints is not None and options.selection.reason_to_skip(trajectory) is None:
            # The envelopes as chained (sealed), with the keys that open them: verify-export
            # checks their hashes and re-folds them offline.
            keys = None
            if access == "opened" and collected.keyring is not None:
                keys = collected.keyring.session_keys(session.session_id)
            found = session_evidence(
                trajectory, recorded.events, recorded.derived, checkpoints, data_keys=keys
            )
            if found is None:
                exporting.left_out("no_checkpoint")
                continue
            store.add_proof(session.session_id, _evidence_line(found))
        exporting.offer(trajectory)
    sink = FolderSink(out)
    try:
        if checkpoints is None:
            files = exporting.write(sink)
            manifest = exporting.manifest(files, collected.source(picked))
        else:
            proofs = _EvidenceWriter(store, sink)
            files = exporting.write(sink, on_line=proofs.on_line)
            names = proofs.finish(files)
            manifest = exporting.manifest(files, collected.source(picked))
            manifest = manifest.model_copy(update={"evidence": names})
    finally:
        sink.close_all()
    (out / MANIFEST).write_bytes(manifest.to_bytes())
    return manifest


def _token_counter(
    tokenizer: ChatTokenizer | None, options: ExportOptions
) -> Callable[[str], int] | None:
    if tokenizer is None or options.token_budget is None:
        return None

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return count


class _EvidenceWriter:
    """`.rolltape/<data file stem>.evidence.jsonl` per data file, holding the sessions first
    used there, written beside the lines; then `.rolltape/selected.evidence.jsonl` with the
    selected sessions no line used (they still shape the others, e.g. a tool list)."""

    def __init__(self, store: SpilledStore, sink: FolderSink) -> None:
        self.store = store
        self.sink = sink
        self.written: set[str] = set()

    @staticmethod
    def name_for(data_file: str) -> str:
        return f"{META_DIR}/{data_file.removesuffix('.jsonl')}.evidence.jsonl"

    def on_line(self, data_file: str, line: ExportLine) -> None:
        for sid in line.sessions:
            if sid not in self.written:
                self.written.add(sid)
                proof = self.store.proof(sid)
                assert proof is not None, f"{sid} was exported without its evidence"
                self.sink.append(self.name_for(data_file), proof)

    def finish(self, files: tuple[ExportFile, ...]) -> tuple[str, ...]:
        names = [self.name_for(entry.name) for entry in files]
        for name in names:
            self.sink.close(name)
        rest = f"{META_DIR}/selected.evidence.jsonl"
        unused = 0
        for proof in self.store.proofs_except(self.written):
            self.sink.append(rest, proof)
            unused += 1
        if unused:
            self.sink.close(rest)
            names.append(rest)
        return tuple(names)


def _evidence_line(evidence: SessionEvidence) -> bytes:
    return orjson.dumps(
        evidence.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE
    )
