"""The readers that ask the read model where their sessions lie: `dataset export` with -s,
--task, --since and `report` with --session, --task read only those sessions' records where the
read model is up to date, and scan the whole log where there is none or it is behind, saying so
in one line; the two ways write the same bytes. A resume reads the session's partition from
where the read model says, a judge's world is restored from its blobs' indexed offsets, and a
batch finds its sessions by its tag."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rolltape.infra.commands.environments import open_environment
from rolltape.infra.commands.export import collect_judged
from rolltape.infra.commands.prompts import prompt_targets
from rolltape.infra.index import IndexBlobLocator, IndexHeadLocator, open_store
from rolltape.infra.kafka.blobs import read_world, restore_world
from rolltape.producers import Recorder
from rolltape.producers import _takeover as takeover
from rolltape.producers._resume import HeadInLog
from rolltape.projections import PROMPT_EVENT_TYPES, Narrowing
from rolltape.schemas import Role, Stream, WorldSnapshot, topic_name
from rolltape.schemas.clients import ModelEndpoint
from tests.integration.conftest import Cluster, Topics, make_topics
from tests.support.cli import rolltape
from tests.support.openai_server import Completion, OpenAICompatibleServer, Reply

SCANNED = "reading the whole log, not the read model: "


def record(topics: Topics, spool: Path, first: int, count: int) -> None:
    with Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=spool) as rec:
        for i in range(first, first + count):
            with rec.session(f"task {i % 3}", session_id=f"s{i:03d}") as s:
                s.turn("user", f"question of session {i}")
                s.turn("assistant", f"answer of session {i}")


def tree(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


class Cli:
    def __init__(self, topics: Topics, store: str) -> None:
        self.env = {**topics.env(), "ROLLTAPE_INDEX_URL": store}

    def __call__(self, *args: str, store: str | None = None) -> subprocess.CompletedProcess[str]:
        env = self.env if store is None else {**self.env, "ROLLTAPE_INDEX_URL": store}
        done = rolltape(env, *args)
        assert done.returncode == 0, done.stderr
        return done


@pytest.fixture(scope="module")
def topics_module(cluster: Cluster) -> Topics:
    return make_topics(cluster)


@pytest.fixture(scope="module")
def indexed(topics_module: Topics, tmp_path_factory: pytest.TempPathFactory) -> tuple[Cli, str]:
    """18 sessions (tasks 0, 1, 2 in turn) and a read model rebuilt over them; the ISO time
    between the ninth and the tenth session's start."""
    tmp = tmp_path_factory.mktemp("readers")
    topics = topics_module
    record(topics, tmp / "spool", 0, 9)
    middle = dt.datetime.now(dt.UTC).isoformat()
    record(topics, tmp / "spool", 9, 9)
    cli = Cli(topics, f"sqlite:{tmp / 'index.sqlite3'}")
    cli("index", "rebuild")
    return cli, middle


@pytest.mark.parametrize(
    ("asked", "sessions"),
    [
        (["-s", "s007"], 1),
        (["-s", "s01*"], 8),
        (["--task", "task 2"], 6),
        (["--task", "task 0", "-s", "s00*"], 4),
        (["--since", "MIDDLE"], 9),
    ],
)
def test_a_narrowed_export_reads_the_located_sessions_and_writes_the_scans_bytes(
    indexed: tuple[Cli, str], tmp_path: Path, asked: list[str], sessions: int
) -> None:
    cli, middle = indexed
    asked = [middle if a == "MIDDLE" else a for a in asked]
    export = ["dataset", "export", "-f", "sharegpt", "--include-unfinished", *asked]
    by_index = cli(*export, "-o", str(tmp_path / "index"))
    by_scan = cli(*export, "-o", str(tmp_path / "scan"), store=f"sqlite:{tmp_path / 'none'}")
    assert SCANNED not in by_index.stderr
    assert f"{SCANNED}no read model at {tmp_path / 'none'}" in by_scan.stderr
    assert tree(tmp_path / "index") == tree(tmp_path / "scan")
    assert f"from {sessions} of {sessions} sessions" in by_index.stdout


