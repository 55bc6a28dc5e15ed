"""Sessions that name a subject: their content is sealed under a data key of their own before it
is chained, and the key leaves the recorder only wrapped, on the keys topic, ahead of it."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from rolltape.producers import EventsRejectedError, Recorder
from rolltape.producers._spool import Spool
from rolltape.schemas import PAYLOAD_MODELS, ChainVerifier, DataKeyRecord, Stream, topic_name
from rolltape.schemas.privacy import KeyEncryptionKey, open_content

KEK = KeyEncryptionKey(b"k" * 32)


def spooled(spool_dir: Path) -> list[tuple[str, bytes, bytes]]:
    spool = Spool(spool_dir, 1 << 30)
    out: list[tuple[str, bytes, bytes]] = []
    while not spool.empty:
        batch, token = spool.read(1000)
        out += batch
        spool.commit(token)
    spool.close()
    return out


@pytest.mark.parametrize("senders", [1, 2])
def test_a_subject_sessions_content_is_sealed_and_its_key_leaves_only_wrapped(
    tmp_path: Path, senders: int
) -> None:
    recorder = Recorder(None, spool_dir=tmp_path, spool_after_s=0.0, senders=senders, kek=KEK)
    with recorder.session("help jane@example.com", session_id="subj-1", subject="user-7") as s:
        s.turn("user", "my card is 4111 1111 1111 1111", prompt_tokens=9)
        call = s.tool_call("lookup", {"card": "4111"})
        s.tool_result(call, "card found")
    with recorder.session("no subject", session_id="plain-1") as s:
        s.turn("user", "hello in clear")
    recorder.close(10)
    records = spooled(tmp_path)

    keys = [r for r in records if r[0] == topic_name(Stream.KEYS)]
    mine = [r for r in records if r[1].startswith(b"subj-1")]
    assert len(keys) == 1 and mine[0] == keys[0]  # the key goes ahead of the content
    entry = DataKeyRecord.model_validate_json(keys[0][2])
    assert (entry.session_id, entry.subject) == ("subj-1", "user-7")
    assert keys[0][1] == f"subj-1/{entry.key_id}".encode()
    key = KEK.unwrap(entry.wrapped, entry.key_id, "subj-1")
    everything = b"".join(value for _, _, value in records)
    assert key.secret not in everything
    for clear in (b"jane@example.com", b"4111 1111 1111 1111", b'"4111"', b"card found"):
        assert clear not in everything
    assert b"hello in clear" in everything

    events = [orjson.loads(v) for t, _, v in records if t == topic_name(Stream.EVENTS)]
    subject = [e for e in events if e["session_id"] == "subj-1"]
    opened = {
        e["type"]: open_content(
            e["type"], e["payload"], key, stream="events", session_id="subj-1", seq=e["seq"]
        )
        for e in subject
    }
    assert opened["session_started"]["task"] == "help jane@example.com"
    assert opened["turn"]["content"] == "my card is 4111 1111 1111 1111"
    assert subject[1]["payload"]["prompt_tokens"] == 9  # counts stay in clear
    assert opened["tool_call"]["arguments"] == {"card": "4111"}
    assert opened["tool_result"]["content"] == "card found"
    for e in subject:
        PAYLOAD_MODELS[e["type"]].model_validate(e["payload"])
    verifier = ChainVerifier()
    for topic, _, value in records:
        if topic == topic_name(Stream.EVENTS):
            verifier.add(value)
    assert all(r.ok and r.ended for r in verifier.reports())


def test_a_subject_session_without_a_kek_is_refused_before_anything_is_recorded(
    tmp_path: Path,
) -> None:
    recorder = Recorder(None, spool_dir=tmp_path, spool_after_s=0.0)
    with pytest.raises(ValueError, match="needs the key-encryption key"):
        recorder.session("t", subject="user-7")
    recorder.close(5)
    assert spooled(tmp_path) == []


def test_the_kek_is_read_at_each_subject_session_so_a_rotated_one_is_used(
    tmp_path: Path,
) -> None:
    keks = [KEK, KeyEncryptionKey.generate()]
    reads: list[str] = []

    def read_kek() -> KeyEncryptionKey:
        reads.append(keks[0].kek_id)
        return keks[0]

    recorder = Recorder(None, spool_dir=tmp_path, spool_after_s=0.0, kek=read_kek)
    recorder.session("no subject").end()
    assert reads == []
    recorder.session("a", subject="u1").end()
    keks.pop(0)  # `rolltape privacy rotate-kek` replaced the file
    recorder.session("b", subject="u2").end()
    recorder.close(5)
    assert reads == [KEK.kek_id, keks[0].kek_id]


def test_a_refused_event_of_a_subject_session_is_kept_without_its_content(
    tmp_path: Path,
) -> None:
    recorder = Recorder(None, spool_dir=tmp_path, spool_after_s=0.0, kek=KEK)
    with recorder.session("t", session_id="subj-9", subject="user-7") as s:
        s.turn("user", "jane@example.com", token_ids=["jane"])  # type: ignore[list-item]
    with pytest.raises(EventsRejectedError, match=r"token_ids\.0: Input should be a valid") as e:
        recorder.close(5)
    assert e.value.path is not None
    kept = e.value.path.read_text()
    assert "jane" not in kept and "content withheld" in kept and '"role":"user"' in kept
