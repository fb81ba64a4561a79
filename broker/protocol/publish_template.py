# Owns: learning a whole-publish template (method frame, content header frame and body frame
# as one regular expression) from two consecutive publishes, and the capped cache of the
# compiled templates.
# Talked to by: broker/protocol/framing.py `FrameDecoder`, when a publish's properties differ
# from the previous publish's.
# Must never: accept a publish that `FrameDecoder._whole_publish` plus `scan_properties` would
# refuse or read differently, compile a pattern from more than MAX_PIECES pieces, or grow
# without bound.
"""Whole-publish templates (issue 26: publishes that carry their own properties).

Real publishers tag each message: a distinct `message_id`, a `timestamp`, a `correlation_id`,
a task id in the `headers` table. Their publishes repeat everything else byte for byte: the
method frame, the header frame's sizes and flags, the other properties, the body frame's
header. When two consecutive publishes on a channel have the same method frame, the same
body size and property lists of one length that differ only in the values of

- the shortstr properties the broker never reads (`content_type`, `content_encoding`,
  `correlation_id`, `message_id`, `type`, `app_id`, `cluster_id`), their length octets equal,
- the `timestamp`,
- the `headers` table, where `table_check` has learnt the table's layout (lengths, keys and
  type tags literal, values gaps),

the three frames are compiled into one regular expression: literal bytes, `.{n}` gaps for
those values, a group for the property list and one for the body. A later publish that
matches it is the same publish with other values in the gaps, and is taken with one match
instead of a frame-by-frame parse and a property scan (about 0.7 µs against 3.4 µs,
bench/micro/codec.py).

A match implies what the full path would conclude: every frame type, channel, size and
frame-end octet is literal; the properties the broker reads (`delivery_mode`, `priority`,
`reply_to`, `expiration`, `user_id`) are literal, so the learnt publish's scan result (its
`hot` fields) holds; a gap holds bytes the scan only skips by a literal length (a shortstr's
characters need not be UTF-8 there, RabbitMQ carries them as received); and a table gap is
`table_check`'s own layout, whose match already stands for the table walk. RabbitMQ has no
such template: its channel parses every publish (rabbit_binary_parser); the result on the
wire and in the queues is the same.
"""

from __future__ import annotations

import re
import struct
from typing import Any

from broker.protocol.table_check import learnt_layout

_U32 = struct.Struct(">I")

# the 14 basic properties of AMQP 0-9-1 in list order (flag bit) and their value shapes
_SHORTSTR_GAP = 0x8000 | 0x4000 | 0x0400 | 0x0080 | 0x0020 | 0x0008 | 0x0004
_SHORTSTR_HOT = 0x0200 | 0x0100 | 0x0010  # reply_to, expiration, user_id: the broker reads them
_OCTET = 0x1000 | 0x0800  # delivery_mode, priority
_HEADERS = 0x2000
_TIMESTAMP = 0x0040
_ORDER = (0x8000, 0x4000, 0x2000, 0x1000, 0x0800, 0x0400, 0x0200, 0x0100, 0x0080, 0x0040,
          0x0020, 0x0010, 0x0008, 0x0004)

MAX_PIECES = 64  # literal pieces and gaps of a template that may be compiled
_CAP = 64  # compiled templates kept before the cache is cleared
_compiled: dict[tuple[Any, ...], re.Pattern[bytes]] = {}


def _spans(raw: bytes) -> list[tuple[int, int, int]] | None:
    """(flag, start, end) of each property present in `raw` (flags + list), in list order;
    None for a second flags word or a list that runs past its end (not templated)."""
    if len(raw) < 2 or raw[1] & 1:
        return None
    flags = raw[0] << 8 | raw[1]
    pos = 2
    end = len(raw)
    spans = []
    for flag in _ORDER:
        if not flags & flag:
            continue
        if flag & _OCTET:
            stop = pos + 1
        elif flag == _TIMESTAMP:
            stop = pos + 8
        elif flag == _HEADERS:
            if pos + 4 > end:
                return None
            stop = pos + 4 + _U32.unpack_from(raw, pos)[0]
        else:  # a shortstr
            if pos >= end:
                return None
            stop = pos + 1 + raw[pos]
        if stop > end:
            return None
        spans.append((flag, pos, stop))
        pos = stop
    return spans if pos == end else None


def learn(lead: bytes, prev_raw: bytes, raw: bytes, tail: bytes,
          body_size: int) -> re.Pattern[bytes] | None:
    """The template of a publish whose bytes are `lead` (method frame, then the header
    frame up to its property list), `raw` (the property list), `tail` (the header frame's
    end octet and, when `body_size` > 0, the body frame's 7-byte header), a body of
    `body_size` bytes and a frame-end octet. `prev_raw` is the previous publish's property
    list (same lead, tail and body size). Returns a compiled pattern whose group 1 is the
    property list and group 2 the body (empty for an empty body), or None when the two lists
    differ where a template may not have a gap (module docstring)."""
    if len(prev_raw) != len(raw) or raw[:2] != prev_raw[:2]:
        return None
    spans = _spans(raw)
    if spans is None or spans != _spans(prev_raw):
        return None
    pieces: list[Any] = [raw[:2]]
    gaps = 0
    for flag, start, stop in spans:
        value = raw[start:stop]
        if value == prev_raw[start:stop]:
            pieces.append(value)
        elif flag & _SHORTSTR_GAP:
            pieces.append(value[:1])
            pieces.append(stop - start - 1)
            gaps += 1
        elif flag == _TIMESTAMP:
            pieces.append(8)
            gaps += 1
        elif flag == _HEADERS:
            layout = learnt_layout(raw, start, stop)
            if layout is None:
                return None
            pieces.append((layout,))  # a regular expression already
            gaps += 1
        else:  # a property the broker reads, or a table whose layout is not learnt
            return None
    if not gaps or len(pieces) > MAX_PIECES:
        return None
    key = (lead, tuple(pieces), tail, body_size)
    pattern = _compiled.get(key)
    if pattern is None:
        body = b"(.{%d})\xce" % body_size if body_size else b"()"
        source = b"".join(
            re.escape(p) if p.__class__ is bytes else
            b".{%d}" % p if p.__class__ is int else b"(?:" + p[0] + b")"
            for p in pieces if p != 0)
        pattern = re.compile(b"(?s)" + re.escape(lead) + b"(" + source + b")"
                             + re.escape(tail) + body)
        if len(_compiled) >= _CAP:
            _compiled.clear()
        _compiled[key] = pattern
    return pattern
