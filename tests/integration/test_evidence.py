"""An export with evidence is verified offline with the judge's public key: a clean export
passes, and each kind of edit (data line, envelope, proof, signature, key) fails naming where."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from rolltape.producers import Recorder
from rolltape.schemas import Role, Stream
from tests.integration.conftest import Cluster, make_topics
from tests.integration.workers import WorkerProcess, payloads, wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.xdist_group("evidence"),  # one process builds the module's export once
]
CLI = [sys.executable, "-m", "rolltape.infra"]
CALC = {"name": "calc", "parameters": {"type": "object"}}
DATA = "sharegpt-00000.jsonl"
EVIDENCE = ".rolltape/sharegpt-00000.evidence.jsonl"


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=300)


def offline(home: Path) -> dict[str, str]:
    """A shell that knows no broker: only PATH, a HOME and the columns."""
    return {"PATH": os.environ["PATH"], "HOME": str(home), "COLUMNS": "200"}


@pytest.fixture(scope="module")
def exported(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An export of five agent sessions with evidence, and the judge's public key beside it."""
    topics = make_topics(cluster)
    base = tmp_path_factory.mktemp("evidence")
    worker = WorkerProcess(topics, base).start()
    try:
        with Recorder(
            topics.connection(Role.AGENT), topic_prefix=topics.prefix, spool_dir=base / "spool"
        ) as agent:
            for i in range(5):
                with agent.session("2+2", session_id=f"ev-{i}", tools=[CALC]) as s:
                    s.turn("user", f"what is 2+{i}?")
                    call = s.tool_call("calc", {"expr": f"2+{i}"})
                    s.tool_result(call, str(2 + i))
                    s.turn("assistant", str(2 + i), reasoning="add")
        heads = {
            (r.stream, r.session_id, r.head_hash)
            for r in topics.verify().reports()
            if r.stream == Stream.EVENTS.value
        }

        def covered(records: list) -> bool:
            leaves = {
                (leaf["stream"], leaf["session_id"], leaf["hash"])
                for cp in payloads(records, "checkpoint")
                for leaf in cp["leaves"]
            }
            return heads <= leaves and len(payloads(records, "filter_outcome")) == 5

        wait_for(topics, covered, worker=worker)
    finally:
        worker.stop()
    out = base / "out"
    made = run(["dataset", "export", "-f", "sharegpt", "-o", str(out), "--evidence"], topics.env())
    assert made.returncode == 0, made.stderr
    assert "5 sharegpt lines from 5" in made.stdout and "evidence: 1 file(s)" in made.stdout
    key = run(["keys", "export", str(base / "judge.pub.pem")], topics.env())
    assert key.returncode == 0, key.stderr
    yield base


def verify(
    base: Path, folder: Path, key: str = "judge.pub.pem"
) -> subprocess.CompletedProcess[str]:
    return run(["dataset", "verify", str(folder), "--public-key", str(base / key)], offline(base))


def edited(base: Path, name: str) -> Path:
    folder = base / name
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(base / "out", folder)
    return folder


def rewrite_line(path: Path, number: int, change: object) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    row = orjson.loads(lines[number - 1])
    change(row)  # type: ignore[operator]
    lines[number - 1] = orjson.dumps(row, option=orjson.OPT_SORT_KEYS) + b"\n"
    path.write_bytes(b"".join(lines))


def test_verify_export__a_clean_export_verifies_with_no_kafka(exported: Path) -> None:
    done = verify(exported, exported / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("verified 5 lines in 1 file(s) from 5 sessions")


def test_verify_export__an_edited_data_line_is_named(exported: Path) -> None:
    folder = edited(exported, "data")
    path = folder / DATA
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b"2+2", b"2+9", 1)
    path.write_bytes(b"".join(lines))
    done = verify(exported, folder)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [f"{DATA}:3: differs from the line its evidence folds to"]


def test_verify_export__an_edited_envelope_is_named_with_the_lines_built_from_it(
    exported: Path,
) -> None:
    folder = edited(exported, "envelope")

    def forge(row: dict) -> None:
        events = list(row["envelopes"]["events"])
        events[1] = events[1].replace("what is 2+", "what is 3+")
        row["envelopes"]["events"] = events

    rewrite_line(folder / EVIDENCE, 2, forge)
    done = verify(exported, folder)
    assert done.returncode == 1
    out = done.stdout
    assert f"{EVIDENCE}:2: ev-1: events envelope 1: tampered: content hashes to" in out
    assert f"{DATA}:2: folded from ev-1, whose evidence fails" in out


