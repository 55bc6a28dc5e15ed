"""What every benchmark says about where it ran."""

from __future__ import annotations

import os
import platform

from rolltape.schemas import codec_implementation


def machine() -> str:
    """Architecture, cores, Python, and which codec ran (the native core or the reference
    implementation alone): figures from different machines or builds are not comparable."""
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"codec {codec_implementation()}"
    )
