"""The live feed and the Atropos sink against the real broker, a real worker and Atropos's own
API server: judged sessions stream out as they are decided, at least once, deduplicated by id,
and groups reach the trainer's /batch."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from rolltape.producers import Recorder
from rolltape.projections import AtroposSink, FeedItem, Selection, TrajectoryFeed
from tests.integration.conftest import Topics
from tests.integration.workers import WorkerProcess, payloads, wait_for
from tests.support.waiting import Output, wait_until

pytestmark = pytest.mark.integration
atroposlib = pytest.importorskip("atroposlib.api.server")
CALC = {"name": "calc", "parameters": {"type": "object"}}


def record_group(rec: Recorder, group: str, rewards: tuple[float, ...]) -> None:
    for i, reward in enumerate(rewards):
        with rec.session("count", session_id=f"{group}-{i}", group_id=group) as s:
            s.turn("user", "count", token_ids=[11, 12])
            s.turn("assistant", f"{i} {i}", token_ids=[20 + i, 30 + i, 2])
            s.reward(reward)


def record_groups(topics: Topics, spool: Path, groups: dict[str, tuple[float, ...]]) -> None:
    with Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=spool) as rec:
        for group, rewards in groups.items():
            record_group(rec, group, rewards)


async def take(feed: TrajectoryFeed, count: int, timeout_s: float = 60) -> list[FeedItem]:
    items: list[FeedItem] = []

    async def collect() -> None:
        async for item in feed:
            items.append(item)
            if len(items) == count:
                return

    await asyncio.wait_for(collect(), timeout_s)
    return items


def decided(topics: Topics, worker: WorkerProcess, sessions: int) -> None:
    """Wait until the worker has decided `sessions` sessions (their filter outcomes)."""
    wait_for(topics, lambda rs: len(payloads(rs, "filter_outcome")) >= sessions, worker=worker)


def test_feed_streams_judged_sessions_and_the_sink_feeds_atropos(
    topics: Topics, tmp_path: Path
) -> None:
    with Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path / "spool") as rec:
        record_group(rec, "q1", (1.0, 0.0))
        record_group(rec, "q2", (0.5, 0.5))
        with rec.session("2+2", session_id="halluc", tools=[CALC]) as s:
            s.tool_result(s.tool_call("web_search", {"q": "2+2"}), "no", success=False)
            s.turn("assistant", "4")
    worker = WorkerProcess(topics, tmp_path).start()

    async def scenario(server_url: str) -> tuple[list[FeedItem], AtroposSink]:
        accepted = Selection(accepted="accepted")
        async with TrajectoryFeed(
            topics.reader, group_id="trainer", prefix=topics.prefix, selection=accepted
        ) as feed:
            items = await take(feed, 4)
            sink = AtroposSink(server_url, group_size=2)
            for item in items:
                await sink.add(item.trajectory)
            await sink.close()
            # Nothing more: once the worker decided all five, a session recorded after them is
            # the next item, and the rejected one was counted on the way.
            await asyncio.to_thread(decided, topics, worker, 5)
            record_groups(topics, tmp_path / "s-marker", {"marker": (1.0,)})
            marker = await take(feed, 1)
            assert [i.trajectory.session_id for i in marker] == ["marker-0"]
            assert feed.skipped["not_accepted"] == 1
        # Everything handed out was committed: the same group gets nothing again, only the
        # sessions judged later, alone (the second recorded once the first arrived).
        async with TrajectoryFeed(
            topics.reader, group_id="trainer", prefix=topics.prefix, selection=accepted
        ) as again:
            record_groups(topics, tmp_path / "s2", {"q3": (1.0,)})
            late = await take(again, 1)
            record_groups(topics, tmp_path / "s3", {"q4": (1.0,)})
            late += await take(again, 1)
            assert [i.trajectory.session_id for i in late] == ["q3-0", "q4-0"]
        return items, sink

    from tests.support.atropos_server import AtroposServer

    try:
        with AtroposServer() as server:
            server.register_trainer(batch_size=2)
            items, sink = asyncio.run(scenario(server.url))
            batch = server.batch()
    finally:
        worker.stop()
    assert sorted(i.trajectory.session_id for i in items) == ["q1-0", "q1-1", "q2-0", "q2-1"]
    assert len({i.id for i in items}) == 4
    assert items[0].rows("sharegpt")[0]["session_id"] == items[0].trajectory.session_id
    assert sink.sent_groups == 1 and sink.skipped["equal_scores"] == 2
    assert isinstance(batch, list) and len(batch) == 1
    group = batch[0]
    assert group["scores"] == [1.0, 0.0]
    assert group["tokens"] == [[11, 12, 20, 30, 2], [11, 12, 21, 31, 2]]
    assert group["masks"][0] == [-100, -100, 20, 30, 2]


def test_a_group_short_of_its_size_is_counted_as_buffered_by_the_server(
    topics: Topics, tmp_path: Path
) -> None:
    """A group that lost a member (no reward) goes out short; Atropos's server buffers it, not
    queueing it for the trainer until buffered groups add up to the group size: the sink says so
    instead of counting it as delivered like a full one."""
    with Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path / "spool") as rec:
        record_group(rec, "full", (1.0, 0.0, 0.5))
        for i, reward in enumerate((1.0, 0.0, None)):
            with rec.session("count", session_id=f"short-{i}", group_id="short") as s:
                s.turn("user", "count", token_ids=[11, 12])
                s.turn("assistant", f"{i} {i}", token_ids=[20 + i, 30 + i, 2])
                if reward is not None:
                    s.reward(reward)
    worker = WorkerProcess(topics, tmp_path).start()

    async def scenario(server_url: str) -> AtroposSink:
        async with TrajectoryFeed(topics.reader, group_id="t", prefix=topics.prefix) as feed:
            items = await take(feed, 6)
        sink = AtroposSink(server_url, group_size=3)
        assert await sink.register(asyncio.Event())
        for item in items:
            await sink.add(item.trajectory)
        await sink.close()
        return sink

    from tests.support.atropos_server import AtroposServer

    try:
        with AtroposServer() as server:
            server.register_trainer(batch_size=3)
            sink = asyncio.run(scenario(server.url))
            batch = server.batch()
    finally:
        worker.stop()
    assert sink.sent_groups == 2 and sink.buffered_groups == 1
    assert sink.skipped["no_score"] == 1
    assert isinstance(batch, list) and [g["scores"] for g in batch] == [[1.0, 0.0, 0.5]]


def test_a_second_consumer_group_gets_its_own_copy(topics: Topics, tmp_path: Path) -> None:
    record_groups(topics, tmp_path / "spool", {"g": (1.0, 0.5)})
    worker = WorkerProcess(topics, tmp_path).start()

    async def two_groups() -> tuple[set[str], set[str]]:
        results = []
        for group in ("a", "b"):
            async with TrajectoryFeed(topics.reader, group_id=group, prefix=topics.prefix) as feed:
                results.append({i.trajectory.session_id for i in await take(feed, 2)})
        return results[0], results[1]

    try:
        first, second = asyncio.run(two_groups())
    finally:
        worker.stop()
    assert first == second == {"g-0", "g-1"}


def test_the_projector_publishes_each_decided_session_to_the_compacted_topic(
    topics: Topics, tmp_path: Path
) -> None:
    import signal
    import sys

    from rolltape.projections import Trajectory
    from rolltape.schemas import Stream, decode
    from tests.integration.workers import read_all

    record_groups(topics, tmp_path / "spool", {"p": (1.0, 0.0, 0.5)})
    worker = WorkerProcess(topics, tmp_path).start()
    projector = subprocess.Popen(
        [sys.executable, "-m", "rolltape.infra", "serve", "projector"],
        env=topics.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(topics, lambda rs: len(rs) >= 3, streams=(Stream.TRAJECTORIES,))
    finally:
        projector.send_signal(signal.SIGTERM)
        _, err = projector.communicate(timeout=60)
        worker.stop()
    assert projector.returncode == 0, err
    assert "published 3 trajectories" in err
    by_key = {r.key: r for r in read_all(topics, (Stream.TRAJECTORIES,))}
    assert set(by_key) == {b"p-0", b"p-1", b"p-2"}
    for key, record in by_key.items():
        trajectory = Trajectory.model_validate(decode(record.value))
        assert trajectory.session_id.encode() == key and trajectory.accepted is True
        assert dict(record.headers)["trajectory_id"] == trajectory.trajectory_id.encode()
        assert trajectory.provenance["events"].count == 5


def test_sessions_not_processed_before_a_crash_are_delivered_again_with_the_same_ids(
    topics: Topics, tmp_path: Path
) -> None:
    record_groups(topics, tmp_path / "spool", {"c": (1.0, 0.5, 0.25, 0.0)})
    worker = WorkerProcess(topics, tmp_path).start()

    async def crash_then_resume() -> tuple[list[str], list[str], list[str]]:
        feed = await TrajectoryFeed(
            topics.reader, group_id="t", prefix=topics.prefix, commit_interval_s=0
        ).start()
        first = await take(feed, 2)
        # The first item counts as processed once the second is asked for; the second does not.
        await feed._commit()
        await feed.stop(commit=False)  # a crash: nothing more committed
        async with TrajectoryFeed(topics.reader, group_id="t", prefix=topics.prefix) as again:
            rest = await take(again, 3)
            # Sessions processed before the crash may come again too (at least once): all
            # that comes before a session recorded now.
            record_groups(topics, tmp_path / "marker", {"marker": (1.0,)})
            while (item := (await take(again, 1))[0]).trajectory.session_id != "marker-0":
                rest.append(item)
        return (
            [i.id for i in first],
            [i.id for i in rest],
            [i.trajectory.session_id for i in first + rest],
        )

    try:
        first, rest, sessions = asyncio.run(crash_then_resume())
    finally:
        worker.stop()
    assert first[1] in rest  # in hand at the crash: delivered again, with the same trajectory id
    assert len(rest) in (3, 4) and len(set(rest)) == len(rest)
    assert sorted(set(sessions)) == ["c-0", "c-1", "c-2", "c-3"]


def test_feed_atropos_cli_sends_full_groups_and_keeps_unsent_sessions_for_the_next_run(
    topics: Topics, tmp_path: Path
) -> None:
    import signal
    import sys

    import httpx

    from rolltape.infra.kafka.groups import group_lags
    from rolltape.schemas import Role
    from tests.support.atropos_server import AtroposServer

    record_groups(topics, tmp_path / "spool", {"f": (1.0, 0.0), "lonely": (1.0,)})
    worker = WorkerProcess(topics, tmp_path).start()

    def feed(server: AtroposServer, *extra: str) -> tuple[subprocess.Popen[str], Output]:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rolltape.infra",
                "serve",
                "feed",
                "--url",
                server.url,
                *extra,
            ],
            env=topics.env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        return process, Output(process.stderr, "the feed's stderr")

    def latest(server: AtroposServer, sequences: int) -> dict:  # type: ignore[type-arg]
        return wait_until(  # type: ignore[no-any-return]
            lambda: httpx.get(f"{server.url}/latest_example", timeout=5).json(),
            lambda group: len(group.get("tokens") or ()) == sequences,
            what=f"a group of {sequences} to reach the Atropos server",
            every_s=0.5,
        )

    def lag() -> int | None:
        """How far the feed's group is behind the end of its topics (None: no commit yet)."""
        lags = asyncio.run(group_lags(topics.connection(Role.ADMIN), topics.prefix))
        return next((g.lag for g in lags if g.group == "rolltape-atropos"), None)

    def stop(running: tuple[subprocess.Popen[str], Output]) -> str:
        process, stderr = running
        process.send_signal(signal.SIGTERM)
        process.wait(60)
        err = stderr.whole()
        assert process.returncode == 0, err
        return err

    try:
        with AtroposServer() as server:
            server.register_trainer(batch_size=2)
            first = feed(server, "--group-size", "2")
            group = latest(server, 2)
            assert group["scores"] == [1.0, 0.0] and group["tokens"][1] == [11, 12, 21, 31, 2]
            first[1].wait_for("sent 1 group(s)")  # the feed took the answer: f-0, f-1 acknowledged
            assert "stopped: sent 1 group(s) scored by reward;" in stop(first)
            # "lonely" never filled a group of 2: it was not acknowledged, so it comes again.
            second = feed(server, "--group-size", "1", "--keep-equal-scores")
            lonely = latest(server, 1)
            assert lonely["scores"] == [1.0] and lonely["tokens"] == [[11, 12, 20, 30, 2]]
            # Committed to the end of the log: the feed has had (and acknowledged) every
            # session there is, so one it sent again would be counted by now.
            wait_until(
                lag,
                lambda behind: behind == 0,
                what="the feed's group to commit the end of every topic it reads",
                every_s=0.5,
            )
            assert "stopped: sent 1 group(s)" in stop(second)  # f-0 and f-1 were not sent again
    finally:
        worker.stop()


