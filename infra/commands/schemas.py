"""`rolltape schemas export DIR` wiring: the wire format's JSON Schemas written to a folder, so the
CLI names no schema module itself."""

from __future__ import annotations

from pathlib import Path

from rolltape.schemas import export_json_schemas


def export_schemas(directory: Path) -> list[Path]:
    """Write `<name>.schema.json` for the envelope and every payload type into `directory`
    (made if missing); the paths written, in order."""
    return export_json_schemas(directory)
