"""Blobs: the file contents of recorded worlds, content-addressed on a compacted topic.

A world's `world_snapshot` event (on the session's chain) names each file by sha256; the contents
travel apart, on the blobs topic, so a file that many rollouts leave unchanged is one blob, and
compaction keeps one copy of a blob however often it was written. A blob larger than one record
may be is split into chunks; each chunk is a record whose key is `<sha256>/<index>` and whose
value is a header line (canonical JSON: the blob's sha256, the chunk's index, the count of
chunks and the blob's size) followed by the chunk's bytes. A reader reassembles a blob from its
chunks in any order and checks the whole against its sha256, so a chunk that was tampered with,
lost or compacted away is an error, never a wrong file. Blobs are not chained: they are evidence
by hash, and the hash is on the chain.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection
from typing import Final

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rolltape.schemas._errors import SchemaError

BLOB_CHUNK_BYTES: Final = 512 * 1024
"""Bytes of a blob per record: half the broker's default record limit, with room for the header
and the batch's overhead."""
_SHA256 = r"^[0-9a-f]{64}$"
_SHA256_HEX = re.compile(_SHA256)


class BlobError(SchemaError, ValueError):
    """A blob record that is not one, or a blob whose chunks do not make its sha256."""


class BlobChunk(BaseModel):
    """The header of one chunk of a blob."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sha256: str = Field(pattern=_SHA256)
    index: int = Field(ge=0)
    count: int = Field(ge=1)
    size: int = Field(ge=0)
    """Bytes of the whole blob."""

    @model_validator(mode="after")
    def _inside(self) -> BlobChunk:
        if self.index >= self.count:
            raise ValueError(f"chunk {self.index} of {self.count}")
        return self

    @property
    def key(self) -> bytes:
        return f"{self.sha256}/{self.index}".encode()


def blob_records(
    data: bytes, chunk_bytes: int = BLOB_CHUNK_BYTES, *, sha256: str | None = None
) -> list[tuple[bytes, bytes]]:
    """The (key, value) records that store `data` (an empty blob is one empty chunk).
    `sha256`: the data's hash when the caller has it already (a snapshot hashed every file)."""
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes={chunk_bytes}: at least one byte per chunk")
    sha = sha256 or hashlib.sha256(data).hexdigest()
    if not _SHA256_HEX.match(sha):
        raise ValueError(f"{sha!r} is not a sha256 in hex")
    size = len(data)
    count = max(1, -(-size // chunk_bytes))
    records = []
    for index in range(count):
        # BlobChunk's canonical form, written out: its fields are three ints and a hex string
        header = f'{{"count":{count},"index":{index},"sha256":"{sha}","size":{size}}}\n'
        body = data[index * chunk_bytes : (index + 1) * chunk_bytes]
        records.append((f"{sha}/{index}".encode(), header.encode() + body))
    return records


def read_blob_record(key: bytes | None, value: bytes | None) -> tuple[BlobChunk, bytes]:
    """One chunk's header and bytes; BlobError for a record that is not a chunk of a blob."""
    if value is None:
        raise BlobError("a blob record without a value (a tombstone)")
    header, newline, body = value.partition(b"\n")
    if not newline:
        raise BlobError("a blob record without its header line")
    try:
        chunk = BlobChunk.model_validate(orjson.loads(header))
    except (orjson.JSONDecodeError, ValidationError) as exc:
        raise BlobError(f"a blob record with an invalid header: {exc}"[:300]) from exc
    if key != chunk.key:
        raise BlobError(f"a blob record keyed {key!r} holds chunk {chunk.key.decode()}")
    return chunk, body


class BlobAssembler:
    """Collects the chunks of the blobs a reader wants from a scan of the blobs topic, in any
    order (the topic's partitions interleave them), and hands each blob out once complete and
    checked against its sha256."""

    def __init__(self, wanted: Collection[str]) -> None:
        self._parts: dict[str, dict[int, bytes]] = {sha: {} for sha in wanted}
        self._counts: dict[str, int] = {}
        self.blobs: dict[str, bytes] = {}
        """The complete blobs, by sha256."""

    def add(self, key: bytes | None, value: bytes | None) -> None:
        """Take one record of the blobs topic; records of unwanted blobs are skipped unread,
        a wanted blob's chunk that is not valid raises BlobError."""
        if key is None or key.partition(b"/")[0].decode(errors="replace") not in self._parts:
            return
        chunk, body = read_blob_record(key, value)
        if chunk.sha256 in self.blobs:
            return  # written twice (two rollouts left the same file): the first copy stands
        parts = self._parts[chunk.sha256]
        if self._counts.setdefault(chunk.sha256, chunk.count) != chunk.count:
            raise BlobError(f"blob {chunk.sha256[:12]}: chunks disagree on their count")
        parts[chunk.index] = body
        if len(parts) == chunk.count:
            data = b"".join(parts[i] for i in range(chunk.count))
            if hashlib.sha256(data).hexdigest() != chunk.sha256 or len(data) != chunk.size:
                raise BlobError(f"blob {chunk.sha256[:12]}: its chunks do not make its sha256")
            self.blobs[chunk.sha256] = data
            parts.clear()

    @property
    def missing(self) -> list[str]:
        """Wanted blobs not complete yet, sorted."""
        return sorted(sha for sha in self._parts if sha not in self.blobs)
