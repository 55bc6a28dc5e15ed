"""The installed rolltape's version: named in every envelope's producer and every derived
event's processor label.

Read from the installed distribution's metadata, the one place the version is written
(pyproject.toml), so a release never records one version and reports another.
"""

from __future__ import annotations

import functools
import importlib.metadata


@functools.cache
def software_version() -> str:
    """The installed version of the `rolltape` distribution ("0+unknown" when run from a
    source tree that was never installed)."""
    try:
        return importlib.metadata.version("rolltape")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"
