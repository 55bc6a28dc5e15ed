"""What a reader holds once the keys topic carries a data key re-wrapped under a new KEK."""

from __future__ import annotations

from rolltape.schemas import DataKeyRecord
from rolltape.schemas.privacy import ContentKey, KeyEncryptionKey, Keyring


def _record(kek: KeyEncryptionKey, key: ContentKey, session_id: str = "s-1") -> DataKeyRecord:
    return DataKeyRecord(
        session_id=session_id,
        subject="user-1",
        key_id=key.key_id,
        wrapped=kek.wrap(key, session_id),
        ts_ns=1,
    )


def test_a_data_key_record_names_the_kek_it_is_wrapped_under() -> None:
    kek, key = KeyEncryptionKey.generate(), ContentKey.generate()
    assert _record(kek, key).kek_id == kek.kek_id
    assert _record(kek, key).model_copy(update={"wrapped": "not-a-wrap"}).kek_id == ""


def test_a_re_wrapped_key_opens_with_the_new_kek_and_stays_with_readers_holding_it() -> None:
    old, new, key = KeyEncryptionKey.generate(), KeyEncryptionKey.generate(), ContentKey.generate()
    first, rewrapped = _record(old, key), _record(new, key)
    record_key = f"s-1/{key.key_id}".encode()

    holder_of_new = Keyring(new)
    for record in (first, rewrapped):
        holder_of_new.add(record_key, record.value())
    assert holder_of_new.access("s-1", key.key_id) == "opened"

    # A reader holding the old KEK keeps the key it unwrapped (the same key); one that reads
    # the topic as compaction leaves it (the later record only) opens nothing with it.
    running = Keyring(old)
    running.add(record_key, first.value())
    running.add(record_key, rewrapped.value())
    assert running.access("s-1", key.key_id) == "opened" and running.unreadable == 1
    assert running.records[("s-1", key.key_id)] == rewrapped
    compacted = Keyring(old)
    compacted.add(record_key, rewrapped.value())
    assert compacted.access("s-1", key.key_id) == "key unavailable"
    compacted.use_kek(new)  # it reads the new KEK file
    assert compacted.access("s-1", key.key_id) == "opened"
