# Owns: the AMQP 0-9-1 frame layer's decoding side — protocol header check, cutting the
# byte stream into frames and whole publishes (FrameDecoder). Decoding one frame's payload
# (methods, content headers, properties) is decoding.py's job, re-exported here; encoding is
# in encoding.py.
# Talks to: the connection reader (feeds socket bytes, pulls frames, hands them to one
# CommandAssembler per channel).
# Must never: import asyncio, touch a socket, or know channel state (that is the assembler's
# and the reader's). Errors are AMQP hard errors built with broker.errors.amqp_error, with
# RabbitMQ 3.10's reply codes and texts (rabbit_reader.erl / rabbit_binary_parser.erl).
"""AMQP 0-9-1 framing: sans-IO frame decoder (AMQP 0-9-1 §2.3.5, §4.2.3).

The frame constants (FRAME_*, HEARTBEAT_FRAME) are defined in encoding.py and re-exported
here for the decoder's users."""



from __future__ import annotations

import struct
from typing import Any

from pamqp import commands

from broker.errors import (
    AMQPError,
)
from broker.protocol import publish_template
from broker.protocol.decoding import (
    Command,
    ContentHeader,
    decode_header,
    decode_method,
    decode_properties,
)
from broker.protocol.encoding import (
    _FRAME_HDR,
    _HEADER_FIXED,
    _U16U16,
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_MIN_SIZE,
    FRAME_OVERHEAD,
    HEARTBEAT_FRAME,
    encode_args,
)
from broker.protocol.frame_errors import erl_binary, frame_error, unexpected
from broker.protocol.properties import (
    HotFields,
    hot_fields,
    scan_properties,
)

__all__ = [
    "FRAME_BODY", "FRAME_END", "FRAME_HEADER", "FRAME_HEARTBEAT", "FRAME_METHOD",
    "FRAME_MIN_SIZE", "FRAME_OVERHEAD", "HEARTBEAT", "HEARTBEAT_FRAME", "PROTOCOL_HEADER",
    "BadProtocolHeader", "Command", "ContentHeader", "FrameDecoder", "check_protocol_header",
    "decode_header", "decode_method", "decode_properties", "erl_binary", "unexpected_frame",
]

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
# RabbitMQ also starts 0-9-1 for the pre-errata header "AMQP 1 1 0 9" (rabbit_reader.erl).
_ACCEPTED_HEADERS = (PROTOCOL_HEADER, b"AMQP\x01\x01\x00\x09")


