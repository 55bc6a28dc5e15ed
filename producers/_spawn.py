"""Processes that run one function of rolltape in a fresh interpreter (never forked: the parent
may hold CUDA contexts, threads and an event loop), with descriptors handed over.

The recorder's sender processes and the OTLP receiver's workers start this way: the child
gets this process's import path, so an editable install or a test's source tree is what it
imports too.
"""

from __future__ import annotations

import subprocess
import sys


def fresh_interpreter(target: str, *fds: int) -> subprocess.Popen[bytes]:
    """Start `python -c` calling `target` ("package.module:function") with `fds`, which the
    child inherits under the same numbers; its stdin is closed, its output is this process's."""
    module, function = target.split(":")
    path = [entry for entry in sys.path if isinstance(entry, str)]
    code = (
        f"import sys; sys.path[:] = {path!r}; "
        f"from {module} import {function}; "
        f"{function}({', '.join(str(fd) for fd in fds)})"
    )
    return subprocess.Popen([sys.executable, "-c", code], pass_fds=fds, stdin=subprocess.DEVNULL)