def test_the_located_read_takes_only_the_asked_sessions_records(
    indexed: tuple[Cli, str], topics_module: Topics
) -> None:
    cli, _ = indexed
    settings = topics_module.settings.model_copy(
        update={"index_url": cli.env["ROLLTAPE_INDEX_URL"]}
    )
    said: list[str] = []
    with collect_judged(
        settings, "live", narrowing=Narrowing(sessions=("s004",)), say=said.append
    ) as one:
        assert said == []
        assert one.records == 4  # session_started, two turns, session_ended
        assert [s.session_id for s in one.sessions()] == ["s004"]
    with collect_judged(settings, "live") as whole:
        assert whole.records == 18 * 4


def test_a_report_on_a_session_or_a_task_is_the_same_page_by_index_and_by_scan(
    indexed: tuple[Cli, str], tmp_path: Path
) -> None:
    cli, _ = indexed
    for asked in (["--session", "s005"], ["--task", "task 1"]):
        by_index = cli("report", *asked, "--out", str(tmp_path / "index.html"))
        by_scan = cli(
            "report", *asked, "--out", str(tmp_path / "scan.html"), store=f"sqlite:{tmp_path / 'x'}"
        )
        assert SCANNED not in by_index.stderr and SCANNED in by_scan.stderr
        page = (tmp_path / "index.html").read_bytes()
        assert page == (tmp_path / "scan.html").read_bytes()
        assert b"s005" in page if asked[0] == "--session" else b"s016" in page


def test_a_read_model_behind_the_log_is_said_and_its_unindexed_tail_scanned(
    topics: Topics, tmp_path: Path
) -> None:
    record(topics, tmp_path / "spool", 0, 3)
    cli = Cli(topics, f"sqlite:{tmp_path / 'index.sqlite3'}")
    cli("index", "rebuild")
    record(topics, tmp_path / "spool", 3, 3)  # s003..s005, after the read model was built
    export = ["dataset", "export", "-f", "turns", "--include-unfinished", "--task", "task 0"]
    late = cli(*export, "-o", str(tmp_path / "late"))
    # The located sessions and the tail the read model has not indexed yet (three sessions of
    # four records), said in one line.
    assert SCANNED not in late.stderr
    assert "reading the log's last 12 record(s) as a scan: the read model has not" in late.stderr
    assert "from 2 of 2 sessions" in late.stdout  # s000 and s003, the one indexed and the new
    cli("index", "rebuild")
    caught_up = cli(*export, "-o", str(tmp_path / "caught-up"))
    assert SCANNED not in caught_up.stderr
    assert tree(tmp_path / "late") == tree(tmp_path / "caught-up")
    assert os.listdir(tmp_path / "late")