def test_verify_export__an_edited_proof_is_named(exported: Path) -> None:
    folder = edited(exported, "proof")

    def bend(row: dict) -> None:
        proof = row["proofs"][0]
        proof["path"] = ["00" * 32, *proof["path"][1:]] if proof["path"] else ["00" * 32]

    rewrite_line(folder / EVIDENCE, 4, bend)
    done = verify(exported, folder)
    assert done.returncode == 1
    assert f"{EVIDENCE}:4: ev-3: the proof of" in done.stdout
    assert "does not lead to the signed root" in done.stdout
    assert f"{DATA}:4: folded from ev-3" in done.stdout


def test_verify_export__an_edited_signature_or_a_foreign_key_is_named(exported: Path) -> None:
    folder = edited(exported, "signature")

    def resign(row: dict) -> None:
        proof = row["proofs"][0]
        proof["signature"] = ("ff" if proof["signature"][:2] != "ff" else "00") + proof[
            "signature"
        ][2:]

    rewrite_line(folder / EVIDENCE, 1, resign)
    done = verify(exported, folder)
    assert done.returncode == 1
    assert f"{EVIDENCE}:1: ev-0: the tree head of checkpoints.p" in done.stdout
    assert "is not signed by this public key" in done.stdout

    other = exported / "other"
    other.mkdir(exist_ok=True)
    made = run(["keys", "init"], {**offline(other), "ROLLTAPE_STATE_DIR": str(other)})
    assert made.returncode == 0, made.stderr
    (exported / "other.pub.pem").write_bytes(
        (other / "keys" / "judge.ed25519.pub.pem").read_bytes()
    )
    foreign = verify(exported, exported / "out", key="other.pub.pem")
    assert foreign.returncode == 1
    assert foreign.stdout.count("is not signed by this public key") >= 5


def test_verify_export__an_export_without_evidence_says_how_to_get_it(exported: Path) -> None:
    folder = edited(exported, "bare")
    manifest = folder / ".rolltape" / "manifest.json"
    data = orjson.loads(manifest.read_bytes())
    data["evidence"] = []
    manifest.write_bytes(orjson.dumps(data))
    done = verify(exported, folder)
    assert done.returncode == 2 and "export it again with --evidence" in done.stderr


def test_verify_export__a_chain_left_out_of_the_evidence_is_named(exported: Path) -> None:
    folder = edited(exported, "omitted")

    def drop_filtered(row: dict) -> None:
        del row["envelopes"]["filtered"]
        row["proofs"] = [p for p in row["proofs"] if p["leaf"]["stream"] != "filtered"]

    rewrite_line(folder / EVIDENCE, 3, drop_filtered)
    done = verify(exported, folder)
    assert done.returncode == 1
    assert f"{EVIDENCE}:3: ev-2: these chains are not the session as the judge decided" in (
        done.stdout
    )


def test_verify_export__doubled_sessions_extra_files_and_unmatched_lines_are_named(
    exported: Path,
) -> None:
    folder = edited(exported, "doubled")
    evidence = (folder / EVIDENCE).read_bytes().splitlines(keepends=True)
    (folder / EVIDENCE).write_bytes(b"".join([*evidence, evidence[0]]))
    data = (folder / DATA).read_bytes().splitlines(keepends=True)
    (folder / DATA).write_bytes(b"".join([*data, data[0]]))
    (folder / "extra.jsonl").write_bytes(data[1])
    done = verify(exported, folder)
    assert done.returncode == 1
    out = done.stdout
    assert f"{EVIDENCE}:6: ev-0: a second evidence line for this session" in out
    assert "extra.jsonl: not in the manifest" in out
    assert f"{DATA}: 6 data lines but 5 provenance lines" in out


def test_verify_export__a_manifest_naming_a_replayed_judge_version_is_refused(
    exported: Path,
) -> None:
    folder = edited(exported, "version")
    manifest = folder / ".rolltape" / "manifest.json"
    data = orjson.loads(manifest.read_bytes())
    data["options"]["selection"]["judge_version"] = "v2"
    manifest.write_bytes(orjson.dumps(data))
    done = verify(exported, folder)
    assert done.returncode == 2 and "the manifest was edited" in done.stderr
