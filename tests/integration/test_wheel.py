"""The built wheel installs on its own: no repository on the path, imports under `rolltape.`."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_wheel__installs_into_a_fresh_venv_and_imports_without_the_repository(
    tmp_path: Path,
) -> None:
    dist = tmp_path / "dist"
    # sdist first, then the wheel built from the sdist: proves the sdist is complete and leaves
    # no build/ folder in the repository.
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = dist.glob("rolltape-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    probe = (
        "import sys, rolltape.producers, rolltape.schemas, rolltape.infra.cli;"
        "assert not any(p.rstrip('/') == sys.argv[1] for p in sys.path);"
        "assert '/site-packages/rolltape/' in rolltape.producers.__file__;"
        "import importlib.util; assert importlib.util.find_spec('schemas') is None;"
        "from rolltape.schemas import seal, GENESIS_HASH;"
        "print(len(seal(stream='events', session_id='w', seq=0, ts_ns=1, type='turn', payload={}, "
        "prev_hash=GENESIS_HASH, producer={})[1]));"
        "from rolltape.schemas._accel import implementation; print(implementation())"
    )
    out = subprocess.run(
        [str(py), "-c", probe, str(ROOT)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    digest_length, implementation = out.stdout.split()
    assert digest_length == "64"
    if os.environ.get("ROLLTAPE_REQUIRE_NATIVE"):  # the sdist carries the Rust sources
        assert implementation == "native"
    vectors = list(
        (env_dir / "lib").glob("python3*/site-packages/rolltape/schemas/vectors/canonical.json")
    )
    assert vectors, "the test vectors ship inside the wheel"
