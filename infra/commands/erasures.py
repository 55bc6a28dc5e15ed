"""`rolltape privacy export-erasures FILE`: the erasures chain, for checking and purging exports offline.

The file holds every record of the one erasures chain, from seq 0, as the log holds it (one
canonical envelope per line): `rolltape.projections.read_erasures` checks it with the judge's
public key alone, so whoever holds an export written before an erasure can be handed the file
and shown, without access to the cluster, which of their lines must go.
"""

from __future__ import annotations

import os
from pathlib import Path

from rolltape.infra.broker import require_connection
from rolltape.infra.kafka.erasures import read_erasures_log
from rolltape.infra.settings import Settings
from rolltape.schemas import Role


async def export_erasures(settings: Settings, path: Path) -> int:
    """Write the erasures chain of the settings' topic prefix, read as the reader principal, to
    `path` (replaced whole, never half-written); how many."""
    connection = require_connection(settings, Role.READER)
    log = await read_erasures_log(connection, settings.topic_prefix)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(b"".join(value + b"\n" for _, value in log.records))
    os.replace(tmp, path)
    return len(log.records)
