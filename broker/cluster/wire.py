"""The replication protocol between a leader and its followers, sans-IO (bytes in, frames
out), version 1.

A follower opens a TCP connection to the leader's `clustering.port` and sends the 8-byte
preamble `PYREPL` + version (u16, big-endian); a leader of another version answers with its
own preamble and closes, and both log the two versions. Then frames, both ways:
`Kind:u8 | Length:u32 | Payload`.

Follower → leader:
- HELLO: node_id (str16), secret (bytes16), the highest term it has followed (u64)
- WANT: the paths it needs during sync (str16 each)
- ACK: the last stream position it has written (u64; fdatasynced first when
  `clustering.follower_fsync` is on)
- PROXY_HELLO (instead of HELLO, on a connection of its own): node_id, secret, the service
  ("amqp", "http" or "prometheus", str16), then a PROXY v1 line for AMQP; from there on the connection
  carries one client's bytes both ways (broker/cluster/proxy.py)

Leader → follower:
- WELCOME: the leader's term (u64) and id (str16), or REFUSED: a reason (str16)
- FILES: (path str16, size u64, sha1 20 bytes) for every replicated file
- FILE: path (str16), content (the rest)
- DEFS_SNAPSHOT: the definitions as the operations that rebuild them (each u32-length
  prefixed JSON, broker/definitions_ops.py): the follower's database is rebuilt from them
- SYNCED: the stream position the sync ends at (u64)
- APPEND: position (u64), path (str16), offset (u64), data (the rest) — written at
  `offset`, so applying it twice leaves the same bytes
- REPLACE: position, path, content (the file becomes exactly this)
- DELETE: position, path
- TRUNCATE: position, path, size (u64)
- DEFS: position, one definitions operation (JSON; no path): definitions travel as the
  operations that change them, never as database pages

Paths are relative to the data directory, '/'-separated, never absolute and never with a
`..` part (the follower refuses such a frame and disconnects). A stream position counts the
leader's replicated operations since it became leader; a follower acks positions, and the
leader releases a confirm once every in-sync follower acked the position of the writes that
made the message durable.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

VERSION = 1
PREAMBLE = b"PYREPL" + struct.pack(">H", VERSION)
MAX_FRAME = 64 * 1024 * 1024  # bytes: a larger frame is a protocol error

HELLO, WANT, ACK, PROXY_HELLO = 1, 2, 3, 4
WELCOME, REFUSED, FILES, FILE, SYNCED, DEFS_SNAPSHOT = 10, 11, 12, 13, 14, 15
APPEND, REPLACE, DELETE, TRUNCATE, DEFS = 20, 21, 22, 23, 24
STREAM_KINDS = (APPEND, REPLACE, DELETE, TRUNCATE, DEFS)

_HEAD = struct.Struct(">BI")
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")


class ProtocolError(ValueError):
    """Bytes that are not this protocol (the connection is closed)."""


def frame(kind: int, *parts: bytes) -> bytes:
    """One frame of `kind` whose payload is `parts` joined."""
    payload = b"".join(parts)
    return _HEAD.pack(kind, len(payload)) + payload


def s16(text: str) -> bytes:
    raw = text.encode()
    return _U16.pack(len(raw)) + raw


def u64(n: int) -> bytes:
    return _U64.pack(n)


def safe_path(path: str) -> str:
    """`path` if it stays inside the data directory (no absolute path, no `..`, `.` or empty
    part, no backslash or control character, at most 4096 characters), else ProtocolError."""
    if (not path or len(path) > 4096 or path.startswith("/") or "\\" in path
            or any(ord(c) < 0x20 for c in path)
            or any(part in ("", ".", "..") for part in path.split("/"))):
        raise ProtocolError(f"unsafe path {path!r}")
    return path


class Reader:
    """Cuts frames from received bytes: `feed(data)` then `frames()` → [(kind, payload)]."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    def frames(self) -> list[tuple[int, bytes]]:
        out = []
        buf = self._buf
        pos = 0
        while len(buf) - pos >= _HEAD.size:
            kind, size = _HEAD.unpack_from(buf, pos)
            if size > MAX_FRAME:
                raise ProtocolError(f"frame of {size} bytes")
            end = pos + _HEAD.size + size
            if end > len(buf):
                break
            out.append((kind, bytes(buf[pos + _HEAD.size:end])))
            pos = end
        del buf[:pos]
        return out


class Fields:
    """Reads a payload field by field; ProtocolError when it runs short."""

    def __init__(self, payload: bytes) -> None:
        self.data = payload
        self.pos = 0

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise ProtocolError("payload too short")
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def s16(self) -> str:
        (n,) = _U16.unpack(self._take(2))
        try:
            return self._take(n).decode()
        except UnicodeDecodeError:
            raise ProtocolError("a name that is not UTF-8") from None

    def b16(self) -> bytes:
        (n,) = _U16.unpack(self._take(2))
        return self._take(n)

    def u64(self) -> int:
        (n,) = _U64.unpack(self._take(8))
        return int(n)

    def raw(self, n: int) -> bytes:
        return self._take(n)

    def rest(self) -> bytes:
        out = self.data[self.pos:]
        self.pos = len(self.data)
        return out

    def done(self) -> bool:
        return self.pos == len(self.data)


@dataclass(frozen=True, slots=True)
class FileEntry:
    """A replicated file as the leader lists it: path, size (bytes), sha1 of its content."""

    path: str
    size: int
    sha1: bytes


def files_frame(entries: list[FileEntry]) -> bytes:
    return frame(FILES, *(s16(e.path) + u64(e.size) + e.sha1 for e in entries))


def parse_files(payload: bytes) -> list[FileEntry]:
    f = Fields(payload)
    out = []
    while not f.done():
        out.append(FileEntry(safe_path(f.s16()), f.u64(), f.raw(20)))
    return out


def parse_want(payload: bytes) -> list[str]:
    f = Fields(payload)
    out = []
    while not f.done():
        out.append(safe_path(f.s16()))
    return out


def defs_snapshot_frame(ops: list[bytes]) -> bytes:
    return frame(DEFS_SNAPSHOT, *(len(op).to_bytes(4, "big") + op for op in ops))


def parse_defs_snapshot(payload: bytes) -> list[bytes]:
    f = Fields(payload)
    out = []
    while not f.done():
        out.append(f.raw(int.from_bytes(f.raw(4), "big")))
    return out
