"""What each flag means, once for the whole app.

A flag that two commands take means one thing in both: its help there starts with the meaning
written here, and a short flag stands for one long flag everywhere (`tests/unit/test_cli_flags.py`
holds every command to this, and docs/cli.md lists the table). A command adds what is particular
to it after the meaning: `--out` is "Where to write" the HTML report in one place and the data
files in another.
"""

from __future__ import annotations

from typing import Final

#: Long flag -> the words every help of it starts with.
MEANINGS: Final[dict[str, str]] = {
    "--accepted-only": "Only sessions the reward filter accepted.",
    "--calls": "Calls timed",
    "--comment": "What the reviewer says",
    "--concurrency": "Rollouts at once",
    "--dry-run": "Write nothing:",
    "--epochs": "Epochs per run",
    "--erasures": "The erasures file (`rolltape privacy export-erasures FILE`)",
    "--events": "Events per run",
    "--family": "The model family whose text tool calls to parse:",
    "--format": "Output format",
    "--host": "Interface to listen on.",
    "--port": "The port to listen on",
    "--from-beginning": "Start at the oldest record",
    "--group-size": "Sessions per group",
    "--items": "Rollouts to run (train items, cycled).",
    "--job": "Only this job's.",
    "--jobs": "Processes replaying partitions at once",
    "--json": "Print JSON",
    "--judge-version": "The judge version",
    "--keep-equal-scores": "Atropos: keep groups whose scores are all equal.",
    "--label": "A label:",
    "--limit": "The most to show",
    "--model": "Logical model (ROLLTAPE_MODELS binds it to an endpoint)",
    "--out": "Where to write",
    "--overwrite": "Replace an earlier export in --out.",
    "--prompt": "The system prompt",
    "--public-key": "The judge's public key, PEM (`rolltape keys export FILE`).",
    "--record": "Record the results as events:",
    "--repeats": "Runs; medians are reported",
    "--rounds": "Rounds of the loop:",
    "--run": "The batch's name",
    "--scenario": "The scenario to run",
    "--score": "What scores a session",
    "--seeds": "Seeded runs per scenario, seeds 0..N-1",
    "--senders": "Sender processes",
    "--session": "A session id",
    "--sessions": "Sessions in each run",
    "--since": "Only sessions started at or after (ISO 8601)",
    "--start-worker": "Run a worker for the duration (else one must run).",
    "--store": "The read model to write",
    "--subject": "A subject (whose data sessions hold)",
    "--stream": "A stream of the log",
    "--tag": "Only sessions with this tag",
    "--task": "The task",
    "--tokenizer": "Local Hugging Face tokenizer folder (with a chat template).",
    "--until": "Only sessions started before (ISO 8601)",
    "--url": "The Atropos API server, e.g. http://host:8000.",
    "--wait-judged": "Seconds to wait for the worker's decisions",
    "--workers": "Processes that record spans",
}

#: The exit codes of every command, said once (`rolltape --help` and docs/cli.md show them).
EXIT_CODES: Final[dict[int, str]] = {
    0: "done; nothing wrong found",
    1: "findings: a broken chain, an export that does not verify, a failed check or rollout",
    2: "an error: a wrong option, a bad file, a broker that is away (one line on stderr saying "
    "what to do)",
    130: "interrupted (Ctrl-C); a service stopped by Ctrl-C or SIGTERM exits 0 after its stop line",
}

__all__ = ["EXIT_CODES", "MEANINGS"]
