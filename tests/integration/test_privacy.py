"""Sessions that name a subject, on a real broker with ACLs: content sealed in the log, data keys
on the keys topic that only the content-reading roles may read, opened with the key-encryption
key, and unreadable once a key's tombstone is read, while every chain still verifies."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition

from rolltape.infra.commands.rotate_kek import rotate_kek
from rolltape.infra.kafka.keyring import KeysFollower, read_keyring
from rolltape.infra.kafka.readback import read_records
from rolltape.infra.keys import judge_key, key_encryption_key
from rolltape.producers import Recorder
from rolltape.projections import MANIFEST, TrajectoryFeed
from rolltape.schemas import DataKeyRecord, Erasure, Role, Stream, read_event, topic_name
from rolltape.schemas.clients import LogReader, partitions_of
from rolltape.schemas.privacy import ContentKey, KeyEncryptionKey, Keyring
from rolltape.schemas.trust import erasure_signed_by
from tests.support.kek_vault import Vault
from tests.support.waiting import wait_until_async

from .conftest import Cluster, Topics
from .workers import RawRecord, WorkerProcess, payloads, read_all, wait_for

pytestmark = pytest.mark.integration
CLI = [sys.executable, "-m", "rolltape.infra"]


def _kek_file(folder: Path) -> tuple[KeyEncryptionKey, Path]:
    """A new KEK, and the 0600 file that holds it (ROLLTAPE_KEK_FILE)."""
    kek = KeyEncryptionKey.generate()
    path = folder / "kek.bin"
    path.write_bytes(kek.secret)
    path.chmod(0o600)
    return kek, path


def _record(topics: Topics, kek: KeyEncryptionKey, tmp_path: Path) -> None:
    recorder = Recorder(
        topics.connection(Role.AGENT),
        topic_prefix=topics.prefix,
        spool_dir=tmp_path / "spool",
        kek=kek,
    )
    for subject, text in (("user-a", "alice@example.com lives here"), ("user-b", "bob's note")):
        with recorder.session(f"help {subject}", session_id=f"s-{subject}", subject=subject) as s:
            s.turn("user", text)
            s.tool_result(s.tool_call("lookup", {"who": subject}), f"found {subject}")
            s.turn("assistant", f"noted for {subject}")
    recorder.close(30)


def _opened(topics: Topics, keyring: Keyring) -> dict[str, list[str]]:
    """Each session's turn contents as the keyring opens them (or how it could not)."""

    async def read() -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        async for raw in read_records(topics.reader, [Stream.EVENTS], prefix=topics.prefix):
            event = read_event(raw.value)
            opened, access = keyring.open_event(event)
            if event.type == "turn":
                text = opened.body.content if opened is not None else access  # type: ignore[attr-defined]
                if event.body.role == "user":  # type: ignore[attr-defined]
                    out.setdefault(event.session_id, []).append(text)
        return out

    return asyncio.run(read())


async def _feed_keys(topics: Topics, keyring: Keyring, *, compacted: bool = False) -> None:
    """The keys topic into `keyring`; `compacted`: only each key's last record, as the topic
    holds once compaction has run (within about two hours)."""
    records = [r async for r in read_records(topics.reader, [Stream.KEYS], prefix=topics.prefix)]
    if compacted:
        records = list({r.key: r for r in records}.values())
    for r in records:
        keyring.add(r.key, r.value)


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=180)


def _folder(out: Path) -> dict[str, Any]:
    """An export's manifest counts, and every byte of its folder as text."""
    manifest = json.loads((out / MANIFEST).read_text())
    return {
        "skipped": manifest["skipped"],
        "exported": manifest["sessions_exported"],
        "text": "".join(p.read_text() for p in sorted(out.rglob("*.jsonl"))),
    }


def _export(topics: Topics, out: Path, kek_file: Path, *options: str) -> dict[str, Any]:
    """`rolltape dataset export` as a person runs it; the manifest, and every line's text."""
    env = {**topics.env(), "ROLLTAPE_KEK_FILE": str(kek_file)}
    done = _run(env, "dataset", "export", "-f", "sharegpt", "-o", str(out), *options)
    assert done.returncode == 0, done.stdout + done.stderr
    return _folder(out)


def _trajectories(topics: Topics) -> dict[bytes, bytes | None]:
    """The trajectories topic as compaction will leave it: the last value per key."""
    return {r.key or b"": r.value for r in read_all(topics, (Stream.TRAJECTORIES,))}


