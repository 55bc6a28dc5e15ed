"""The indexer against the real broker: `rolltape serve index` processes sharing the partitions,
one killed (-9) mid-run and restarted, the store's rows equal to a rebuild's from the log, and
the sessions' CLI answering from it."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from rolltape.infra.commands.index import index_status
from rolltape.infra.index import open_store
from rolltape.producers import Recorder
from rolltape.schemas import Role
from rolltape.schemas.clients import group_members
from rolltape.schemas.privacy import KeyEncryptionKey
from tests.integration.conftest import Topics
from tests.integration.test_index_store import dump
from tests.support.cli import rolltape
from tests.support.waiting import wait_until

EVENTS_PER_SESSION = 12  # session_started, 10 turns, session_ended


class IndexerProcess:
    """`python -m rolltape.infra serve index` with the test's settings; its output to a file."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log_path = log
        self._log = open(log, "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rolltape.infra", "serve", "index"],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(60)
        self._log.close()
        return code

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


def record(topics: Topics, spool: Path, first: int, count: int) -> None:
    with Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=spool) as rec:
        for i in range(first, first + count):
            tags = [f"batch=b{i // 20}", "env" if i % 2 else "other"]
            with rec.session(f"task {i % 4}", session_id=f"s{i:03d}", tags=tags) as s:
                for turn in range(5):
                    s.turn("user", f"question {turn} of session {i}")
                    s.turn("assistant", f"answer {turn} says pelican{i}")


def test_indexers_share_partitions_a_kill_loses_and_repeats_nothing_and_a_rebuild_gives_the_same_rows(
    topics: Topics, tmp_path: Path
) -> None:
    store_path = tmp_path / "live.sqlite3"
    given = {"index_url": f"sqlite:{store_path}", "index_batch_records": 40}
    env = {
        **topics.env(),
        "ROLLTAPE_INDEX_URL": given["index_url"],
        "ROLLTAPE_INDEX_BATCH_RECORDS": "40",
    }
    settings = topics.settings.model_copy(update=given)
    record(topics, tmp_path / "spool", 0, 40)

    a = IndexerProcess(env, tmp_path / "a.log")
    b = IndexerProcess(env, tmp_path / "b.log")
    group = settings.index_group_id

    def lag() -> int:
        return asyncio.run(index_status(settings)).lag

    def indexed() -> int:
        if not store_path.exists():
            return 0
        with sqlite3.connect(store_path) as conn:
            try:
                return int(
                    conn.execute("SELECT COALESCE(SUM(records), 0) FROM positions").fetchone()[0]
                )
            except sqlite3.OperationalError:  # the tables are being made
                return 0

    wait_until(
        lambda: asyncio.run(group_members(topics.reader, group)),
        lambda n: n == 2,
        what="both indexers in the group",
        explain=lambda: a.output() + b.output(),
    )
    # Kill one while it is indexing: after the store took some batches, before it took them all.
    wait_until(indexed, lambda n: n > 0, what="a first batch indexed", explain=a.output)
    a.stop(signal.SIGKILL)
    record(topics, tmp_path / "spool", 40, 20)
    # The survivor takes the dead one's partitions and catches up alone.
    wait_until(lag, lambda n: n == 0, what="the survivor caught up", explain=b.output, every_s=0.5)
    a = IndexerProcess(env, tmp_path / "a2.log")
    # (The group still counts the killed member until its session times out: wait on the new
    # process's own word that it runs.)
    wait_until(a.output, lambda out: "indexing" in out, what="the restarted indexer running")
    record(topics, tmp_path / "spool", 60, 10)
    wait_until(
        lag,
        lambda n: n == 0,
        what="both caught up",
        explain=lambda: a.output() + b.output(),
        every_s=0.5,
    )
    assert a.stop() == 0 and b.stop() == 0
    assert "indexed" in b.output() and "records in" in b.output()

    live = open_store(f"sqlite:{store_path}", prefix=topics.prefix)
    sessions = live.sql(
        "SELECT c.session_id, c.events, SUM(t.records) FROM chains c JOIN event_types t "
        "ON t.session_id = c.session_id AND t.chain = c.chain WHERE c.chain = 'events' "
        "GROUP BY c.session_id, c.events ORDER BY c.session_id"
    ).rows
    # Every session whole, none doubled: each of its records counted exactly once.
    assert [r[0] for r in sessions] == [f"s{i:03d}" for i in range(70)]
    assert {(r[1], r[2]) for r in sessions} == {(EVENTS_PER_SESSION, EVENTS_PER_SESSION)}

    rebuilt_path = tmp_path / "rebuilt.sqlite3"
    done = rolltape(env, "index", "rebuild", "--store", f"sqlite:{rebuilt_path}")
    assert done.returncode == 0, done.stderr
    assert f"rebuilt sqlite:{rebuilt_path} from" in done.stderr
    rebuilt = open_store(f"sqlite:{rebuilt_path}", prefix=topics.prefix)
    assert dump(rebuilt) == dump(live)

    # The CLI answers from the store.
    page = json.loads(
        rolltape(env, "sessions", "list", "--tag", "batch=b3", "--json", "--limit", "5").stdout
    )
    assert page["cursor"] and all(s["events"] == EVENTS_PER_SESSION for s in page["sessions"])
    rest = json.loads(
        rolltape(
            env, "sessions", "list", "--tag", "batch=b3", "--json", "--cursor", page["cursor"]
        ).stdout
    )
    both = page["sessions"] + rest["sessions"]
    assert sorted(s["session_id"] for s in both) == [f"s{i:03d}" for i in range(60, 70)]
    assert rest["cursor"] is None
    started = [(s["started_ms"], s["session_id"]) for s in both]
    assert started == sorted(started, reverse=True)  # newest first, across the two pages
    shown = json.loads(rolltape(env, "sessions", "show", "s007", "--json").stdout)
    assert shown["task"] == "task 3" and shown["status"] == "completed"
    assert shown["chains"][0]["topic"] == f"{topics.prefix}.events.v1"
    hits = json.loads(rolltape(env, "sessions", "search", "pelican42", "--json").stdout)
    assert {h["session_id"] for h in hits} == {"s042"} and len(hits) == 5
    refused = rolltape(env, "sessions", "sql", "DELETE FROM sessions")
    assert refused.returncode == 2 and "reads and never writes" in refused.stderr
    # The killed member stays in the group until the broker's session timeout drops it.
    status = wait_until(
        lambda: json.loads(rolltape(env, "index", "status", "--json").stdout),
        lambda s: s["members"] == 0,
        what="the group empty once every indexer stopped or timed out",
        every_s=1.0,
    )
    assert status["lag"] == 0 and status["sessions"] == 70
    missing = rolltape(env, "sessions", "show", "nobody")
    assert missing.returncode == 2 and "no session 'nobody'" in missing.stderr


