"""What every benchmark says about where it ran."""

from __future__ import annotations

import os
import platform
from collections.abc import Iterable
from pathlib import Path

from rolltape.schemas import codec_implementation


def machine() -> str:
    """Architecture, cores, Python, and which codec ran (the native core or the reference
    implementation alone): figures from different machines or builds are not comparable."""
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"codec {codec_implementation()}"
    )


_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds the processes have used so far (/proc, so Linux only: OSError
    elsewhere, or for a process that is gone)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total * _TICK_S
