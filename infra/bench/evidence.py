"""`rolltape bench evidence`: the cost of trust. Checkpoint signing (the worker's side) and
`verify-export` (the outside verifier's side), measured on sessions built by the real pure core:
sealed like a recorder seals them, judged by the session processor, committed by its checkpoint
method and exported with `--evidence` by the export code. No broker is involved, so the figures
are the code's own, not Kafka's.

Baselines in the same run: Ed25519 signing alone (the floor of a checkpoint), and hashing every
envelope of the evidence alone (the floor of a verification that must at least read and hash
what it checks).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rolltape.infra.bench._chains import chained_session
from rolltape.infra.bench._figures import Figures, machine_line
from rolltape.infra.bench._machine import machine
from rolltape.infra.commands.export import Collected, run_export
from rolltape.infra.commands.verify_export import verify_export
from rolltape.processors import Emitted, ProcessorConfig, SessionProcessor, SessionState, handle
from rolltape.processors.audit import CheckpointSigner, InputRecord, Position
from rolltape.projections import ExportOptions, SessionEvidence
from rolltape.schemas import (
    ChainHeadLeaf,
    read_event,
)

TOOLS = [{"name": "calc", "parameters": {"type": "object"}}]


class EvidenceFigures(Figures):
    """What `rolltape bench evidence` prints: checkpoint signing and `verify-export` rates,
    medians over `repeats`, each beside its floor (signing alone, hashing alone)."""

    machine: str
    repeats: int
    sessions: int
    sign_only_per_s: float
    """Ed25519 signatures of a tree head alone, per second."""
    checkpoints_per_s_2_leaves: float
    """Checkpoints of one ended session (events and filtered heads), per second."""
    checkpoints_per_s_100_leaves: float
    leaves_per_s_100_leaves: float
    export_lines_per_s: float
    """`export --evidence` from folded sessions (Kafka reading excluded), lines per second."""
    verify_lines_per_s: float
    hash_only_lines_per_s: float
    """Reading every evidence envelope and checking its hash, nothing else (per line)."""
    verify_ratio: float

    def lines(self) -> Iterator[str]:
        yield machine_line(self.machine, f"{self.repeats} repeats (medians)")
        yield "(a) checkpoint signing (the worker, per partition and batch)"
        yield f"    Ed25519 signature alone         {self.sign_only_per_s:10,.0f} /s"
        yield f"    checkpoint of 2 leaves          {self.checkpoints_per_s_2_leaves:10,.0f} /s"
        yield (
            f"    checkpoint of 100 leaves        {self.checkpoints_per_s_100_leaves:10,.0f} /s "
            f"({self.leaves_per_s_100_leaves:,.0f} leaves/s)"
        )
        yield f"(b) an export of {self.sessions} sessions with evidence (ShareGPT, one line each)"
        yield f"    export --evidence (no Kafka)    {self.export_lines_per_s:10,.0f} lines/s"
        yield f"    verify-export                   {self.verify_lines_per_s:10,.0f} lines/s"
        yield f"    hashing the evidence alone      {self.hash_only_lines_per_s:10,.0f} lines/s"
        yield f"    ratio (verify / hashing alone): {self.verify_ratio:.2f}"


def _sessions(count: int, key: Ed25519PrivateKey) -> Collected:
    """`count` agent sessions, judged by the session processor and committed to checkpoints."""
    processor = SessionProcessor(ProcessorConfig(signer=CheckpointSigner(key)))
    states: dict[str, SessionState] = {}
    log_state = SessionState()
    collected = Collected()
    offset = 0
    for n in range(count):
        sid = f"bench-{n:06d}"
        payloads: list[tuple[str, dict[str, Any]]] = [
            ("session_started", {"task": "add", "tools": TOOLS}),
            ("turn", {"role": "user", "content": f"what is {n}+{n}?"}),
            ("tool_call", {"id": "c1", "name": "calc", "arguments": {"expr": f"{n}+{n}"}}),
            ("tool_result", {"call_id": "c1", "content": str(2 * n)}),
            ("turn", {"role": "assistant", "content": str(2 * n), "reasoning": "calc"}),
            ("session_ended", {"status": "completed"}),
        ]
        records = []
        for value in chained_session(sid, n, payloads):
            records.append(
                InputRecord("events", sid.encode(), value, Position("b.events.v1", 0, offset))
            )
            offset += 1
        outputs = []
        for record in records:
            collected.add(record.value)
            outputs += handle(processor, states, record)[1]
        leaves = states[sid].head_leaves(sid, binding=True)
        outputs.append(processor.checkpoint(log_state, "checkpoints.p0.0", leaves, 1_000 + n))
        for out in outputs:
            if isinstance(out, Emitted):
                collected.add(out.value)
    return collected


def _rate(count: int, seconds: list[float]) -> float:
    return count / statistics.median(seconds)


def run_evidence_bench(sessions: int = 2000, repeats: int = 3) -> EvidenceFigures:
    """Time checkpoint signing, then export `sessions` judged and checkpointed sessions with
    evidence to a temporary folder and verify them; no broker, so the figures are the code's.
    Raises `RuntimeError` if the export does not verify: its rate would be meaningless."""
    key = Ed25519PrivateKey.generate()
    signs: list[float] = []
    cp2: list[float] = []
    cp100: list[float] = []
    head = b"x" * 200
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(2000):
            key.sign(head)
        signs.append(time.perf_counter() - t)
        for leaves_each, times in ((2, cp2), (100, cp100)):
            processor = SessionProcessor(ProcessorConfig(signer=CheckpointSigner(key)))
            state = SessionState()
            leaves = [
                ChainHeadLeaf(stream="events", session_id=f"s{i}", seq=i, hash=f"{i:064x}")
                for i in range(leaves_each)
            ]
            rounds = 2000 if leaves_each == 2 else 200
            t = time.perf_counter()
            for i in range(rounds):
                processor.checkpoint(state, "checkpoints.p0.0", leaves, i)
            times.append(time.perf_counter() - t)
    collected = _sessions(sessions, key)
    options = ExportOptions(format="sharegpt")
    exports, verifies, hashes = [], [], []
    lines = 0
    with tempfile.TemporaryDirectory() as tmp, collected:
        public = key.public_key()
        for r in range(repeats):
            out = Path(tmp) / f"out-{r}"
            t = time.perf_counter()
            manifest = run_export(collected, options, out, evidence=True)
            exports.append(time.perf_counter() - t)
            lines = manifest.lines
            t = time.perf_counter()
            result = verify_export(out, public)
            verifies.append(time.perf_counter() - t)
            if result.problems:
                raise RuntimeError(f"the bench export does not verify: {result.problems[0]}")
            t = time.perf_counter()
            for name in manifest.evidence:
                for raw in (out / name).read_bytes().splitlines():
                    evidence = SessionEvidence.model_validate_json(raw)
                    for texts in evidence.envelopes.values():
                        for text in texts:
                            data = text.encode()
                            read_event(data)
            hashes.append(time.perf_counter() - t)
    verify_rate = _rate(lines, verifies)
    hash_rate = _rate(lines, hashes)
    return EvidenceFigures(
        machine=machine(),
        repeats=repeats,
        sessions=sessions,
        sign_only_per_s=_rate(2000, signs),
        checkpoints_per_s_2_leaves=_rate(2000, cp2),
        checkpoints_per_s_100_leaves=_rate(200, cp100),
        leaves_per_s_100_leaves=_rate(200 * 100, cp100),
        export_lines_per_s=_rate(lines, exports),
        verify_lines_per_s=verify_rate,
        hash_only_lines_per_s=hash_rate,
        verify_ratio=verify_rate / hash_rate,
    )