def test_subject_sessions__sealed_in_the_log_opened_by_readers_unreadable_once_erased(
    cluster: Cluster, topics: Topics, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if cluster.managed is None:
        pytest.skip("needs rolltape's managed broker (its principals and ACLs)")
    kek, kek_file = _kek_file(tmp_path)
    settings = topics.settings.model_copy(update={"kek_file": kek_file})
    projector = subprocess.Popen(  # follows the keys topic: opens, and tombstones the erased
        [*CLI, "serve", "projector"],
        env={**topics.env(), "ROLLTAPE_KEK_FILE": str(kek_file)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    request.addfinalizer(projector.kill)
    # Filters (on the opened content) and checkpoints, for the evidence.
    worker = WorkerProcess(topics, tmp_path, ROLLTAPE_KEK_FILE=str(kek_file)).start()
    try:
        _record(topics, kek, tmp_path)
        heads = {(r.session_id, r.head_hash) for r in topics.verify().reports()}

        def checkpointed(records: list[RawRecord]) -> bool:
            leaves = {
                (leaf["session_id"], leaf["hash"])
                for cp in payloads(records, "checkpoint")
                for leaf in cp["leaves"]
            }
            return {h for h in heads if h[0].startswith("s-")} <= leaves and len(
                payloads(records, "filter_outcome")
            ) == 2

        wait_for(topics, checkpointed, worker=worker)
    finally:
        worker.stop()
    wait_for(topics, lambda rs: len(rs) >= 2, streams=(Stream.TRAJECTORIES,))
    published = _trajectories(topics)
    assert b"alice@example.com lives here" in (published[b"s-user-a"] or b"")
    assert b"bob's note" in (published[b"s-user-b"] or b"")

    async def everything_on(stream: Stream) -> bytes:
        return b"".join(
            [
                r.value or b""
                async for r in read_records(topics.reader, [stream], prefix=topics.prefix)
            ]
        )

    assert b"alice@example.com" not in asyncio.run(everything_on(Stream.EVENTS))
    assert b"alice@example.com" not in asyncio.run(everything_on(Stream.KEYS))

    async def agent_reads_keys() -> bool:
        consumer = topics.connection(Role.AGENT).consumer(enable_auto_commit=False)
        await consumer.start()
        try:
            parts = [
                TopicPartition(topic_name(Stream.KEYS, topics.prefix), p)
                for p in range(topics.settings.partitions)
            ]
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)
            batch = await consumer.getmany(*parts, timeout_ms=4000)
            return any(batch.values())
        except Exception:
            return False
        finally:
            await consumer.stop()

    assert not asyncio.run(agent_reads_keys())  # an agent writes its keys, reads no one's

    keyring = asyncio.run(read_keyring(topics.reader, settings))
    assert keyring.subjects == {"s-user-a": "user-a", "s-user-b": "user-b"}
    assert _opened(topics, keyring) == {
        "s-user-a": ["alice@example.com lives here"],
        "s-user-b": ["bob's note"],
    }

    exported = _export(topics, tmp_path / "before", kek_file)
    assert exported["exported"] == 2 and "alice@example.com lives here" in exported["text"]
    # Evidence carries the sealed envelopes and the keys that open them: it re-folds offline.
    _export(topics, tmp_path / "evidence", kek_file, "--evidence")
    public_pem = tmp_path / "judge.pub.pem"
    public_pem.write_bytes(judge_key(topics.settings).public_pem())
    offline = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "COLUMNS": "200"}
    checked = _run(
        offline, "dataset", "verify", str(tmp_path / "evidence"), "--public-key", str(public_pem)
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    without = _export(topics, tmp_path / "no-kek", tmp_path / "absent.bin")
    assert without["exported"] == 0 and without["skipped"].get("key_unavailable") == 2

    # `rolltape privacy erase` as the custodian runs it: tombstones, and a signed receipt.
    env = {**topics.env(), "ROLLTAPE_KEK_FILE": str(kek_file)}
    erased = subprocess.run(
        [*CLI, "privacy", "erase", "--subject", "user-a", "--reason", "GDPR art. 17 request"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert erased.returncode == 0, erased.stdout + erased.stderr
    receipt = json.loads(erased.stdout)
    erasure = Erasure.model_validate(receipt["erasure"])
    assert erasure.sessions == ("s-user-a",) and len(erasure.keys) == 1
    assert receipt["subject"] == "user-a" and "subject" not in receipt["erasure"]
    public = judge_key(topics.settings).private_key().public_key()
    assert erasure_signed_by(public, erasure)
    assert not erasure_signed_by(public, erasure.model_copy(update={"sessions": ("s-user-b",)}))
    again = subprocess.run(
        [*CLI, "privacy", "erase", "--subject", "user-a"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert again.returncode == 2 and "no live data key for subject 'user-a'" in again.stderr

    keyring = asyncio.run(read_keyring(topics.reader, settings))
    assert keyring.subjects == {"s-user-b": "user-b"}
    assert _opened(topics, keyring) == {"s-user-a": ["erased"], "s-user-b": ["bob's note"]}
    after = _export(topics, tmp_path / "after", kek_file)
    assert after["exported"] == 1 and after["skipped"].get("erased") == 1
    assert "alice" not in after["text"] and "bob's note" in after["text"]
    report = topics.verify()
    chains = {(r.stream, r.session_id): r for r in report.reports()}
    assert chains[("erasures", "erasures")].ok  # the receipt is chained like any record
    assert all(r.ok for r in chains.values())
    assert all(r.ended for (stream, _), r in chains.items() if stream == "events")

    tailed = _run(env, "log", "tail", "--no-follow", "--from-beginning", "--stream", "events")
    lines = [line for line in tailed.stdout.splitlines() if " user: " in line]
    assert tailed.returncode == 0 and len(lines) == 2, tailed.stdout + tailed.stderr
    assert sum("[erased] user: " in line for line in lines) == 1
    assert sum("user: bob's note" in line for line in lines) == 1
    page = tmp_path / "report.html"
    shown = _run(env, "report", "--session", "s-user-b", "-o", str(page))
    assert shown.returncode == 0 and "noted for user-b" in page.read_text(), shown.stderr
    refused = _run(env, "report", "--session", "s-user-a", "-o", str(page))
    assert refused.returncode == 2 and "cannot be opened here" in refused.stderr

    # The projector tombstones the erased session's trajectory; a feed leaves it out.
    wait_for(
        topics,
        lambda rs: any(r.key == b"s-user-a" and r.value is None for r in rs),
        streams=(Stream.TRAJECTORIES,),
    )
    projector.send_signal(signal.SIGTERM)
    _, err = projector.communicate(timeout=60)
    assert projector.returncode == 0 and "published 2 trajectories" in err, err
    assert _trajectories(topics)[b"s-user-a"] is None

    async def feed_after_erasure() -> tuple[list[str], dict[str, int]]:
        async with (
            KeysFollower(topics.reader, topics.prefix, kek) as keys,
            TrajectoryFeed(
                topics.reader, group_id="after-erasure", prefix=topics.prefix, keys=keys
            ) as feed,
        ):
            item = await asyncio.wait_for(feed.__anext__(), 60)
            # The feed reads on until it has counted the erased session out: nothing else comes.
            reading = asyncio.ensure_future(feed.__anext__())

            def another() -> str | None:
                if not reading.done():
                    return None
                failed = reading.exception()
                return repr(failed) if failed else f"another item: {reading.result().id}"

            try:
                await wait_until_async(
                    lambda: dict(feed.skipped),
                    lambda skipped: skipped.get("erased", 0) >= 1,
                    what="the feed to leave the erased session out",
                    abort=another,
                )
            finally:
                reading.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await reading  # its outcome, if any, is what `another` reported
            return [m.content for m in item.trajectory.messages], dict(feed.skipped)

    said, skipped = asyncio.run(feed_after_erasure())
    assert "bob's note" in said and skipped == {"erased": 1}

    stranger = Keyring(KeyEncryptionKey.generate())  # another cluster's KEK opens nothing
    asyncio.run(_feed_keys(topics, stranger))
    assert _opened(topics, stranger)["s-user-b"] == ["key unavailable"]

    # `rolltape privacy rotate-kek`: live keys re-wrapped, the old KEK retired; a copy of it (or of
    # a key wrapped under it) opens nothing from then on.
    rotated = subprocess.run(
        [*CLI, "privacy", "rotate-kek"], env=env, capture_output=True, text=True, timeout=180
    )
    assert rotated.returncode == 0, rotated.stdout + rotated.stderr
    assert "1 data keys re-wrapped" in rotated.stdout
    assert kek_file.read_bytes() != kek.secret and kek_file.stat().st_mode & 0o777 == 0o600
    assert not kek_file.with_name("kek.bin.next").exists()
    keyring = asyncio.run(read_keyring(topics.reader, settings))
    assert _opened(topics, keyring) == {"s-user-a": ["erased"], "s-user-b": ["bob's note"]}
    stale = Keyring(kek)  # the old KEK, reading the topic as compaction will leave it
    asyncio.run(_feed_keys(topics, stale, compacted=True))
    assert _opened(topics, stale)["s-user-b"] == ["key unavailable"]

    # A rotation that read a key before its erasure writes it again after the tombstone; the
    # rotation's last step tombstones it again (the race, written here by hand).
    session_id, _, key_id = erasure.keys[0].partition("/")
    revived = DataKeyRecord(
        session_id=session_id,
        subject="user-a",
        key_id=key_id,
        wrapped=KeyEncryptionKey(kek_file.read_bytes()).wrap(ContentKey.generate(), session_id),
        ts_ns=1,
    )

    async def revive() -> None:
        admin = topics.connection(Role.ADMIN)
        async with admin.started(admin.chain_producer(linger_ms=0), "reviving") as producer:
            await producer.send_and_wait(
                topic_name(Stream.KEYS, topics.prefix),
                revived.value(),
                key=erasure.keys[0].encode(),
            )

    asyncio.run(revive())
    again = _run(env, "privacy", "rotate-kek")
    assert again.returncode == 0 and "1 data keys erased while the rotation ran" in again.stdout
    keyring = asyncio.run(read_keyring(topics.reader, settings))
    assert keyring.subjects == {"s-user-b": "user-b"}

    # Exports written before the erasure: named by the signed erasures file, purged by it.
    erasures = tmp_path / "erasures.jsonl"
    listed = _run(env, "privacy", "export-erasures", str(erasures))
    assert listed.returncode == 0 and "1 erasure record(s)" in listed.stdout, listed.stderr
    verify = ["dataset", "verify", str(tmp_path / "evidence"), "--public-key", str(public_pem)]
    named = _run(offline, *verify, "--erasures", str(erasures))
    assert named.returncode == 1
    assert (
        "sharegpt-00000.jsonl:" in named.stdout and "folded from s-user-a: erased" in named.stdout
    )
    for folder in ("evidence", "before"):
        purged = _run(
            offline, "dataset", "purge", str(tmp_path / folder), "--erasures", str(erasures),
            "--public-key", str(public_pem),
        )  # fmt: skip
        assert purged.returncode == 0 and "purged 1 erased session(s)" in purged.stdout
        left = _folder(tmp_path / folder)
        assert left["exported"] == 1 and left["skipped"].get("erased") == 1
        assert "alice" not in left["text"] and "bob's note" in left["text"]
    clean = _run(offline, *verify, "--erasures", str(erasures))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    erasures.write_text(erasures.read_text().replace("GDPR", "gdpr"))
    forged = _run(offline, *verify, "--erasures", str(erasures))
    assert forged.returncode == 2 and "not signed by this public key" in forged.stderr


def test_a_subject_session_resumed_by_another_recorder_goes_on_sealed_under_a_key_of_its_own(
    cluster: Cluster, topics: Topics, tmp_path: Path
) -> None:
    if cluster.managed is None:
        pytest.skip("needs rolltape's managed broker (its principals and ACLs)")
    kek = KeyEncryptionKey.generate()

    def recorder(name: str) -> Recorder:
        return Recorder(
            topics.connection(Role.AGENT),
            topic_prefix=topics.prefix,
            spool_dir=tmp_path / name,
            kek=kek,
        )

    first = recorder("first")
    session = first.session("help", session_id="s-resumed", subject="user-r")
    session.turn("user", "before the restart: card 4242")
    first.close(30)  # the process ends without ending the session

    second = recorder("second")
    with second.session("help", session_id="s-resumed", subject="user-r", resume=True) as again:
        again.turn("user", "after the restart: card 4343")
    second.close(30)

    keyring = Keyring(kek)
    asyncio.run(_feed_keys(topics, keyring))
    assert [r.subject for r in keyring.records.values()] == ["user-r", "user-r"]  # two keys
    assert _opened(topics, keyring)["s-resumed"] == [
        "before the restart: card 4242",
        "after the restart: card 4343",
    ]

    async def events() -> bytes:
        return b"".join(
            [
                r.value or b""
                async for r in read_records(topics.reader, [Stream.EVENTS], prefix=topics.prefix)
            ]
        )

    assert b"card 4" not in asyncio.run(events())
    assert all(r.ok for r in topics.verify().reports())


def _all_bytes_of(topics: Topics, names: list[str]) -> bytes:
    """Every record value of the named topics, read as the admin."""

    async def read() -> bytes:
        admin = topics.connection(Role.ADMIN)
        parts = await partitions_of(admin, names)
        assert {tp.topic for tp in parts} == set(names)
        async with LogReader(admin) as reader:
            reader.assign(parts)
            await reader.seek_to_beginning()
            return b"".join([m.value or b"" async for batch in reader.read_to_end() for m in batch])

    return asyncio.run(read())


def _topic_names(topics: Topics, starting: tuple[str, ...]) -> list[str]:
    async def names() -> list[str]:
        admin = topics.connection(Role.ADMIN)
        consumer = admin.consumer(enable_auto_commit=False)
        async with admin.started(consumer, "listing topics") as c:
            return sorted(t for t in await c.topics() if t.startswith(starting))

    return asyncio.run(names())


def _judged_outcomes(records: list[RawRecord]) -> dict[str, bool]:
    """Whether the filters accepted each judged session (they read its opened content)."""
    events = [read_event(r.value) for r in records]
    return {
        e.session_id: e.payload["accepted"]
        for e in events
        if e.type == "filter_outcome" and e.session_id.startswith("s-judged-")
    }


def test_the_worker_judges_subject_sessions_on_their_content_and_erasure_reaches_its_verdicts(
    cluster: Cluster, topics: Topics, tmp_path: Path
) -> None:
    if cluster.managed is None:
        pytest.skip("needs rolltape's managed broker (its principals and ACLs)")
    from tests.support.openai_server import OpenAICompatibleServer, grade_by_answer

    kek, kek_file = _kek_file(tmp_path)
    recorder = Recorder(
        topics.connection(Role.AGENT),
        topic_prefix=topics.prefix,
        spool_dir=tmp_path / "spool",
        kek=kek,
    )
    for sid, subject, answer in (("s-judged-a", "user-a", "4"), ("s-judged-b", "user-b", "5")):
        with recorder.session("2+2", session_id=sid, subject=subject) as s:
            s.turn("user", f"2+2? my card is 4111-{subject}")
            s.turn("assistant", answer)
            s.reward(1.0 if answer == "4" else 0.0)
    recorder.close(30)
    with OpenAICompatibleServer(grade_by_answer) as server:
        env = {
            "ROLLTAPE_KEK_FILE": str(kek_file),
            "ROLLTAPE_LLM_JUDGES": '["answer_quality"]',
            "ROLLTAPE_REWARDS": '["final_reward"]',
            "ROLLTAPE_MODELS": json.dumps({"grader": {"base_url": server.base_url, "model": "g"}}),
        }
        worker = WorkerProcess(topics, tmp_path, **env).start()
        try:
            wait_for(
                topics,
                lambda rs: (
                    sum(p["judge"] == "llm:answer_quality" for p in payloads(rs, "verdict")) == 2
                    and _judged_outcomes(rs) == {"s-judged-a": True, "s-judged-b": True}
                ),
                worker=worker,
            )
        finally:
            worker.stop()
        # The judge read the content (it was opened): the right answer got the right grade.
        prompts = " ".join(r["messages"][-1]["content"] for r in server.requests)
        assert "my card is 4111-user-a" in prompts and "ASSISTANT: 4" in prompts

        # Nothing of it in clear on any topic: raw, derived, the worker's internal topics and
        # its state's changelog, nor the judge's own conversations (sealed under the subject).
        group = f"{topics.prefix}-worker"
        names = _topic_names(topics, (f"{topics.prefix}.", group))
        assert any("judge-requests" in n for n in names) and any("changelog" in n for n in names)
        everything = _all_bytes_of(topics, names)
        # The card as written: "4111" alone also turns up by chance in hashes, ids and times.
        assert b"4111-user" not in everything and b"my card" not in everything
        assert b"2+2 is 4" not in everything

        keyring = asyncio.run(read_keyring(topics.reader, topics.settings.model_copy(
            update={"kek_file": kek_file})))  # fmt: skip
        judge_keys = [r for r in keyring.records.values() if r.session_id.startswith("judge.")]
        assert sorted((r.subject, r.about) for r in judge_keys) == [
            ("user-a", "s-judged-a"),
            ("user-b", "s-judged-b"),
        ]
        verdicts = {
            (e.session_id, e.body.judge): keyring.open_event(e)  # type: ignore[attr-defined]
            for r in read_all(topics, (Stream.VERDICTS,))
            if (e := read_event(r.value)).type == "verdict"
        }
        opened, access = verdicts[("s-judged-a", "llm:answer_quality")]
        assert access == "opened" and opened is not None
        assert opened.body.scores["score"] == 1.0  # type: ignore[attr-defined]
        assert "2+2 is 4" in json.dumps(opened.payload)
        reward, _ = verdicts[("s-judged-b", "reward:final_reward")]
        assert reward is not None and reward.body.scores == {"reward": 0.0}  # type: ignore[attr-defined]

        # Erasing the session erases its judge's conversation with it, and the verdicts' words.
        cli_env = {**topics.env(), **env, "COLUMNS": "200"}
        erased = _run(cli_env, "privacy", "erase", "--session", "s-judged-a")
        assert erased.returncode == 0, erased.stdout + erased.stderr
        sessions = json.loads(erased.stdout)["erasure"]["sessions"]
        assert sessions[0].startswith("judge.answer_quality.") and sessions[1] == "s-judged-a"
        keyring = asyncio.run(read_keyring(topics.reader, topics.settings.model_copy(
            update={"kek_file": kek_file})))  # fmt: skip
        event = next(
            e
            for r in read_all(topics, (Stream.VERDICTS,))
            if (e := read_event(r.value)).session_id == "s-judged-a"
            and e.type == "verdict"
            and e.payload["judge"] == "llm:answer_quality"
        )
        assert keyring.open_event(event) == (None, "erased")

        # A replay re-judges what it can open and leaves the erased sessions out.
        asked = len(server.requests)
        replayed = _run(cli_env, "log", "replay", "--judge-version", "v2")
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert "left out (content not opened, nothing written): 2 erased" in replayed.stdout
        assert len(server.requests) == asked + 1  # s-judged-b only
    written = {(e.stream, e.session_id) for r in read_all(topics, (Stream.VERDICTS,))
               if (e := read_event(r.value)).stream == "verdicts@v2"}  # fmt: skip
    assert ("verdicts@v2", "s-judged-b") in written
    assert not any(sid == "s-judged-a" for _, sid in written)
    assert all(r.ok for r in topics.verify().reports())


VAULT = Vault(os.urandom(32))
"""The key service of the rotation test below (ROLLTAPE_KEK_PROVIDER names it)."""


def test_a_kek_a_provider_serves__is_rotated_through_it(
    cluster: Cluster, topics: Topics, tmp_path: Path
) -> None:
    if cluster.managed is None:
        pytest.skip("needs rolltape's managed broker (its principals and ACLs)")
    settings = topics.settings.model_copy(
        update={"kek_provider": "tests.integration.test_privacy:VAULT"}
    )
    old = key_encryption_key(settings)
    recorder = Recorder(
        topics.connection(Role.AGENT),
        topic_prefix=topics.prefix,
        spool_dir=tmp_path / "spool",
        kek=lambda: key_encryption_key(settings),  # as open_recorder builds it
    )
    with recorder.session("help", session_id="s-vaulted", subject="user-v") as s:
        s.turn("user", "kept under the vault's key")
    recorder.close(30)

    done = asyncio.run(rotate_kek(topics.connection(Role.ADMIN), settings))
    assert (done.old_kek_id, done.rewrapped, done.foreign) == (old.kek_id, 1, 0)
    new = key_encryption_key(settings)
    assert new.kek_id == done.new_kek_id != old.kek_id
    assert VAULT.destroyed == [old.secret] and VAULT.retired() is None
    keyring = asyncio.run(read_keyring(topics.reader, settings))  # the vault's current KEK
    assert _opened(topics, keyring)["s-vaulted"] == ["kept under the vault's key"]
    stale = Keyring(old)
    asyncio.run(_feed_keys(topics, stale, compacted=True))
    assert _opened(topics, stale)["s-vaulted"] == ["key unavailable"]
