"""The RabbitMQ Stream protocol's frames (issue 37): constants, splitting a byte stream into
frames, parsing what clients send and encoding what the server sends.

Owns: the wire format of `deps/rabbitmq_stream/docs/PROTOCOL.adoc` and
`deps/rabbitmq_stream_common/src/rabbit_stream_core.erl` (RabbitMQ v3.13.7, which has every
command up to super streams and filtering). No state beyond one connection's partial frame;
no I/O.
Must never: import the broker (this is the ground layer of the stream listener), or copy a
publish's messages on the way through more than once.

Frame = Size:u32 (not counting itself) | Key:u16 (top bit 1 = response) | Version:u16 | …
Strings are u16-length-prefixed UTF-8 (-1 = null), byte blobs u32/i32-length-prefixed (-1 =
null), arrays u32-count-prefixed; integers big-endian.

Errors: `ParseError` (a malformed frame: the connection answers and closes, as
rabbit_stream_reader does with a frame it cannot parse), `FrameTooLarge` (a frame above the
negotiated frame_max: response code 14, then close).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from broker.stream.osiris_chunk import EntryBlock, SubBatch

# -- command keys (rabbit_stream.hrl) --------------------------------------------------------
DECLARE_PUBLISHER = 1
PUBLISH = 2
PUBLISH_CONFIRM = 3
PUBLISH_ERROR = 4
QUERY_PUBLISHER_SEQUENCE = 5
DELETE_PUBLISHER = 6
SUBSCRIBE = 7
DELIVER = 8
CREDIT = 9
STORE_OFFSET = 10
QUERY_OFFSET = 11
UNSUBSCRIBE = 12
CREATE_STREAM = 13
DELETE_STREAM = 14
METADATA = 15
METADATA_UPDATE = 16
PEER_PROPERTIES = 17
SASL_HANDSHAKE = 18
SASL_AUTHENTICATE = 19
TUNE = 20
OPEN = 21
CLOSE = 22
HEARTBEAT = 23
ROUTE = 24
PARTITIONS = 25
CONSUMER_UPDATE = 26
EXCHANGE_COMMAND_VERSIONS = 27
STREAM_STATS = 28
CREATE_SUPER_STREAM = 29
DELETE_SUPER_STREAM = 30

RESPONSE_FLAG = 0x8000

NAMES = {
    DECLARE_PUBLISHER: "declare_publisher", PUBLISH: "publish",
    PUBLISH_CONFIRM: "publish_confirm", PUBLISH_ERROR: "publish_error",
    QUERY_PUBLISHER_SEQUENCE: "query_publisher_sequence", DELETE_PUBLISHER: "delete_publisher",
    SUBSCRIBE: "subscribe", DELIVER: "deliver", CREDIT: "credit", STORE_OFFSET: "store_offset",
    QUERY_OFFSET: "query_offset", UNSUBSCRIBE: "unsubscribe", CREATE_STREAM: "create_stream",
    DELETE_STREAM: "delete_stream", METADATA: "metadata", METADATA_UPDATE: "metadata_update",
    PEER_PROPERTIES: "peer_properties", SASL_HANDSHAKE: "sasl_handshake",
    SASL_AUTHENTICATE: "sasl_authenticate", TUNE: "tune", OPEN: "open", CLOSE: "close",
    HEARTBEAT: "heartbeat", ROUTE: "route", PARTITIONS: "partitions",
    CONSUMER_UPDATE: "consumer_update", EXCHANGE_COMMAND_VERSIONS: "exchange_command_versions",
    STREAM_STATS: "stream_stats", CREATE_SUPER_STREAM: "create_super_stream",
    DELETE_SUPER_STREAM: "delete_super_stream",
}

# -- response codes ----------------------------------------------------------------------------
OK = 0x01
STREAM_DOES_NOT_EXIST = 0x02
SUBSCRIPTION_ID_ALREADY_EXISTS = 0x03
SUBSCRIPTION_ID_DOES_NOT_EXIST = 0x04
STREAM_ALREADY_EXISTS = 0x05
STREAM_NOT_AVAILABLE = 0x06
SASL_MECHANISM_NOT_SUPPORTED = 0x07
AUTHENTICATION_FAILURE = 0x08
SASL_ERROR = 0x09
SASL_CHALLENGE = 0x0A
SASL_AUTHENTICATION_FAILURE_LOOPBACK = 0x0B
VIRTUAL_HOST_ACCESS_FAILURE = 0x0C
UNKNOWN_FRAME = 0x0D
FRAME_TOO_LARGE = 0x0E
INTERNAL_ERROR = 0x0F
ACCESS_REFUSED = 0x10
PRECONDITION_FAILED = 0x11
PUBLISHER_DOES_NOT_EXIST = 0x12
NO_OFFSET = 0x13
SASL_CANNOT_CHANGE_MECHANISM = 0x14
SASL_CANNOT_CHANGE_USERNAME = 0x15

# -- offset specifications -----------------------------------------------------------------------
OFFSET_NONE, OFFSET_FIRST, OFFSET_LAST, OFFSET_NEXT, OFFSET_OFFSET, OFFSET_TIMESTAMP = range(6)

DEFAULT_FRAME_MAX = 1_048_576  # bytes (1 MiB)
DEFAULT_HEARTBEAT = 60  # seconds
DEFAULT_INITIAL_CREDITS = 50_000

# (min, max) versions of each command this server speaks, for exchange_command_versions
# (rabbit_stream_utils:command_versions/0 in 3.13: publish and deliver have a version 2)
COMMAND_VERSIONS: dict[int, tuple[int, int]] = {
    **{key: (1, 1) for key in NAMES},
    PUBLISH: (1, 2),
    DELIVER: (1, 2),
}


class ParseError(ValueError):
    """A frame that does not parse as the command its key and version name."""


class FrameTooLarge(ValueError):
    """A frame above the negotiated frame_max (bytes); `size` is its announced size."""

    def __init__(self, size: int, frame_max: int) -> None:
        super().__init__(f"frame of {size} bytes above frame_max {frame_max}")
        self.size = size
        self.frame_max = frame_max


# -- splitting -----------------------------------------------------------------------------------
class FrameSplitter:
    """Turns received bytes into whole frames (each without its 4-byte size).

    `frame_max` (bytes, 0 = unlimited) bounds a frame's declared size (the bytes after its
    size field), as rabbit_stream_core:frame_size_ok/2 checks it (RabbitMQ 4.x; 3.10 to 3.13
    check nothing); `feed(data)` returns the frames completed by `data`
    (copied once out of the buffer) and raises FrameTooLarge as soon as a size above it is
    read.
    """

    def __init__(self, frame_max: int = 0) -> None:
        self.frame_max = frame_max
        self._buf = bytearray()

    def feed(self, data: bytes, blocks: bool = False) -> list[Any]:
        """The frames `data` completes, as bytes. With `blocks` (an open connection), a run
        of publish v1 frames with one header (size, publisher, count) whose messages all
        have one length comes as one (publisher id, PublishBlock) item instead: a fast
        producer's frames read in a few C copies per socket read, not per frame."""
        buf = self._buf
        buf += data
        pos = 0
        end = len(buf)
        frames: list[Any] = []
        with memoryview(buf) as view:
            while end - pos >= 4:
                if blocks and buf[pos + 4:pos + 8] == _PUBLISH_V1:
                    run = _publish_run(buf, pos, end, self.frame_max)
                    if run is not None:
                        frames.append(run[0])
                        pos = run[1]
                        continue
                size = _U32.unpack_from(view, pos)[0]
                if self.frame_max and size > self.frame_max:
                    raise FrameTooLarge(size, self.frame_max)
                if end - pos - 4 < size:
                    break
                frames.append(bytes(view[pos + 4:pos + 4 + size]))
                pos += 4 + size
        del buf[:pos]
        return frames


