"""Write docs/cli.md from the `rolltape` app (run it after changing a command; a test fails when
the file is stale)."""

from __future__ import annotations

from pathlib import Path

from rolltape.infra.cli import app
from rolltape.infra.cli._reference import render

if __name__ == "__main__":
    target = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
    target.write_text(render(app))
    print(f"wrote {target.name}: {len(target.read_text().splitlines())} lines")