def test_an_indexer_with_the_kek_makes_a_subjects_text_searchable_and_its_erasure_takes_it_out(
    topics: Topics, tmp_path: Path
) -> None:
    kek = KeyEncryptionKey.generate()
    kek_file = tmp_path / "kek.bin"
    kek_file.write_bytes(kek.secret)
    kek_file.chmod(0o600)
    with Recorder(
        topics.connection(Role.AGENT),
        topic_prefix=topics.prefix,
        spool_dir=tmp_path / "spool",
        kek=kek,
    ) as rec:
        for subject, word in (("user-a", "pelican"), ("user-b", "heron")):
            with rec.session(f"help {subject}", session_id=f"s-{subject}", subject=subject) as s:
                s.turn("user", f"the {word} question")
                s.turn("assistant", f"the {word} answer")
    with_kek = {**topics.env(), "ROLLTAPE_KEK_FILE": str(kek_file)}
    without = {**topics.env(), "ROLLTAPE_KEK_FILE": str(tmp_path / "absent.bin")}

    def search(env: dict[str, str], store: Path, word: str) -> set[str]:
        done = rolltape(
            {**env, "ROLLTAPE_INDEX_URL": f"sqlite:{store}"}, "sessions", "search", word, "--json"
        )
        assert done.returncode == 0, done.stderr
        return {hit["session_id"] for hit in json.loads(done.stdout)}

    # Without the KEK the sealed text never enters the store; with it, it does.
    for env, store in ((without, tmp_path / "plain.sqlite3"), (with_kek, tmp_path / "kek.sqlite3")):
        built = rolltape({**env, "ROLLTAPE_INDEX_URL": f"sqlite:{store}"}, "index", "rebuild")
        assert built.returncode == 0, built.stderr
    assert search(without, tmp_path / "plain.sqlite3", "pelican") == set()
    assert b"pelican" not in (tmp_path / "plain.sqlite3").read_bytes()
    assert search(with_kek, tmp_path / "kek.sqlite3", "pelican") == {"s-user-a"}
    assert search(with_kek, tmp_path / "kek.sqlite3", "heron") == {"s-user-b"}

    # The subject's erasure, taken in by the live indexer: its text leaves the store's files.
    erased = rolltape(with_kek, "privacy", "erase", "--subject", "user-a", timeout=180)
    assert erased.returncode == 0, erased.stdout + erased.stderr
    store = tmp_path / "kek.sqlite3"
    live = {**with_kek, "ROLLTAPE_INDEX_URL": f"sqlite:{store}"}
    indexer = IndexerProcess(live, tmp_path / "indexer.log")
    settings = topics.settings.model_copy(update={"index_url": f"sqlite:{store}"})
    try:
        wait_until(
            lambda: asyncio.run(index_status(settings)).lag,
            lambda lag: lag == 0,
            what="the indexer to take in the erasure",
            explain=indexer.output,
            every_s=0.5,
        )
    finally:
        assert indexer.stop() == 0, indexer.output()
    assert search(with_kek, store, "pelican") == set()
    assert search(with_kek, store, "heron") == {"s-user-b"}
    files = b"".join(p.read_bytes() for p in tmp_path.glob("kek.sqlite3*"))
    assert b"pelican" not in files and b"heron" in files
