"""Golden files: committed expected outputs, compared byte for byte.

Set ROLLTAPE_UPDATE_GOLDEN=1 to rewrite them after an intended format change, then read the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


def assert_golden(name: str, data: bytes) -> None:
    path = GOLDEN / name
    if os.environ.get("ROLLTAPE_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    assert path.exists(), f"{path} missing: run with ROLLTAPE_UPDATE_GOLDEN=1 to create it"
    expected = path.read_bytes()
    assert data == expected, (
        f"{name} differs from its golden file (ROLLTAPE_UPDATE_GOLDEN=1 rewrites)"
    )