# -- reading -------------------------------------------------------------------------------------
_U16 = struct.Struct(">H")
_I16 = struct.Struct(">h")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_HEAD = struct.Struct(">HH")  # key, version
_HEAD_CORR = struct.Struct(">HHI")  # key, version, correlation id


class Cursor:
    """Reads protocol types from one frame in order; every read past the end raises
    ParseError."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes | memoryview, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def _take(self, s: struct.Struct) -> Any:
        try:
            (v,) = s.unpack_from(self.data, self.pos)
        except struct.error:
            raise ParseError(f"frame ends at byte {len(self.data)}, field at {self.pos}") from None
        self.pos += s.size
        return v

    def _take_struct(self, s: struct.Struct) -> tuple:
        try:
            v = s.unpack_from(self.data, self.pos)
        except struct.error:
            raise ParseError(f"frame ends at byte {len(self.data)}, field at {self.pos}") from None
        self.pos += s.size
        return v

    def u8(self) -> int:
        if self.pos >= len(self.data):
            raise ParseError(f"frame ends at byte {len(self.data)}")
        v = self.data[self.pos]
        self.pos += 1
        return v

    def u16(self) -> int:
        return self._take(_U16)

    def i16(self) -> int:
        return self._take(_I16)

    def u32(self) -> int:
        return self._take(_U32)

    def i32(self) -> int:
        return self._take(_I32)

    def u64(self) -> int:
        return self._take(_U64)

    def i64(self) -> int:
        return self._take(_I64)

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ParseError(f"{n} bytes wanted at {self.pos}, frame has {len(self.data)}")
        v = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return v

    def string(self) -> str | None:
        n = self.i16()
        if n == -1:
            return None
        try:
            return self.raw(n).decode()
        except UnicodeDecodeError as exc:
            raise ParseError(f"string is not UTF-8: {exc}") from None

    def blob(self) -> bytes | None:
        n = self.i32()
        return None if n == -1 else self.raw(n)

    def strings(self) -> list[str]:
        return [self.string() or "" for _ in range(self.u32())]

    def string_map(self) -> dict[str, str]:
        out = {}
        for _ in range(self.u32()):
            k = self.string() or ""
            out[k] = self.string() or ""
        return out

    def offset_spec(self) -> tuple[int, int | None]:
        """(type, value): value is the offset or the timestamp (ms), else None."""
        kind = self.i16()
        if kind in (OFFSET_NONE, OFFSET_FIRST, OFFSET_LAST, OFFSET_NEXT):
            return kind, None
        if kind == OFFSET_OFFSET:
            return kind, self.u64()
        if kind == OFFSET_TIMESTAMP:
            return kind, self.i64()
        raise ParseError(f"unknown offset type {kind}")

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def end(self) -> None:
        """The frame must be used up (a longer frame is malformed)."""
        if self.pos != len(self.data):
            raise ParseError(f"{len(self.data) - self.pos} bytes left over")


@dataclass(slots=True)
class Frame:
    """One parsed frame: `key` without the response bit, `version`, `response` (the top bit
    was set), `corr` (correlation id; 0 where the command has none) and the command's fields
    by name (PROTOCOL.adoc's names in snake case)."""

    key: int
    version: int
    response: bool = False
    corr: int = 0
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return NAMES.get(self.key, f"unknown({self.key})")


_PID_SIZE = struct.Struct(">QI")  # a published message's publishing id and size
_BATCH_HEAD = struct.Struct(">BHII")  # 1 | compression:3 | 0:4, records, uncompressed, size


@dataclass(slots=True, frozen=True)
class PublishBlock:
    """A publish v1 frame's messages when they all have one length and none is a sub-entry
    batch: `entries` laid out as a chunk stores them (osiris_chunk.EntryBlock), `ids` the
    publishing ids as the frame carried them (count × u64, big-endian: what publish_confirm
    sends back). Built with three strided numpy copies, whatever the count: the frame's bytes with
    each message's 8-byte id cut out are exactly the chunk's data entries. PerfTest-style
    producers and fixed-format records send such frames; any other frame takes the
    per-message path."""

    entries: EntryBlock
    ids: bytes

    def __len__(self) -> int:
        return self.entries.count

    def id_list(self) -> list[int]:
        """The publishing ids as ints."""
        return list(struct.unpack(f">{len(self.ids) // 8}Q", self.ids))

    def messages(self) -> list[tuple[int, str | None, bytes]]:
        """The per-message form [(publishing id, None, message)] (deduplication's slow path)."""
        stride, data = self.entries.stride, self.entries.data
        return [(pid, None, data[i * stride + 4:(i + 1) * stride])
                for i, pid in enumerate(self.id_list())]


Published = list[tuple[int, str | None, bytes | SubBatch]] | PublishBlock


def _uniform_block(data: bytes, pos: int, n: int) -> PublishBlock | None:
    """The PublishBlock of publish v1's `n` messages at `pos` in `data` (to the frame's end)
    when every one has the first one's length (and so none is a sub-entry batch: the top bit
    is clear); else None."""
    if n < 2 or len(data) - pos < 12:
        return None
    size = int.from_bytes(data[pos + 8:pos + 12], "big")
    stride = 12 + size
    if size & 0x80000000 or len(data) - pos != n * stride:
        return None
    # strided views over the frame, one item per message, copied out in C: the size fields,
    # then each message without its id (a chunk's simple entry), then the ids
    if np.ndarray((n,), "V4", data, pos + 8, (stride,)).tobytes() != data[pos + 8:pos + 12] * n:
        return None  # a size differs
    entries = np.ndarray((n,), f"V{stride - 8}", data, pos + 8, (stride,)).tobytes()
    return PublishBlock(EntryBlock(n, stride - 8, entries),
                        np.ndarray((n,), "V8", data, pos, (stride,)).tobytes())


_PUBLISH_V1 = b"\x00\x02\x00\x01"  # key PUBLISH, version 1


def _publish_run(buf: bytearray, pos: int, end: int,
                 frame_max: int) -> tuple[tuple[int, PublishBlock], int] | None:
    """((publisher id, PublishBlock), position after the run) for the publish v1 frames at
    `pos` of `buf` that are whole, share the first one's 13-byte head (size, key, version,
    publisher id, count: so one length per frame and message count) and whose messages
    all have the first one's length; None when there are not two such frames or the first
    is not one (the frame is then read on its own)."""
    if end - pos < 21:
        return None
    size = int.from_bytes(buf[pos:pos + 4], "big")
    n = int.from_bytes(buf[pos + 9:pos + 13], "big")
    frame_len = 4 + size
    frames = (end - pos) // frame_len
    if frames < 2 or n < 1 or (frame_max and size > frame_max):
        return None
    msg = int.from_bytes(buf[pos + 21:pos + 25], "big") if end - pos >= 25 else -1
    stride = 12 + msg
    if msg < 0 or msg & 0x80000000 or 13 + n * stride != frame_len:
        return None
    heads = np.ndarray((frames,), "V13", buf, pos, (frame_len,))
    same = heads == heads[0]
    if not same.all():
        frames = int(same.argmin())
        if frames < 2:
            return None
    shape, strides = (frames, n), (frame_len, stride)
    sizes = np.ndarray(shape, "V4", buf, pos + 21, strides).tobytes()
    if sizes != buf[pos + 21:pos + 25] * (frames * n):
        return None  # a message of another length: frame by frame
    entries = np.ndarray(shape, f"V{stride - 8}", buf, pos + 21, strides).tobytes()
    ids = np.ndarray(shape, "V8", buf, pos + 13, strides).tobytes()
    block = PublishBlock(EntryBlock(frames * n, stride - 8, entries), ids)
    return (buf[pos + 8], block), pos + frames * frame_len


def _published(c: Cursor, version: int) -> Published:
    """Publish's messages: [(publishing_id, filter_value, message)]. A message whose size
    field has its top bit set is a sub-entry batch (PROTOCOL.adoc "sub-entry batching";
    rabbit_stream_reader:publishing_ids_from_messages): 1 | compression:3 | 0:4 |
    records:u16 | uncompressed size:u32 | size:u32 | body, kept as a SubBatch to be stored
    as it came."""
    n = c.u32()
    if version == 1:
        if c.data.__class__ is bytes:
            block = _uniform_block(c.data, c.pos, n)  # type: ignore[arg-type]
            if block is not None:
                c.pos = len(c.data)
                return block
        fast = _published_v1(c, n)
        if fast is not None:
            return fast
    out: list[tuple[int, str | None, bytes | SubBatch]] = []
    for _ in range(n):
        pid = c.u64()
        flt = c.string() if version == 2 else None
        if c.pos < len(c.data) and c.data[c.pos] & 0x80:
            flag, records, unc, size = c._take_struct(_BATCH_HEAD)
            out.append((pid, flt, SubBatch(records, (flag >> 4) & 0x7, unc, c.raw(size))))
            continue
        msg = c.blob()
        out.append((pid, flt, msg or b""))
    return out


def _published_v1(c: Cursor, n: int) -> list[tuple[int, str | None, bytes | SubBatch]] | None:
    """publish v1's `n` messages read in one tight loop (this is per message: one unpack
    and one slice each), or None, having read nothing, when one of them is a sub-entry
    batch or the frame is a memoryview, which the general loop reads. Raises ParseError for a frame cut short."""
    data, pos = c.data, c.pos
    if not isinstance(data, bytes):
        return None  # a memoryview's slices would be views: the general loop copies
    unpack = _PID_SIZE.unpack_from
    out: list[tuple[int, str | None, bytes | SubBatch]] = []
    append = out.append
    try:
        for _ in range(n):
            pid, size = unpack(data, pos)
            if size & 0x80000000:
                return None
            start = pos + 12
            pos = start + size
            append((pid, None, data[start:pos]))
    except struct.error:
        raise ParseError(f"frame ends at byte {len(data)}, message at {pos}") from None
    if pos > len(data):
        raise ParseError(f"{pos - len(data)} bytes of a message past the frame's end")
    c.pos = pos
    return out


def parse(frame: bytes | memoryview) -> Frame:
    """Parse one frame from a client (requests, and the responses a client sends: tune,
    close, consumer_update, heartbeat). Raises ParseError for a frame that does not parse;
    an unknown key or version parses to a Frame whose `fields` is {"unknown": True} (the
    caller answers UNKNOWN_FRAME and closes)."""
    c = Cursor(frame)
    key16 = c.u16()
    version = c.u16()
    response = bool(key16 & RESPONSE_FLAG)
    key = key16 & 0x7FFF
    f = Frame(key, version, response)
    if key not in NAMES or not (COMMAND_VERSIONS[key][0] <= version
                                <= COMMAND_VERSIONS[key][1]):
        f.fields["unknown"] = True
        return f
    d = f.fields
    if response:
        if key == TUNE:
            d["frame_max"] = c.u32()
            d["heartbeat"] = c.u32()
        elif key == CREDIT:  # no correlation id
            d["response_code"] = c.u16()
            d["subscription_id"] = c.u8()
        else:
            f.corr = c.u32()
            d["response_code"] = c.u16()
            if key == CONSUMER_UPDATE:
                d["offset_spec"] = c.offset_spec()
                # clients send 8 bytes of offset whatever the type (rstream does); RabbitMQ
                # reads the value only for offset and timestamp (offset_spec/2)
                c.pos = len(c.data)
        c.end()
        return f
    if key == PUBLISH:
        d["publisher_id"] = c.u8()
        d["messages"] = _published(c, version)
    elif key == CREDIT:
        d["subscription_id"] = c.u8()
        d["credit"] = c.u16()
    elif key == STORE_OFFSET:
        d["reference"] = c.string()
        d["stream"] = c.string()
        d["offset"] = c.u64()
    elif key == HEARTBEAT:
        pass
    elif key == TUNE:  # a client may send tune as a request too
        d["frame_max"] = c.u32()
        d["heartbeat"] = c.u32()
    else:
        f.corr = c.u32()
        _REQUEST_BODIES[key](c, d)
    c.end()
    return f


def _declare_publisher(c: Cursor, d: dict) -> None:
    d["publisher_id"] = c.u8()
    d["reference"] = c.string()
    d["stream"] = c.string()


def _ref_stream(c: Cursor, d: dict) -> None:
    d["reference"] = c.string()
    d["stream"] = c.string()


def _stream(c: Cursor, d: dict) -> None:
    d["stream"] = c.string()


def _subscribe(c: Cursor, d: dict) -> None:
    d["subscription_id"] = c.u8()
    d["stream"] = c.string()
    d["offset_spec"] = c.offset_spec()
    d["credit"] = c.u16()
    d["properties"] = c.string_map() if c.remaining() else {}


def _create_stream(c: Cursor, d: dict) -> None:
    d["stream"] = c.string()
    d["arguments"] = c.string_map()


def _sasl_authenticate(c: Cursor, d: dict) -> None:
    d["mechanism"] = c.string()
    d["response"] = c.blob() or b""


def _close(c: Cursor, d: dict) -> None:
    d["closing_code"] = c.u16()
    d["closing_reason"] = c.string()


def _route(c: Cursor, d: dict) -> None:
    d["routing_key"] = c.string()
    d["super_stream"] = c.string()


def _command_versions(c: Cursor, d: dict) -> None:
    d["commands"] = [(c.u16(), c.u16(), c.u16()) for _ in range(c.u32())]


def _create_super_stream(c: Cursor, d: dict) -> None:
    d["super_stream"] = c.string()
    d["partitions"] = c.strings()
    d["binding_keys"] = c.strings()
    d["arguments"] = c.string_map()


_REQUEST_BODIES = {
    DECLARE_PUBLISHER: _declare_publisher,
    QUERY_PUBLISHER_SEQUENCE: _ref_stream,
    DELETE_PUBLISHER: lambda c, d: d.__setitem__("publisher_id", c.u8()),
    SUBSCRIBE: _subscribe,
    QUERY_OFFSET: _ref_stream,
    UNSUBSCRIBE: lambda c, d: d.__setitem__("subscription_id", c.u8()),
    CREATE_STREAM: _create_stream,
    DELETE_STREAM: _stream,
    METADATA: lambda c, d: d.__setitem__("streams", c.strings()),
    PEER_PROPERTIES: lambda c, d: d.__setitem__("properties", c.string_map()),
    SASL_HANDSHAKE: lambda c, d: None,
    SASL_AUTHENTICATE: _sasl_authenticate,
    OPEN: lambda c, d: d.__setitem__("virtual_host", c.string()),
    CLOSE: _close,
    ROUTE: _route,
    PARTITIONS: lambda c, d: d.__setitem__("super_stream", c.string()),
    EXCHANGE_COMMAND_VERSIONS: _command_versions,
    STREAM_STATS: _stream,
    CREATE_SUPER_STREAM: _create_super_stream,
    DELETE_SUPER_STREAM: lambda c, d: d.__setitem__("super_stream", c.string()),
    # server-to-client commands sent by a client are malformed for this server
    PUBLISH_CONFIRM: lambda c, d: d.__setitem__("unexpected", True),
    PUBLISH_ERROR: lambda c, d: d.__setitem__("unexpected", True),
    DELIVER: lambda c, d: d.__setitem__("unexpected", True),
    METADATA_UPDATE: lambda c, d: d.__setitem__("unexpected", True),
    CONSUMER_UPDATE: lambda c, d: d.__setitem__("unexpected", True),
}


# -- writing -------------------------------------------------------------------------------------
def string(s: str | None) -> bytes:
    """A protocol string (u16 length, UTF-8; None = -1)."""
    if s is None:
        return b"\xff\xff"
    b = s.encode()
    return _U16.pack(len(b)) + b


def string_map(m: dict[str, str]) -> bytes:
    return _U32.pack(len(m)) + b"".join(string(k) + string(v) for k, v in m.items())


def strings(items: list[str]) -> bytes:
    return _U32.pack(len(items)) + b"".join(string(s) for s in items)


def wrap(body: bytes) -> bytes:
    """Size-prefix a frame body."""
    return _U32.pack(len(body)) + body


def response(key: int, corr: int, code: int, payload: bytes = b"") -> bytes:
    """A response frame: key | 0x8000, version 1, correlation id, response code, payload."""
    return wrap(_HEAD_CORR.pack(key | RESPONSE_FLAG, 1, corr) + _U16.pack(code) + payload)


def tune(frame_max: int, heartbeat: int) -> bytes:
    """The server's tune (a request without a correlation id)."""
    return wrap(_HEAD.pack(TUNE, 1) + _U32.pack(frame_max) + _U32.pack(heartbeat))


def heartbeat() -> bytes:
    return wrap(_HEAD.pack(HEARTBEAT, 1))


def close(corr: int, code: int, reason: str) -> bytes:
    """The server closing the connection (a request the client answers)."""
    return wrap(_HEAD_CORR.pack(CLOSE, 1, corr) + _U16.pack(code) + string(reason))


def credit_response(code: int, subscription_id: int) -> bytes:
    """The answer to a credit for an unknown subscription (no correlation id)."""
    return wrap(_HEAD.pack(CREDIT | RESPONSE_FLAG, 1) + _U16.pack(code)
                + bytes((subscription_id,)))


def publish_confirm(publisher_id: int, ids: list[int] | bytes) -> bytes:
    """publish_confirm of `ids`: ints, or u64s packed big-endian already (a PublishBlock's)."""
    if ids.__class__ is bytes:
        return wrap(_HEAD.pack(PUBLISH_CONFIRM, 1) + bytes((publisher_id,))
                    + _U32.pack(len(ids) // 8) + ids)  # type: ignore[operator]
    return wrap(_HEAD.pack(PUBLISH_CONFIRM, 1) + bytes((publisher_id,)) + _U32.pack(len(ids))
                + struct.pack(f">{len(ids)}Q", *ids))


def publish_error(publisher_id: int, errors: list[tuple[int, int]]) -> bytes:
    """errors: [(publishing_id, response code)]."""
    return wrap(_HEAD.pack(PUBLISH_ERROR, 1) + bytes((publisher_id,))
                + _U32.pack(len(errors))
                + b"".join(_U64.pack(pid) + _U16.pack(code) for pid, code in errors))


_DELIVER_V1 = struct.Struct(">IHHB")  # size, key, version, subscription id
_DELIVER_V2 = struct.Struct(">IHHBQ")  # … committed chunk id


def deliver_header(subscription_id: int, chunk_size: int, version: int = 1,
                   committed_chunk_id: int = 0) -> bytes:
    """The bytes before a stored chunk (header + data, `chunk_size` bytes) in a Deliver
    frame: the chunk itself follows unchanged (sent as stored, no re-encoding)."""
    if version == 2:
        return _DELIVER_V2.pack(chunk_size + 13, DELIVER, 2, subscription_id,
                                committed_chunk_id)
    return _DELIVER_V1.pack(chunk_size + 5, DELIVER, 1, subscription_id)


def metadata_update(stream: str, code: int = STREAM_NOT_AVAILABLE) -> bytes:
    return wrap(_HEAD.pack(METADATA_UPDATE, 1) + _U16.pack(code) + string(stream))


def consumer_update(corr: int, subscription_id: int, active: bool) -> bytes:
    """The server asking a single-active consumer's client whether it takes over."""
    return wrap(_HEAD_CORR.pack(CONSUMER_UPDATE, 1, corr) + bytes((subscription_id, active)))


def offset_spec(kind: int, value: int | None = None) -> bytes:
    if kind == OFFSET_OFFSET:
        return _U16.pack(kind) + _U64.pack(value or 0)
    if kind == OFFSET_TIMESTAMP:
        return _U16.pack(kind) + _I64.pack(value or 0)
    return _U16.pack(kind)


def metadata_response(corr: int, brokers: list[tuple[str, int]],
                      streams: list[tuple[str, int, int, list[int]]]) -> bytes:
    """brokers: [(host, port)] (their index is their reference); streams:
    [(name, code, leader index, [replica indexes])]; a stream that does not exist has its
    code, leader 0xFFFF and no replicas."""
    body = [_HEAD_CORR.pack(METADATA | RESPONSE_FLAG, 1, corr), _U32.pack(len(brokers))]
    for i, (host, port) in enumerate(brokers):
        body.append(_U16.pack(i) + string(host) + _U32.pack(port))
    body.append(_U32.pack(len(streams)))
    for name, code, leader, replicas in streams:
        body.append(string(name) + _U16.pack(code) + _U16.pack(leader)
                    + _U32.pack(len(replicas)) + b"".join(_U16.pack(r) for r in replicas))
    return wrap(b"".join(body))


def int_map(m: dict[str, int]) -> bytes:
    """stream_stats' map of string keys to signed 64-bit values."""
    return _U32.pack(len(m)) + b"".join(string(k) + _I64.pack(v) for k, v in m.items())


def command_versions(versions: dict[int, tuple[int, int]]) -> bytes:
    return _U32.pack(len(versions)) + b"".join(
        _U16.pack(k) + _U16.pack(lo) + _U16.pack(hi) for k, (lo, hi) in versions.items())
