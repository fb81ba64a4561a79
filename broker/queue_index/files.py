"""A queue index's files read without a live index: where a queue's index lives
(`queue_dir_name`), replaying a journal and loading a segment at recovery (a torn tail cut
and logged), and counting the message-store references every index on disk holds (the
store's recovery after an unclean shutdown). RabbitMQ's `rabbit_queue_index` does both jobs
in one module; here the live index (`index.py`: buffering, sync, fold, terms) and the
readers of its files part, since the message store's recovery needs only the latter.

Owns: reading `journal.jif` and `<N>.idx` (formats in `journal.py` and `segment.py`).
Talks to: `index.py` (recovery and reads), `msg_store/vhost.py` (reference counts at boot).
Must never: write an entry (only `truncate=True` cuts a torn journal tail at recovery).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections import Counter
from collections.abc import Iterator

from broker.dir_names import base36
from broker.queue_index import journal as jf
from broker.queue_index import segment as sf
from broker.queue_index.segment import SegEntry, segment_of

log = logging.getLogger("broker.queue")

JOURNAL = "journal.jif"
ABSENT = SegEntry()  # stands for "no entry" when merging segment and journal (never mutated)


def queue_dir_name(vhost: str, queue: str) -> str:
    """md5 of `u16 len(vhost) | vhost | queue` (UTF-8), in base 36 (0-9A-Z): a safe, unique
    directory name per (vhost, queue), as RabbitMQ's `queue_name_to_dir_name`."""
    v = vhost.encode()
    return base36(hashlib.md5(len(v).to_bytes(2, "big") + v + queue.encode()).digest())



def load_journal(path: str, truncate: bool) -> dict[int, SegEntry]:
    """Replay a journal file into {seq_id: SegEntry}; with truncate, cut a torn tail (logged)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return {}
    entries, valid_end = jf.parse(data)
    if valid_end < len(data):
        log.warning("%s: torn journal entry at offset %d (size %d); truncating", path, valid_end, len(data))
        if truncate:
            with open(path, "r+b") as f:
                f.truncate(valid_end)
                os.fsync(f.fileno())
    out: dict[int, SegEntry] = {}
    for kind, seq, pub in entries:
        e = out.get(seq)
        if e is None:
            e = out[seq] = SegEntry()
        if pub is not None:
            e.pub = pub
        elif kind == jf.DEL:
            e.delivered = True
        else:
            e.acked = True
    return out


def load_segment(directory: str, seg: int, truncate: bool) -> dict[int, SegEntry]:
    """Entries of segment `seg`; with truncate, cut a torn last block (logged)."""
    entries, valid_end, size = sf.load(directory, seg)
    if valid_end < size:
        path = os.path.join(directory, sf.file_name(seg))
        log.warning("%s: torn segment block at offset %d (size %d); truncating", path, valid_end, size)
        if truncate:
            with open(path, "r+b") as f:
                f.truncate(valid_end)
                os.fsync(f.fileno())
    return entries


def count_store_refs(queues_dir: str) -> Counter[bytes]:
    """msg_id -> number of un-acked persistent, non-embedded publishes across every queue
    index under `queues_dir`; read-only. The message store rebuilds its ref counts from this
    after an unclean shutdown (RabbitMQ's `queue_index_walker`)."""
    refs: Counter[bytes] = Counter()
    if not os.path.isdir(queues_dir):
        return refs
    for name in os.listdir(queues_dir):
        qdir = os.path.join(queues_dir, name)
        if not os.path.isdir(qdir):
            continue
        journal = load_journal(os.path.join(qdir, JOURNAL), truncate=False)
        for _seg, jentries, on_disk in segments_with_journal(qdir, journal, False):
            for seq in on_disk.keys() | jentries.keys():
                old = on_disk.get(seq, ABSENT)
                new = jentries.get(seq, ABSENT)
                pub = old.pub or new.pub
                if (pub is not None and pub.is_persistent and not pub.embedded
                        and not (old.acked or new.acked)):
                    refs[pub.msg_id] += 1
    return refs


def segments_with_journal(
    directory: str, journal: dict[int, SegEntry], truncate: bool
) -> Iterator[tuple[int, dict[int, SegEntry], dict[int, SegEntry]]]:
    """(segment, its entries in `journal`, the segment file's entries) for every segment
    that has a file or journal entries, ascending; one segment file is read per step."""
    by_seg: dict[int, dict[int, SegEntry]] = {}
    for seq, e in journal.items():
        by_seg.setdefault(segment_of(seq), {})[seq] = e
    for seg in sorted(set(sf.list_segments(directory)) | by_seg.keys()):
        yield seg, by_seg.get(seg, {}), load_segment(directory, seg, truncate)