def test_a_resume_reads_the_sessions_partition_from_where_the_read_model_says(
    topics: Topics,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """From the first record of an indexed session, from the indexed end for one recorded
    after: the head found is the head a read from the partition's start finds, and the chain
    goes on from it."""
    record(topics, tmp_path / "spool", 0, 12)
    with Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path / "a") as rec:
        rec.session("long", session_id="resumed-old").turn("user", "before the read model")
    record(topics, tmp_path / "spool", 12, 12)
    url = f"sqlite:{tmp_path / 'index.sqlite3'}"
    Cli(topics, url)("index", "rebuild")
    with Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path / "b") as rec:
        rec.session("late", session_id="resumed-new").turn("user", "after the read model")

    reads: list[tuple[int, HeadInLog, HeadInLog]] = []
    read_head = takeover.read_head

    async def both_ways(*args: Any, from_offset: int = 0) -> HeadInLog:
        located = await read_head(*args, from_offset=from_offset)
        reads.append((from_offset, located, await read_head(*args, from_offset=0)))
        return located

    monkeypatch.setattr(takeover, "read_head", both_ways)
    store = open_store(url, prefix=topics.prefix)
    (old_chain,) = [c for c in store.session("resumed-old").chains if c.chain == "events"]
    events = topic_name(Stream.EVENTS, topics.prefix)
    indexed_ends = {end for (topic, _), end in store.positions().items() if topic == events}
    store.close()
    caplog.set_level(logging.INFO, "rolltape.producers")
    with Recorder(
        topics.writer,
        topic_prefix=topics.prefix,
        spool_dir=tmp_path / "c",
        head_locator=IndexHeadLocator(url, topics.prefix),
    ) as rec:
        for sid in ("resumed-old", "resumed-new"):
            with rec.session("ignored", session_id=sid, resume=True) as s:
                s.turn("assistant", "resumed")
    assert "from its start" not in caplog.text
    (old_from, old_located, old_whole), (new_from, new_located, new_whole) = reads
    assert old_from == old_chain.first_offset > 0  # the session's first record
    assert new_from in indexed_ends and new_from > 0  # none of it before the indexed end
    assert old_located == old_whole and new_located == new_whole
    assert old_located.seq == new_located.seq == 1
    for sid in ("resumed-old", "resumed-new"):
        (report,) = [r for r in topics.verify(sid).reports() if r.stream == "events"]
        assert report.ok and report.ended and report.last_seq == 4  # resumed, turn, ended

    # Without a read model: from the partition's start, said in one line.
    reads.clear()
    with Recorder(
        topics.writer,
        topic_prefix=topics.prefix,
        spool_dir=tmp_path / "d",
        head_locator=IndexHeadLocator(f"sqlite:{tmp_path / 'none'}", topics.prefix),
    ) as rec:
        rec.session("again", session_id="resumed-2", resume=True).turn("user", "x")
    assert f"from its start, not from the read model: no read model at {tmp_path / 'none'}" in (
        caplog.text
    )
    assert reads[0][0] == 0


def test_a_world_is_restored_from_the_blobs_indexed_offsets_to_the_scans_bytes(
    topics: Topics, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def world(name: str, files: int) -> Path:
        root = tmp_path / name
        (root / "src").mkdir(parents=True)
        for i in range(files):
            (root / "src" / f"m{i}.py").write_text(f"# {name} module {i}\n" * (i + 1))
        return root

    with Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path / "s") as rec:
        snapshots = {}
        for n in range(4):
            with rec.session("worlds", session_id=f"w{n}") as s:
                snapshots[n], _ = s.world(world(f"w{n}", 6 + n))
    url = f"sqlite:{tmp_path / 'index.sqlite3'}"
    Cli(topics, url)("index", "rebuild")
    with (
        Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path / "t") as rec,
        rec.session("worlds", session_id="w-late") as s,
    ):
        late, _ = s.world(world("w-late", 3))

    judge = topics.connection(Role.JUDGE)
    caplog.set_level(logging.INFO, "rolltape.infra")

    def restored(snapshot: WorldSnapshot, to: str, locate: IndexBlobLocator | None) -> Path:
        read = asyncio.run(read_world(judge, snapshot.digest, prefix=topics.prefix, locate=locate))
        assert read == snapshot
        dest = tmp_path / to
        asyncio.run(restore_world(judge, snapshot, dest, prefix=topics.prefix, locate=locate))
        return dest

    by_index = restored(snapshots[2], "by-index", IndexBlobLocator(url, topics.prefix))
    assert SCANNED not in caplog.text
    assert tree(by_index) == tree(restored(snapshots[2], "by-scan", None)) == tree(tmp_path / "w2")
    late_dest = restored(late, "late", IndexBlobLocator(url, topics.prefix))
    assert f"blobs: {SCANNED}it has none of these blobs" in caplog.text
    assert tree(late_dest) == tree(tmp_path / "w-late")
    restored(snapshots[0], "none", IndexBlobLocator(f"sqlite:{tmp_path / 'none'}", topics.prefix))
    assert f"blobs: {SCANNED}no read model at {tmp_path / 'none'}" in caplog.text


