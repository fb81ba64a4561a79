"""Byte format of a queue index journal (`journal.jif`), after RabbitMQ's v1
`rabbit_queue_index.erl` (`?PUB_PERSIST_JPREFIX` etc.), with a CRC32 per publish entry.

Owns: encoding and parsing journal entries. `index.QueueIndex` appends them and replays them;
this module keeps no state and does no I/O beyond what its callers hand it.

Every entry starts with a 64-bit big-endian header: Prefix:2 bits | SeqId:62 bits.

    Prefix 00  persistent publish   header | MsgId:16 | Expiry:u64 | Size:u32 | EmbeddedSize:u32
    Prefix 01  transient publish      | Embedded:EmbeddedSize bytes | CRC32:u32
    Prefix 10  deliver              header alone (8 bytes)
    Prefix 11  ack                  header alone (8 bytes)

Expiry is µs since the epoch, 0 = none. Size is the message body size in bytes. Embedded is the
whole message (`storage_codec` bytes) when it is embedded in the index, else empty and the body
is in the message store under MsgId. CRC32 (zlib) covers the publish entry from its header to
the end of Embedded: a torn or zeroed tail (all zeros read as a persistent publish of seq 0,
whose CRC cannot match) is detected instead of misread. Parsing stops at the first entry that
is incomplete or fails its CRC; that offset is the torn tail the index truncates.

Durability: entries reach the file on `QueueIndex.flush`/`sync` (write(2)) and are durable after
the journal fsync that `sync` runs on a worker thread.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

PUB_PERSIST = 0b00
PUB_TRANS = 0b01
DEL = 0b10
ACK = 0b11
SEQ_BITS = 62
SEQ_MASK = (1 << SEQ_BITS) - 1
HEADER = struct.Struct(">Q")
PUB_FIXED = struct.Struct(">Q16sQII")  # header, msg_id, expiry, size, embedded_size
PUB_OVERHEAD = PUB_FIXED.size + 4  # 44 bytes + embedded
_CRC = struct.Struct(">I")


class PubRecord(NamedTuple):
    """A publish as the index stores it.

    msg_id: 16 bytes. is_persistent: journal prefix 00 vs 01. expiry_us: µs since epoch,
    0 = none. size: body bytes. embedded: the storage_codec bytes of the whole message, or b""
    when the body is in the message store.
    """

    msg_id: bytes
    is_persistent: bool
    expiry_us: int
    size: int
    embedded: bytes


def encode_publish(seq_id: int, pub: PubRecord) -> bytes:
    """A publish entry with its CRC32 (44 + len(embedded) bytes)."""
    return b"".join(publish_parts(seq_id, pub))


def publish_parts(seq_id: int, pub: PubRecord) -> tuple[bytes, bytes, bytes]:
    """A publish entry as (header, embedded, CRC32) pieces, for a gathered write (writev)
    that copies the embedded message once, into the page cache."""
    head = PUB_FIXED.pack(
        ((PUB_PERSIST if pub.is_persistent else PUB_TRANS) << SEQ_BITS) | seq_id,
        pub.msg_id, pub.expiry_us, pub.size, len(pub.embedded))
    return head, pub.embedded, _CRC.pack(zlib.crc32(pub.embedded, zlib.crc32(head)))


def encode_deliver(seq_id: int) -> bytes:
    """An 8-byte deliver entry."""
    return HEADER.pack((DEL << SEQ_BITS) | seq_id)


def encode_ack(seq_id: int) -> bytes:
    """An 8-byte ack entry."""
    return HEADER.pack((ACK << SEQ_BITS) | seq_id)


# parsed entry: (kind, seq_id, PubRecord or None); kind is one of the prefixes, publishes of
# both kinds are reported as PUB_PERSIST/PUB_TRANS.
Entry = tuple[int, int, PubRecord | None]


def parse(data: bytes | memoryview) -> tuple[list[Entry], int]:
    """Parse journal bytes; returns (entries in file order, valid_end offset)."""
    entries: list[Entry] = []
    pos = 0
    end = len(data)
    while pos + HEADER.size <= end:
        (header,) = HEADER.unpack_from(data, pos)
        prefix = header >> SEQ_BITS
        seq_id = header & SEQ_MASK
        if prefix in (DEL, ACK):
            entries.append((prefix, seq_id, None))
            pos += HEADER.size
            continue
        if pos + PUB_FIXED.size > end:
            break
        _h, msg_id, expiry, size, emb_size = PUB_FIXED.unpack_from(data, pos)
        stop = pos + PUB_FIXED.size + emb_size + 4
        if stop > end:
            break
        (crc,) = _CRC.unpack_from(data, stop - 4)
        if zlib.crc32(data[pos : stop - 4]) != crc:
            break
        embedded = bytes(data[pos + PUB_FIXED.size : stop - 4])
        entries.append(
            (prefix, seq_id, PubRecord(msg_id, prefix == PUB_PERSIST, expiry, size, embedded))
        )
        pos = stop
    return entries, pos
