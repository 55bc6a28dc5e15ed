"""The local append-only spool that holds sealed records while the broker is unreachable.

Invariant: records leave the spool in the order they entered it, and a record is forgotten only
after the broker acknowledged it (the read cursor is persisted after acks, never before). A torn
frame at the end of a file (the process died mid-write) is detected by its length and CRC and
ignored. Each recorder owns one segment file, locked with flock; segments left by a process that
died are adopted by the next recorder on the same folder and drained first.

Frame: u32 body length | u32 crc32(body) | body, with body = u16 topic length | u16 key length |
topic | key | value (big-endian).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import uuid
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_HEAD = struct.Struct(">II")
_BODY = struct.Struct(">HH")

SpooledRecord = tuple[str, bytes, bytes]
"""(topic, key, value)"""


def _encode(topic: str, key: bytes, value: bytes) -> bytes:
    t = topic.encode()
    body = _BODY.pack(len(t), len(key)) + t + key + value
    return _HEAD.pack(len(body), zlib.crc32(body)) + body


@dataclass
class _Segment:
    path: Path
    fd: int
    cursor: int
    size: int

    @property
    def cursor_path(self) -> Path:
        return self.path.with_suffix(".cursor")

    @property
    def unread(self) -> int:
        return self.size - self.cursor

    def save_cursor(self) -> None:
        tmp = self.cursor_path.with_suffix(".cursor.tmp")
        tmp.write_bytes(struct.pack(">Q", self.cursor))
        os.replace(tmp, self.cursor_path)


def _open_locked(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _read_cursor(path: Path) -> int:
    try:
        raw = path.with_suffix(".cursor").read_bytes()
        return int(struct.unpack(">Q", raw)[0]) if len(raw) == 8 else 0
    except OSError:
        return 0


class Spool:
    """Segments of spooled records under `directory`, oldest first; this process appends to its own."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self._segments: list[_Segment] = []
        for path in sorted(directory.glob("*.spool")):
            fd = _open_locked(path)
            if fd is None:  # a live recorder owns it
                continue
            size = os.fstat(fd).st_size
            cursor = min(_read_cursor(path), size)
            if cursor >= size:
                self._remove(_Segment(path, fd, cursor, size))
                continue
            self._segments.append(_Segment(path, fd, cursor, size))
        # Created and locked under a name no other spool adopts, then renamed (the lock stays
        # with the file): created under its final name, a recorder starting at the same moment
        # in this folder could find it empty and unlocked, and remove it as drained.
        name = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        fresh = directory / f".{name}.new"
        fd = _open_locked(fresh)
        assert fd is not None  # a fresh unique name cannot be locked by anyone else
        own = directory / f"{name}.spool"
        os.rename(fresh, own)
        self._own = _Segment(own, fd, 0, 0)
        self._own.save_cursor()

    @property
    def adopted(self) -> int:
        """Records' bytes left by earlier processes that this spool will drain first."""
        return sum(s.unread for s in self._segments)

    @property
    def unread_bytes(self) -> int:
        return self.adopted + self._own.unread

    @property
    def empty(self) -> bool:
        return self.unread_bytes == 0

    def has_room(self, extra: int) -> bool:
        return self.unread_bytes + extra <= self.max_bytes

    def append(self, records: Iterable[SpooledRecord]) -> int:
        """Append records in order; returns bytes written. The caller checks `has_room` first."""
        data = b"".join(_encode(t, k, v) for t, k, v in records)
        if data:
            os.write(self._own.fd, data)
            self._own.size += len(data)
        return len(data)

    def sync(self) -> None:
        os.fsync(self._own.fd)

    def read(self, max_records: int) -> tuple[list[SpooledRecord], tuple[_Segment, int]]:
        """The next records in order and a token for `commit` once the broker acknowledged them."""
        segment = next((s for s in self._segments if s.unread), None) or self._own
        out: list[SpooledRecord] = []
        offset = segment.cursor
        with open(segment.path, "rb") as f:
            f.seek(offset)
            while len(out) < max_records and offset < segment.size:
                head = f.read(_HEAD.size)
                if len(head) < _HEAD.size:
                    break
                length, crc = _HEAD.unpack(head)
                body = f.read(length)
                if len(body) < length or zlib.crc32(body) != crc:
                    # Torn tail of a process that died mid-write: nothing after it is valid.
                    segment.size = offset
                    break
                tlen, klen = _BODY.unpack_from(body)
                start = _BODY.size
                topic = body[start : start + tlen].decode()
                key = body[start + tlen : start + tlen + klen]
                value = body[start + tlen + klen :]
                out.append((topic, key, value))
                offset += _HEAD.size + length
        return out, (segment, offset)

    def commit(self, token: tuple[_Segment, int]) -> None:
        """Forget what `read` returned: the broker has it."""
        segment, offset = token
        segment.cursor = offset
        if segment is not self._own and segment.unread == 0:
            self._segments.remove(segment)
            self._remove(segment)
        elif segment is self._own and segment.unread == 0:
            os.ftruncate(segment.fd, 0)
            segment.size = segment.cursor = 0
            segment.save_cursor()
        else:
            segment.save_cursor()

    def close(self) -> None:
        """Release the files; an empty own segment is deleted, a non-empty one stays for adoption."""
        for segment in self._segments:
            os.close(segment.fd)
        self._segments.clear()
        if self._own.unread == 0:
            self._remove(self._own)
        else:
            self._own.save_cursor()
            os.close(self._own.fd)

    @staticmethod
    def _remove(segment: _Segment) -> None:
        for path in (segment.path, segment.cursor_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        with contextlib.suppress(OSError):
            os.close(segment.fd)
