"""Blobs: the file contents of recorded worlds, content-addressed on a compacted topic.

A world's `world_snapshot` event (on the session's chain) names each file by sha256; the contents
travel apart, on the blobs topic, so a file that many rollouts leave unchanged is one blob, and
compaction keeps one copy of it however often it was written. A blob larger than one record may
be is split into chunks. Each chunk is a record whose value is a header line (canonical JSON: the
blob's sha256 and size, the chunk's index, and the sha256 of every chunk of the blob, `parts`)
followed by the chunk's bytes, and whose key is `<blob sha256>/<index>/<chunk sha256>`.

Why the chunk's own hash is in the key: compaction keeps the last record of a key, and anyone
who may write the topic could otherwise write a wrong chunk under an honest chunk's key and
have the honest one compacted away, making a world unrestorable for good. With the chunk's hash
in the key, a wrong chunk has a key of its own; a reader groups chunks by the `parts` they claim,
checks each chunk against its hash and each complete group against the blob's sha256, and sets
aside what does not hold (counted in `rejected`), never a wrong file. Blobs are not chained: they
are evidence by hash, and the hash is on the chain.
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
    """A blob record that is not one (a reader sets it aside and goes on)."""


class BlobChunk(BaseModel):
    """The header of one chunk of a blob."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sha256: str = Field(pattern=_SHA256)
    size: int = Field(ge=0)
    """Bytes of the whole blob."""
    index: int = Field(ge=0)
    parts: tuple[str, ...] = Field(min_length=1)
    """sha256 of each chunk of the blob, in order."""

    @model_validator(mode="after")
    def _inside(self) -> BlobChunk:
        if self.index >= len(self.parts):
            raise ValueError(f"chunk {self.index} of {len(self.parts)}")
        if not all(_SHA256_HEX.match(part) for part in self.parts):
            raise ValueError("a part is not a sha256 in hex")
        return self

    @property
    def key(self) -> bytes:
        return f"{self.sha256}/{self.index}/{self.parts[self.index]}".encode()


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
    if size <= chunk_bytes:  # most files: one chunk, whose hash is the blob's
        single = b'{"index":0,"parts":["%s"],"sha256":"%s","size":%d}\n' % (
            sha.encode(),
            sha.encode(),
            size,
        )
        return [(f"{sha}/0/{sha}".encode(), single + data)]
    bodies = [data[i : i + chunk_bytes] for i in range(0, size, chunk_bytes)]
    parts = [hashlib.sha256(b).hexdigest() for b in bodies]
    listed = ",".join(f'"{part}"' for part in parts)
    records = []
    for index, body in enumerate(bodies):
        # BlobChunk's canonical form, written out: ints and hex strings, keys in order
        header = f'{{"index":{index},"parts":[{listed}],"sha256":"{sha}","size":{size}}}\n'
        records.append((f"{sha}/{index}/{parts[index]}".encode(), header.encode() + body))
    return records


def read_blob_record(key: bytes | None, value: bytes | None) -> tuple[BlobChunk, bytes]:
    """One chunk's header and bytes, checked against its key and its hash; BlobError for a
    record that is not a chunk of a blob."""
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
    if hashlib.sha256(body).hexdigest() != chunk.parts[chunk.index]:
        raise BlobError(f"chunk {chunk.key.decode()} does not hash to its key")
    return chunk, body


class BlobAssembler:
    """Collects the chunks of the blobs a reader wants from a scan of the blobs topic, in any
    order (the topic's partitions interleave them), and hands each blob out once a complete set
    of chunks makes its sha256. Records that are not valid chunks, and sets that do not make
    their blob, are set aside and counted; the scan goes on."""

    def __init__(self, wanted: Collection[str]) -> None:
        self._wanted = set(wanted)
        self._groups: dict[tuple[str, tuple[str, ...]], dict[int, bytes]] = {}
        self.blobs: dict[str, bytes] = {}
        """The complete blobs, by sha256."""
        self.rejected: list[str] = []
        """Why records of wanted blobs were set aside (at most 20 kept)."""
        self.rejections = 0

    def add(self, key: bytes | None, value: bytes | None) -> None:
        """Take one record of the blobs topic (records of unwanted blobs are skipped unread)."""
        if key is None:
            return
        sha = key.partition(b"/")[0].decode(errors="replace")
        if sha not in self._wanted or sha in self.blobs:
            return
        try:
            chunk, body = read_blob_record(key, value)
        except BlobError as exc:
            self._reject(str(exc))
            return
        group = (sha, chunk.parts)
        parts = self._groups.setdefault(group, {})
        parts[chunk.index] = body
        if len(parts) < len(chunk.parts):
            return
        del self._groups[group]
        data = b"".join(parts[i] for i in range(len(chunk.parts)))
        if hashlib.sha256(data).hexdigest() != sha or len(data) != chunk.size:
            self._reject(f"blob {sha[:12]}: a set of {len(chunk.parts)} chunks does not make it")
            return
        self.blobs[sha] = data
        for other in [g for g in self._groups if g[0] == sha]:
            del self._groups[other]

    def _reject(self, reason: str) -> None:
        self.rejections += 1
        if len(self.rejected) < 20:
            self.rejected.append(reason)

    @property
    def missing(self) -> list[str]:
        """Wanted blobs not complete yet, sorted."""
        return sorted(self._wanted - set(self.blobs))