def test_a_batch_finds_its_sessions_by_its_tag_and_sums_up_the_same_by_index_and_by_scan(
    topics: Topics, tmp_path: Path
) -> None:
    """`env run` plans from the sessions tagged with its batch: a session named like one of
    its slots but not tagged so is none of its, read by index or by scan."""
    third = list(open_environment("bugfix").items("train"))[2].item_id
    with Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path / "s") as rec:
        with rec.session("not the batch's", session_id=f"batch.tagged.{third}.0.7") as s:
            s.turn("user", "named like the third slot, without the batch's tag")
        with rec.session("another's", session_id="batch.other.x.0.1", tags=["batch=other"]):
            pass

    def answer(body: dict[str, Any]) -> Reply:
        return Completion(content="done")

    none = f"sqlite:{tmp_path / 'none'}"
    with OpenAICompatibleServer(answer) as server:
        models = {"agent": ModelEndpoint(base_url=server.base_url, model="local").to_config()}
        cli = Cli(topics, f"sqlite:{tmp_path / 'index.sqlite3'}")
        cli.env.update({"ROLLTAPE_MODELS": json.dumps(models), "COLUMNS": "200"})
        batch = ["env", "run", "bugfix", "--run", "tagged", "--items"]
        first = cli(*batch, "2", store=none)
        assert first.stderr.count(SCANNED) == 1, first.stderr  # said once, read three times
        assert "2 planned, 0 finished before, 2 ran now (2 completed" in first.stdout
        cli("index", "rebuild")
        by_index = cli(*batch, "3")
    # Planned by the read model; the summary after the new rollout reads their records (not
    # indexed yet: no indexer runs here) as a scan.
    assert SCANNED not in by_index.stderr
    assert "reading the log's last" in by_index.stderr
    assert "3 planned, 2 finished before, 1 ran now (1 completed" in by_index.stdout
    cli("index", "rebuild")
    # Every slot finished now: the summaries by index and by scan read the same sessions.
    again = cli(*batch, "3")
    by_scan = cli(*batch, "3", store=none)
    assert SCANNED not in again.stderr and SCANNED in by_scan.stderr
    assert again.stdout == by_scan.stdout
    assert "3 planned, 3 finished before, 0 ran now" in again.stdout


def test_prompt_targets_are_read_from_the_sessions_holding_prompt_events_and_the_tail(
    topics: Topics, tmp_path: Path
) -> None:
    record(topics, tmp_path / "spool", 0, 3)
    cli = Cli(topics, f"sqlite:{tmp_path / 'index.sqlite3'}")
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("You are a careful assistant.")
    cli("prompts", "add", "policy", "--file", str(prompt), "--promote", "initial")
    cli("index", "rebuild")
    prompt.write_text("You are a careful, brief assistant.")
    cli("prompts", "add", "policy", "--file", str(prompt))  # after the read model was built
    settings = topics.settings.model_copy(update={"index_url": cli.env["ROLLTAPE_INDEX_URL"]})
    store = open_store(cli.env["ROLLTAPE_INDEX_URL"], prefix=topics.prefix)
    try:
        (holding,) = store.holding_ids(PROMPT_EVENT_TYPES)
        assert not holding.startswith("s00")  # the plain sessions are not read
    finally:
        store.close()

    said: list[str] = []
    located = asyncio.run(prompt_targets(settings, say=said.append))
    assert len(said) == 1 and "as a scan: the read model has not indexed" in said[0], said
    scanned_settings = settings.model_copy(update={"index_url": f"sqlite:{tmp_path / 'none'}"})
    scanned_said: list[str] = []
    scanned = asyncio.run(prompt_targets(scanned_settings, say=scanned_said.append))
    assert scanned_said and scanned_said[0].startswith(SCANNED)
    assert located == scanned
    assert len(located["policy"].versions) == 2
