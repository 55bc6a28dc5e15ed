"""Reading a recorder's spool back in tests: every record still waiting, in order."""

from __future__ import annotations

from pathlib import Path

from rolltape.producers._spool import Spool


def drain(spool_dir: Path) -> list[bytes]:
    """Every record value the spool folder holds, in order, committing as it reads."""
    spool = Spool(spool_dir, 1 << 30)
    out = []
    while not spool.empty:
        batch, token = spool.read(1000)
        out += [value for _, _, value in batch]
        spool.commit(token)
    spool.close()
    return out
