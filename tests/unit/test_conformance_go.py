"""An independent Go verifier, written from docs/canonical-encoding.md alone, agrees with the
committed vectors, and rejects a tampered copy of them: the spec is enough for another language."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GO_DIR = ROOT / "tests" / "conformance" / "go"
VECTORS = ROOT / "schemas" / "vectors" / "canonical.json"

pytestmark = [
    pytest.mark.skipif(shutil.which("go") is None, reason="needs the Go toolchain"),
    pytest.mark.xdist_group("conformance-go"),  # one process builds the Go checker once
]


@pytest.fixture(scope="module")
def verifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = tmp_path_factory.mktemp("go") / "verify-vectors"
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=GO_DIR, check=True, timeout=300)
    return binary


def test_go_verifier__accepts_every_committed_vector(verifier: Path) -> None:
    out = subprocess.run([str(verifier), str(VECTORS)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout
    assert out.stdout.strip().endswith(" passed, 0 failed")


def test_go_verifier__rejects_a_tampered_hash_and_a_wrong_float_token(
    verifier: Path, tmp_path: Path
) -> None:
    doc = json.loads(VECTORS.read_text(encoding="utf-8"))
    record = json.loads(doc["chain"][1]["record"])
    record["payload"]["content"] = "what is 2+3?"
    doc["chain"][1]["record"] = json.dumps(
        record, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    doc["floats"][0]["token"] = "0.10"
    bad = tmp_path / "tampered.json"
    bad.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    out = subprocess.run([str(verifier), str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "chain record 1 hash" in out.stdout and "float 3fb999999999999a" in out.stdout
