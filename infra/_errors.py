"""The one exception root of rolltape.infra (the CLI turns each into a message and an exit
status).

InfraError
├── BrokerError           the managed broker (start, principals, ACLs; see infra.broker)
├── WorkerSetupError      the worker or replay cannot start as configured
├── ExportError           the export cannot run as asked (folder in use, tokenizer)
├── ReportError           the report cannot be drawn (no such session, not a training run)
├── RecordedRunsError     `rules calibrate --from-log` finds no recorded runs to read
├── JudgeKeyError         the judge's signing key is missing or unreadable
├── ReceiverBusyError     the OTLP receiver's queue is full (answered with 503)
├── TopicError            a topic rolltape needs exists in a shape it cannot use
├── KeysTopicStalledError the keys topic makes no progress (a live reader of content stops)
├── DemoError             a demo step did not produce what it should
├── ReadModelError        the read model (its store, the indexer, a query; see infra.index)
└── CliError              a problem the CLI finds itself (a setting that does not read)
"""

from __future__ import annotations

from rolltape.schemas import RolltapeError


class InfraError(RolltapeError):
    """Root of every error rolltape.infra raises."""


class ReadModelError(InfraError):
    """The read model cannot do what was asked: its store is of another schema version or
    cannot be opened, a query is wrong, an indexer lost a partition it was writing."""