def test_feed_atropos_started_before_the_trainer_waits_for_it_and_loses_no_group(
    topics: Topics, tmp_path: Path
) -> None:
    """As Atropos's own environments: the feed registers and waits while the server answers
    "wait for trainer to start", posts nothing the trainer's registration would strand, then
    delivers once a trainer runs; its score is the sessions' one reward name (`correct`)."""
    import signal
    import sys

    import httpx

    from tests.support.atropos_server import AtroposServer

    with Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=tmp_path / "spool") as rec:
        for i, value in enumerate((1.0, 0.0)):
            with rec.session("count", session_id=f"c-{i}", group_id="c") as s:
                s.turn("user", "count", token_ids=[11, 12])
                s.turn("assistant", f"{i} {i}", token_ids=[20 + i, 30 + i, 2])
                s.reward(value, name="correct")
    worker = WorkerProcess(topics, tmp_path).start()
    try:
        with AtroposServer() as server:
            feed = subprocess.Popen(
                [sys.executable, "-m", "rolltape.infra", "serve", "feed", "--url", server.url,
                 "--group-size", "2"],
                env=topics.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            assert feed.stderr is not None
            first = feed.stderr.readline()
            assert "waiting for a trainer" in first and "wait for trainer to start" in first, first
            # The worker decides the sessions meanwhile, and the feed asks the server again
            # after that: it had its chance to send them, and nothing may have gone out.
            decided(topics, worker, 2)
            asked = server.requests("POST", "/register-env")
            wait_until(
                lambda: server.requests("POST", "/register-env"),
                lambda now: now > asked,
                what="the feed to ask to register again once the sessions were decided",
                every_s=0.2,
            )
            assert httpx.get(f"{server.url}/status", timeout=5).json()["queue_size"] == 0
            server.register_trainer(batch_size=2)
            batch = wait_until(server.batch, what="the trainer's first batch", every_s=0.5)
            feed.send_signal(signal.SIGTERM)
            _, rest = feed.communicate(timeout=60)
    finally:
        worker.stop()
    assert feed.returncode == 0, rest
    assert isinstance(batch, list) and len(batch) == 1, batch
    assert batch[0]["scores"] == [1.0, 0.0] and batch[0]["env_id"] == 0
    assert "stopped: sent 1 group(s) scored by reward:correct;" in rest
    assert "sent 1 group(s); 0 session(s) waiting" in rest  # shown while it ran


def test_feed_atropos_without_score_refuses_when_sessions_carry_several_reward_names(
    topics: Topics, tmp_path: Path
) -> None:
    import sys

    spool = tmp_path / "spool"
    with (
        Recorder(topics.writer, topic_prefix=topics.prefix, spool_dir=spool) as rec,
        rec.session("q", session_id="two-rewards") as s,
    ):
        s.turn("assistant", "a")
        s.reward(1.0, name="correct")
        s.reward(0.5, name="style")
    done = subprocess.run(
        [sys.executable, "-m", "rolltape.infra", "serve", "feed", "--url", "http://127.0.0.1:9",
         "--group-size", "2"],
        env=topics.env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "correct (1), style (1)" in done.stderr and "--score reward:NAME" in done.stderr
