"""The faust worker that runs the processors against Kafka (`rolltape serve worker`)."""

from rolltape.processors.worker._app import create_app, run_worker
from rolltape.processors.worker._config import WorkerConfig
from rolltape.processors.worker._judging import JudgeExecutor, JudgeRunner
from rolltape.processors.worker._producers import OutputProducer
from rolltape.processors.worker._shell import Shell, dead_letter_headers

__all__ = [
    "JudgeExecutor",
    "JudgeRunner",
    "OutputProducer",
    "Shell",
    "WorkerConfig",
    "create_app",
    "dead_letter_headers",
    "run_worker",
]
