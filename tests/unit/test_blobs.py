"""Blobs of recorded worlds: chunked under the record limit, reassembled from any order, checked
against their sha256, and a chunk that lies is an error, never a wrong file."""

from __future__ import annotations

import hashlib
import random

import pytest

from rolltape.schemas import (
    BlobAssembler,
    BlobError,
    blob_records,
    canonical_bytes,
    read_blob_record,
)


def test_a_blob__round_trips_through_chunks_read_in_any_order() -> None:
    data = random.Random(1).randbytes(10_000)
    records = blob_records(data, chunk_bytes=3_000)
    sha = hashlib.sha256(data).hexdigest()
    assert [k for k, _ in records] == [f"{sha}/{i}".encode() for i in range(4)]
    assert all(len(v) < 3_000 + 200 for _, v in records)
    wanted = BlobAssembler([sha])
    for key, value in reversed(records):
        wanted.add(key, value)
    assert wanted.blobs == {sha: data} and wanted.missing == []


def test_an_empty_blob__is_one_empty_chunk() -> None:
    ((key, value),) = blob_records(b"")
    chunk, body = read_blob_record(key, value)
    assert (chunk.count, chunk.size, body) == (1, 0, b"")


def test_records_of_blobs_not_wanted__are_skipped_and_missing_ones_are_named() -> None:
    one, other = b"one" * 100, b"other" * 100
    assembler = BlobAssembler([hashlib.sha256(one).hexdigest()])
    for key, value in [*blob_records(other, 50), (b"not-a-blob", b"junk")]:
        assembler.add(key, value)
    assert assembler.blobs == {} and assembler.missing == [hashlib.sha256(one).hexdigest()]


def test_a_tampered_or_misplaced_chunk__is_an_error() -> None:
    data = b"x" * 100
    sha = hashlib.sha256(data).hexdigest()
    (key, value), second = blob_records(data, chunk_bytes=60)
    tampered = BlobAssembler([sha])
    tampered.add(key, value[:-1] + b"y")
    with pytest.raises(BlobError, match="do not make its sha256"):
        tampered.add(*second)
    with pytest.raises(BlobError, match="holds chunk"):
        read_blob_record(second[0], value)  # chunk 0 under chunk 1's key
    with pytest.raises(BlobError, match="header"):
        read_blob_record(key, b"no header line")
    with pytest.raises(BlobError, match="tombstone"):
        read_blob_record(key, None)


def test_a_chunk_header__is_the_canonical_form_of_its_model() -> None:
    """The writer spells the header out for speed; the reader's model must agree byte for byte."""
    data = b"z" * 1000
    for key, value in blob_records(data, chunk_bytes=300):
        chunk, _ = read_blob_record(key, value)
        header = value.partition(b"\n")[0]
        assert header == canonical_bytes(chunk.model_dump())
    assert blob_records(data, sha256=hashlib.sha256(data).hexdigest()) == blob_records(data)
    with pytest.raises(ValueError, match="not a sha256"):
        blob_records(data, sha256="../../etc")
