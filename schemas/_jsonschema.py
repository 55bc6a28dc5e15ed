"""JSON Schema for the envelope and every payload type, for consumers in other languages."""

from __future__ import annotations

from pathlib import Path

import orjson

from rolltape.schemas._envelope import Envelope
from rolltape.schemas._payloads import PAYLOAD_MODELS


def json_schemas() -> dict[str, dict[str, object]]:
    """name -> JSON Schema; `envelope` plus one entry per event type."""
    schemas: dict[str, dict[str, object]] = {"envelope": Envelope.model_json_schema()}
    for event_type, model in sorted(PAYLOAD_MODELS.items()):
        schemas[event_type] = model.model_json_schema()
    return schemas


def export_json_schemas(directory: Path) -> list[Path]:
    """Write `<name>.schema.json` files (deterministic bytes) and return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in json_schemas().items():
        path = directory / f"{name}.schema.json"
        path.write_bytes(
            orjson.dumps(schema, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"
        )
        written.append(path)
    return written
