"""The Kafka client's log lines, kept off the agent's stderr and in a debug log.

During a broker outage aiokafka logs every failed connection, metadata refresh and retried batch
at WARNING or ERROR: a 25 s outage printed ~370 lines to an agent's stderr in a measured run.
What the agent's author needs to know is two things, and the recorder says them itself on the
`rolltape.producers` logger, one line each: records are being spooled, and the spool drained.

So once a recorder exists in a process, aiokafka's records below CRITICAL are written as they
are to `client.log` in the first recorder's spool folder, or where the process asked first (the
`rolltape` commands: `<state dir>/logs`), rotated at 5 MB, and then passed on demoted
to DEBUG: an application that logs at DEBUG still sees them, nothing else prints them. A logger's
filter applies only to records created on that very logger, hence one filter per aiokafka logger.
"""

from __future__ import annotations

import importlib
import logging
import logging.handlers
import threading
from pathlib import Path

_lock = threading.Lock()
_installed: logging.Handler | None = None


class _ToDebugLog(logging.Filter):
    def __init__(self, handler: logging.Handler) -> None:
        super().__init__()
        self._handler = handler

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.CRITICAL:
            if record.levelno >= self._handler.level:
                self._handler.handle(record)
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def keep_client_logs_in(directory: Path) -> Path:
    """Route aiokafka's log records to `directory`/client.log (once per process: the first
    recorder's spool folder) and return the file's path."""
    global _installed
    with _lock:
        if _installed is None:
            directory.mkdir(parents=True, exist_ok=True)
            handler = logging.handlers.RotatingFileHandler(
                directory / "client.log", maxBytes=5 << 20, backupCount=1, delay=True
            )
            handler.setFormatter(
                logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
            )
            handler.setLevel(logging.DEBUG)
            for module in ("aiokafka.admin", "aiokafka.consumer", "aiokafka.producer"):
                importlib.import_module(module)  # creates the loggers its modules use

            demote = _ToDebugLog(handler)
            names = [n for n in logging.Logger.manager.loggerDict if n.split(".")[0] == "aiokafka"]
            for name in ["aiokafka", *names]:
                logging.getLogger(name).addFilter(demote)
            _installed = handler
        assert isinstance(_installed, logging.handlers.RotatingFileHandler)
        return Path(_installed.baseFilename)
