"""The record batches the native core writes are the bytes aiokafka's own builder writes for the
same records, one timestamp and producer state: the same records taken per batch, the same
header, the same CRC-32C. What it does not take (a key that is not bytes) goes to the client's
builder, as `fill_batch` says."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from rolltape.schemas import _accel
from rolltape.schemas.clients import fill_batch
from rolltape.schemas.clients._batches import RecordBatch

pytestmark = pytest.mark.skipif(_accel.native is None, reason="the native core is not built here")

maybe_bytes = st.none() | st.binary(max_size=300)
headers = st.none() | st.lists(st.tuples(st.text(max_size=12), maybe_bytes), max_size=3).map(
    lambda pairs: pairs or None
)
records = st.lists(
    st.tuples(st.just("t"), maybe_bytes, maybe_bytes)
    | st.tuples(st.just("t"), maybe_bytes, maybe_bytes, headers),
    min_size=1,
    max_size=40,
)


def client_batches(
    given: list[Any], limit: int, timestamp_ms: int, state: tuple[int, int, int], txn: bool
) -> list[bytes]:
    """aiokafka's builder, record by record, as it fills batches for `send`."""
    out: list[bytes] = []
    start = 0
    while start < len(given):
        builder = DefaultRecordBatchBuilder(2, 0, int(txn), *state, limit)
        end = start
        while end < len(given):
            record = given[end]
            headers = (record[3] if len(record) > 3 else None) or []
            if builder.append(end - start, timestamp_ms, record[1], record[2], headers) is None:
                break
            end += 1
        out.append(bytes(builder.build()))
        start = end
    return out


def native_batches(
    given: list[Any], limit: int, timestamp_ms: int, state: tuple[int, int, int], txn: bool
) -> list[bytes]:
    assert _accel.native is not None
    out: list[bytes] = []
    start = 0
    while start < len(given):
        fit = _accel.native.batch_fit(given, start, limit)
        assert fit is not None
        end, size = fit
        built = _accel.native.record_batch(given[start:end], size, timestamp_ms, *state, txn)
        assert built is not None and len(built) == size
        out.append(built)
        start = end
    return out


@settings(max_examples=300, deadline=None)
@given(
    records,
    st.integers(min_value=61, max_value=4000),
    st.integers(min_value=0, max_value=2**41),
    st.tuples(
        st.integers(min_value=-1, max_value=2**40),
        st.integers(min_value=-1, max_value=32_000),
        st.integers(min_value=0, max_value=2**31 - 1),
    ),
    st.booleans(),
)
def test_native_batches_are_the_clients_bytes(
    given: list[Any], limit: int, timestamp_ms: int, state: tuple[int, int, int], txn: bool
) -> None:
    assert native_batches(given, limit, timestamp_ms, state, txn) == client_batches(
        given, limit, timestamp_ms, state, txn
    )


def test_a_native_batch_reads_back_with_the_clients_reader() -> None:
    given = [("t", b"session-1", b'{"seq":0}'), ("t", None, b"v", [("h", b"x"), ("n", None)])]
    assert _accel.native is not None
    fit = _accel.native.batch_fit(given, 0, 1_000_000)
    assert fit is not None
    built = _accel.native.record_batch(given, fit[1], 1_700_000_000_000, 7, 1, 42, False)
    assert built is not None
    batch = DefaultRecordBatch(built)
    assert batch.validate_crc()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 1, 42)
    read = [(r.key, r.value, list(r.headers)) for r in batch]
    assert read == [(b"session-1", b'{"seq":0}', []), (None, b"v", [("h", b"x"), ("n", None)])]


@pytest.mark.parametrize(
    "record",
    [
        ("t", "a str key", b"v"),
        ("t", b"k", bytearray(b"v")),
        ("t", b"k", b"v", [("h", "a str value")]),
        ("t", b"k", b"v", [(b"bytes name", b"x")]),
        ["t", b"k", b"v"],
    ],
)
def test_records_the_native_core_does_not_take_go_to_the_clients_builder(record: Any) -> None:
    assert _accel.native is not None
    assert _accel.native.batch_fit([("t", b"k", b"v"), record], 0, 1_000_000) is None


def fill_all(given: list[Any], **settings: Any) -> list[tuple[Any, int]]:
    """(batch, records taken) for each batch fill_batch makes of `given`, with a producer of
    these settings that never connects."""

    async def fill() -> list[tuple[Any, int]]:
        producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", **settings)
        out, start = [], 0
        try:
            while start < len(given):
                batch, end = fill_batch(producer, given, start)
                out.append((batch, end - start))
                start = end
        finally:
            await producer.stop()
        return out

    return asyncio.run(fill())


def test_fill_batch_takes_the_producers_batch_size_and_the_first_record_whatever_its_size() -> None:
    given = [("t", b"k", b"x" * 5_000)] + [("t", b"k", b"x" * 100)] * 40
    batches = fill_all(given, max_batch_size=2_000)
    assert [n for _, n in batches] == [1, 17, 17, 6]
    assert all(isinstance(b, RecordBatch) for b, _ in batches)
    assert all(b.size() < 2_000 for b, _ in batches[1:])


def test_fill_batch_uses_the_clients_builder_where_the_native_core_declines() -> None:
    [(builder, taken)] = fill_all([("t", b"k", bytearray(b"v")), ("t", b"k", b"v")])
    assert taken == 2 and not isinstance(builder, RecordBatch)


def test_without_the_native_core_fill_batch_uses_the_clients_builder() -> None:
    with _accel.reference_only():
        [(builder, taken)] = fill_all([("t", b"k", b"v")] * 3)
    assert taken == 3 and not isinstance(builder, RecordBatch)
