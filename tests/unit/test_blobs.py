"""Blobs of recorded worlds: chunked under the record limit, reassembled from any order, checked
against their sha256; a chunk that lies is set aside (never a wrong file), and a forged chunk
cannot displace an honest one, since a chunk's own hash is part of its key."""

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


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_blob__round_trips_through_chunks_read_in_any_order() -> None:
    data = random.Random(1).randbytes(10_000)
    records = blob_records(data, chunk_bytes=3_000)
    sha = _sha(data)
    parts = [_sha(data[i : i + 3_000]) for i in range(0, 10_000, 3_000)]
    assert [k for k, _ in records] == [f"{sha}/{i}/{p}".encode() for i, p in enumerate(parts)]
    assert all(len(v) < 3_000 + 400 for _, v in records)
    wanted = BlobAssembler([sha])
    for key, value in reversed(records):
        wanted.add(key, value)
    assert wanted.blobs == {sha: data} and wanted.missing == [] and wanted.rejections == 0


def test_an_empty_blob__is_one_empty_chunk() -> None:
    ((key, value),) = blob_records(b"")
    chunk, body = read_blob_record(key, value)
    assert (chunk.parts, chunk.size, body) == ((_sha(b""),), 0, b"")


def test_records_of_blobs_not_wanted__are_skipped_and_missing_ones_are_named() -> None:
    one, other = b"one" * 100, b"other" * 100
    assembler = BlobAssembler([_sha(one)])
    for key, value in [*blob_records(other, 50), (b"not-a-blob", b"junk")]:
        assembler.add(key, value)
    assert assembler.blobs == {} and assembler.missing == [_sha(one)]
    assert assembler.rejections == 0


def test_a_tampered_chunk__is_set_aside_and_the_honest_copy_still_restores() -> None:
    data = b"x" * 100
    sha = _sha(data)
    honest = blob_records(data, chunk_bytes=60)
    (key, value), _ = honest
    assembler = BlobAssembler([sha])
    assembler.add(key, value[:-1] + b"y")  # under the honest key: does not hash to it
    assert assembler.rejections == 1 and "does not hash to its key" in assembler.rejected[0]
    # a forged set under keys of its own (its chunks hash right, the whole does not make sha)
    for key_, value_ in blob_records(b"y" * 100, chunk_bytes=60):
        assembler.add(key_.replace(_sha(b"y" * 100).encode(), sha.encode()), value_)
    for key_, value_ in honest:
        assembler.add(key_, value_)
    assert assembler.blobs == {sha: data}


def test_a_forged_set_that_claims_the_blob__is_rejected_whole() -> None:
    data, lie = b"a" * 100, b"b" * 100
    sha = _sha(data)
    parts = [_sha(lie[:60]), _sha(lie[60:])]
    listed = ",".join(f'"{p}"' for p in parts)
    assembler = BlobAssembler([sha])
    for index, body in enumerate((lie[:60], lie[60:])):
        header = f'{{"index":{index},"parts":[{listed}],"sha256":"{sha}","size":100}}\n'
        assembler.add(f"{sha}/{index}/{parts[index]}".encode(), header.encode() + body)
    assert assembler.blobs == {} and "does not make it" in assembler.rejected[-1]
    with pytest.raises(BlobError, match="tombstone"):
        read_blob_record(b"k", None)
    with pytest.raises(BlobError, match="header"):
        read_blob_record(b"k", b"no header line")


def test_a_chunk_header__is_the_canonical_form_of_its_model() -> None:
    """The writer spells the header out for speed; the reader's model must agree byte for byte."""
    data = b"z" * 1000
    for key, value in blob_records(data, chunk_bytes=300):
        chunk, _ = read_blob_record(key, value)
        header = value.partition(b"\n")[0]
        assert header == canonical_bytes(chunk.model_dump())
    assert blob_records(data, sha256=_sha(data)) == blob_records(data)
    with pytest.raises(ValueError, match="not a sha256"):
        blob_records(data, sha256="../../etc")