class _Heartbeat:
    """Sentinel type of HEARTBEAT."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "HEARTBEAT"


HEARTBEAT: Any = _Heartbeat()

_U64_U8 = struct.Struct(">QB")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_PUBLISH_ID = 60 << 16 | 40  # class basic, method publish
_PUBLISH_PREFIX = _U16U16.pack(60, 40)
_new_tuple = tuple.__new__  # Command(...) without NamedTuple's generated __new__: 0.08 µs less

Properties = commands.Basic.Properties


class BadProtocolHeader(Exception):
    """The first 8 bytes are not an AMQP 0-9-1 protocol header.

    The reader answers by writing PROTOCOL_HEADER and closing the socket, as RabbitMQ does
    (verified against 3.10: "AMQP\\0\\0\\x09\\0", "GET / HTTP/1.1", "AMQP\\0\\0\\x08\\0").
    """


def check_protocol_header(buf: bytes) -> bool | None:
    """Check the connection's first bytes.

    Returns None while fewer than 8 bytes arrived (RabbitMQ waits for 8 bytes whatever they
    are), True when the first 8 bytes are an accepted header (the caller consumes 8 bytes).
    Accepted: b"AMQP\\0\\0\\x09\\x01" and RabbitMQ's legacy 0-9-1 "AMQP\\x01\\x01\\x00\\x09".
    Raises BadProtocolHeader for anything else. Source: AMQP 0-9-1 §4.2.2, rabbit_reader.erl.
    """
    if len(buf) < 8:
        return None
    if bytes(buf[:8]) in _ACCEPTED_HEADERS:
        return True
    raise BadProtocolHeader(bytes(buf[:8]))


class FrameDecoder:
    """Bytes in, (channel, frame) out; sans-IO (like h11's receive_data/next_event).

    `feed(data)` appends socket bytes; `next_frame()` returns `(channel, frame)` or None when
    more bytes are needed. frame is a pamqp method instance, a ContentHeader, `bytes` (a body
    frame's payload) or HEARTBEAT. `frame_max` (whole-frame bytes, incl. the 8 bytes of
    overhead, as RabbitMQ counts it) may be set after connection.tune-ok.

    Errors (hard, reply codes as RabbitMQ 3.10 sends them, verified on the wire):
    501 payload size > frame_max - 8 (from the 7-byte header alone), bad frame-end octet,
    unknown frame type, heartbeat with a payload, method/header payload too short,
    undecodable arguments; 505 heartbeat on a channel other than 0, header/body on channel 0;
    540 unknown class/method. After an error the decoder is unusable (the connection closes).
    """

    __slots__ = ("frame_max", "_buf", "_pos", "_last_args", "_last_method", "_last_header",
                 "_last_prefix", "_tpl", "_tpl_method", "_tpl_hot", "_tpl_size",
                 "_tpl_channel", "_learn_skip")

    def __init__(self, frame_max: int = 131072) -> None:
        self.frame_max = frame_max  # negotiated frame_max; frames larger are a 501
        self._buf = bytearray()  # received, not yet decoded bytes start at _pos
        self._pos = 0  # read offset into _buf; compacted in feed() so buffering stays O(n)
        # the last basic.publish arguments and content header payload seen, with what they
        # decoded to: a publisher usually sends many alike, and both are immutable
        self._last_args = b""
        self._last_method: Any = None
        self._last_header: ContentHeader | None = None
        # the last whole publish's bytes up to its body: its method frame, header frame and
        # body frame header; an alike publish repeats them exactly, only the body differs
        self._last_prefix: bytes | None = None
        # a whole-publish template (publish_template.py): publishes that differ from the
        # last one only in property values of fixed size are taken with one match; with the
        # method, hot fields, body size and channel of the publish it was learnt from
        self._tpl: Any = None
        self._tpl_method: Any = None
        self._tpl_hot: HotFields | None = None
        self._tpl_size = 0
        self._tpl_channel = 0
        self._learn_skip = 0  # publishes to let pass before trying to learn again

    def feed(self, data: bytes) -> None:
        """Append bytes received from the peer."""
        pos = self._pos
        if pos:
            if pos == len(self._buf):
                self._buf.clear()
                self._pos = 0
            elif pos > 65536 or pos * 2 > len(self._buf):
                del self._buf[:pos]
                self._pos = 0
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._pos

    def next_frame(self) -> tuple[int, Any] | None:
        """The next complete frame as (channel, frame), or None if more bytes are needed.
        A basic.publish whose content header and single body frame follow complete in the
        buffer comes back whole, as a `Command` (see `_publish`)."""
        buf = self._buf
        pos = self._pos
        if len(buf) - pos < 7:
            return None
        ftype, channel, size = _FRAME_HDR.unpack_from(buf, pos)
        # RabbitMQ (rabbit_reader, ?FRAME_SIZE_FUDGE) accepts payloads up to frame_max itself
        # although it reports frame_max - 8 as the limit; the integration test checks this
        # boundary against RabbitMQ 3.10
        if self.frame_max and size > self.frame_max:
            limit = self.frame_max - FRAME_OVERHEAD
            raise frame_error(ftype, b"", f"{{frame_too_large,{size},{limit}}}")
        end = pos + 7 + size
        if len(buf) <= end:
            return None
        if (ftype == FRAME_METHOD and size > 4 and buf[end] == FRAME_END
                and _U32.unpack_from(buf, pos + 7)[0] == _PUBLISH_ID):
            prefix = self._last_prefix
            if prefix is not None and buf.startswith(prefix, pos):
                cmd = self._alike_publish()
                if cmd is not None:
                    return channel, cmd
            tpl = self._tpl
            if tpl is not None:
                m = tpl.match(buf, pos)
                if m is not None:
                    return channel, self._templated(m)
            cmd = self._whole_publish(channel, end)
            if cmd is not None:
                return channel, cmd
            self._pos = end + 1
            return channel, self._publish_method(pos + 11, end)
        payload = bytes(buf[pos + 7 : end])
        if buf[end] != FRAME_END:
            raise frame_error(ftype, payload, f"{{invalid_frame_end_marker,{buf[end]}}}")
        self._pos = end + 1
        if ftype == FRAME_BODY:
            if channel == 0:
                raise unexpected(ftype, payload)
            return channel, payload
        if ftype == FRAME_METHOD:
            return channel, decode_method(payload)
        if ftype == FRAME_HEADER:
            if channel == 0:
                raise unexpected(ftype, payload)
            return channel, decode_header(payload)
        if ftype == FRAME_HEARTBEAT and not payload:
            if channel != 0:
                raise unexpected(ftype, payload)
            return 0, HEARTBEAT
        raise frame_error(ftype, payload, "unknown_frame")

    def next_publish(self, channel: int) -> Command | None:
        """The next frames as one whole basic.publish on `channel` (see `_whole_publish`),
        consumed; or None, with nothing consumed, when they are anything else. The reader
        uses it to take a run of publishes in one go."""
        buf = self._buf
        pos = self._pos
        prefix = self._last_prefix
        if prefix is not None and buf.startswith(prefix, pos):
            cmd = self._alike_publish()
            if cmd is not None:
                return cmd
        tpl = self._tpl
        if tpl is not None and channel == self._tpl_channel:
            m = tpl.match(buf, pos)
            if m is not None:
                return self._templated(m)
        if len(buf) - pos < 11:
            return None
        ftype, fchannel, size = _FRAME_HDR.unpack_from(buf, pos)
        end = pos + 7 + size
        if (ftype != FRAME_METHOD or fchannel != channel or size <= 4 or end >= len(buf)
                or buf[end] != FRAME_END or (self.frame_max and size > self.frame_max)
                or _U32.unpack_from(buf, pos + 7)[0] != _PUBLISH_ID):
            return None
        return self._whole_publish(channel, end)

    def _alike_publish(self) -> Command | None:
        """The buffer at `_pos` starts with the last whole publish's bytes up to its body:
        the same method and header (objects reused), a body of the same size. The Command,
        consumed, once the body and its frame end are in; else None, nothing consumed."""
        buf = self._buf
        start = self._pos + len(self._last_prefix)  # type: ignore[arg-type]
        header = self._last_header
        size = header.body_size  # type: ignore[union-attr]
        if size:
            end = start + size
            if len(buf) <= end or buf[end] != FRAME_END:
                return None
            self._pos = end + 1
            return _new_tuple(Command, (self._last_method, header, bytes(buf[start:end])))
        self._pos = start
        return _new_tuple(Command, (self._last_method, header, b""))

    def _templated(self, m: Any) -> Command:
        """The publish a template matched (`m`), consumed: the template's method object, a
        header with its hot fields, the body."""
        raw, body = m.groups()
        self._pos = m.end()
        return _new_tuple(Command, (self._tpl_method, ContentHeader(
            60, self._tpl_size, None, raw, self._tpl_hot), body))

    def _learn(self, channel: int, method: Any, lead: bytes, prev: ContentHeader,
               header: ContentHeader, tail: bytes) -> None:
        """`header` follows `prev` with the same method and sizes: learn their template
        (publish_template.learn); after a pair that cannot be templated, let 32 publishes
        pass before trying again (a peer whose every publish differs pays little)."""
        if self._learn_skip:
            self._learn_skip -= 1
            return
        tpl = publish_template.learn(lead, prev.raw_properties, header.raw_properties, tail,
                                     header.body_size)
        self._tpl = tpl
        if tpl is None:
            self._learn_skip = 32
            return
        self._tpl_method = method
        self._tpl_hot = header.hot
        self._tpl_size = header.body_size
        self._tpl_channel = channel

    def _publish_method(self, args_at: int, args_end: int) -> Any:
        """The Basic.Publish whose arguments are buf[args_at:args_end]; the same object as
        the last one when the bytes are the same. Raises FrameError 501 as decode_method."""
        buf = self._buf
        last = self._last_args
        if args_end - args_at == len(last) and buf.startswith(last, args_at):
            return self._last_method
        args = bytes(buf[args_at:args_end])
        method = decode_method(_PUBLISH_PREFIX + args)
        self._last_args = args
        self._last_method = method
        self._last_prefix = None  # it held the previous method's frame
        return method

    def _whole_publish(self, channel: int, end: int) -> Command | None:
        """The basic.publish method frame at `_pos` ends at `end` (its frame-end octet).
        When its content header and its one body frame (or none, for an empty body) follow
        complete in the buffer on the same channel, well-formed, consume all of them and
        return the Command; else None, with nothing consumed (the frames then go one by one
        through the assembler, and an error in any of them is raised when it is read, as
        always). Arguments and header equal to the previous publish's reuse what those
        decoded to (a publisher sends the same ones over and over)."""
        prev_method = self._last_method
        try:
            method = self._publish_method(self._pos + 11, end)
        except AMQPError:
            return None  # raised when the frame is read on its own
        buf = self._buf
        at = end + 1
        have = len(buf)
        if have < at + 7:
            return None
        ftype, hchannel, hsize = _FRAME_HDR.unpack_from(buf, at)
        hend = at + 7 + hsize
        if (ftype != FRAME_HEADER or hchannel != channel or hsize < 14 or hend >= have
                or buf[hend] != FRAME_END or (self.frame_max and hsize > self.frame_max)):
            return None
        class_id, _weight, body_size = _HEADER_FIXED.unpack_from(buf, at + 7)
        if class_id != 60:
            return None
        header = self._last_header
        if header is not None and (header.body_size != body_size
                                   or hsize - 12 != len(header.raw_properties)
                                   or not buf.startswith(header.raw_properties, at + 19)):
            header = None
        start = self._pos
        if body_size:
            bstart = hend + 1
            if have < bstart + 7:
                return None
            ftype, bchannel, bsize = _FRAME_HDR.unpack_from(buf, bstart)
            bend = bstart + 7 + bsize
            if (ftype != FRAME_BODY or bchannel != channel or bsize != body_size
                    or bend >= have or buf[bend] != FRAME_END
                    or (self.frame_max and bsize > self.frame_max)):
                return None
            body = bytes(buf[bstart + 7 : bend])
            after = bend + 1
            body_at = bstart + 7
        else:
            body = b""
            after = body_at = hend + 1
        if header is None:
            raw = bytes(buf[at + 19 : hend])
            try:
                hot = scan_properties(raw)
            except ValueError:
                return None  # the header frame is read on its own and raises 501 then
            if hot is None:  # CC/BCC or deep nesting: decoded (and checked) now
                try:
                    props = decode_properties(raw)
                except AMQPError:
                    return None
                header = ContentHeader(60, body_size, props, raw, hot_fields(props))
            else:
                header = ContentHeader(60, body_size, None, raw, hot)
            prev = self._last_header
            self._last_header = header
            # publishes with their own properties are rarely followed by their twin: the
            # alike prefix is kept once a header repeats (saves a copy per publish)
            self._last_prefix = None
            if (prev is not None and method is prev_method and hot is not None
                    and prev.body_size == body_size and len(prev.raw_properties) == len(raw)):
                self._learn(channel, method, bytes(buf[start:at + 19]), prev, header,
                            bytes(buf[hend:body_at]))
        else:
            self._last_prefix = bytes(buf[start:body_at])  # _last_method and _last_header's
        self._pos = after
        return _new_tuple(Command, (method, header, body))


def unexpected_frame(frame: Any) -> Exception:
    """UnexpectedFrame 505 for a decoded frame the reader cannot accept where it came, with
    RabbitMQ's text "type T, all octets = <<...>>" (e.g. a frame on channel 1 before
    connection.open-ok: verified "UNEXPECTED_FRAME - type 1, all octets = <<0,20,0,10,1,48>>").
    The payload is re-encoded, so it matches the wire for canonically encoded frames."""
    if frame is HEARTBEAT:
        return unexpected(FRAME_HEARTBEAT, b"")
    if type(frame) is bytes:
        return unexpected(FRAME_BODY, frame)
    if type(frame) is ContentHeader:
        fixed = _HEADER_FIXED.pack(frame.class_id, 0, frame.body_size)
        return unexpected(FRAME_HEADER, fixed + frame.raw_properties)
    try:
        octets = encode_args(frame)
    except (TypeError, ValueError, OverflowError, struct.error):
        # a decoded value pamqp cannot encode back (e.g. a table value read as raw bytes):
        # the class and method ids still say what came (found by tests/fuzz)
        octets = _U16U16.pack(frame.index >> 16, frame.index & 0xFFFF)
    return unexpected(FRAME_METHOD, octets)
