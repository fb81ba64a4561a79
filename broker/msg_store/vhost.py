"""The message stores and queue-index root of one vhost (RabbitMQ's per-vhost
`msg_store_persistent` / `msg_store_transient` pair, `rabbit_vhost_msg_store.erl`).

Owns: the vhost's directory layout and the boot order of its stores. The server makes one per
vhost at boot and hands it to every VariableQueue of that vhost; it never touches messages.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from collections.abc import Iterable

from broker import replication_hook
from broker.dir_names import base36
from broker.msg_store.store import MessageStore


def vhost_dir_name(vhost: str) -> str:
    """Directory name of a vhost: md5 of its UTF-8 name, in base 36 (RabbitMQ names vhost
    directories by a hash so any vhost name is a safe path)."""
    return base36(hashlib.md5(vhost.encode()).digest())


class VhostStores:
    """The two stores of one vhost and its queue-index root.

    Layout: `<data_dir>/vhosts/<md5-base36 of vhost>/` holding `msg_store_persistent/`,
    `msg_store_transient/` and `queues/` (one directory per queue index). Boot: construct,
    then `recover()` once, before any queue recovers; shutdown: `close()` after every queue
    terminated. Store options (file_size_limit, fsync, ...) apply to both stores, except
    that the transient store never fsyncs.
    """

    def __init__(self, data_dir: str, vhost: str, **store_options: object) -> None:
        self.vhost = vhost
        self.root = os.path.join(data_dir, "vhosts", vhost_dir_name(vhost))
        self.queues_dir = os.path.join(self.root, "queues")  # parent of each queue's index
        os.makedirs(self.queues_dir, exist_ok=True)
        transient_options = dict(store_options, fsync=False)
        self.persistent = MessageStore(
            os.path.join(self.root, "msg_store_persistent"), **store_options  # type: ignore[arg-type]
        )
        self.transient = MessageStore(
            os.path.join(self.root, "msg_store_transient"), **transient_options  # type: ignore[arg-type]
        )

    def recover(self, keep_queues: Iterable[str] | None = None) -> bool:
        """Boot: wipe the transient store; with `keep_queues` (names of this vhost's durable
        queues, from the definitions), delete every other queue-index directory first (deleted
        or non-durable queues); then recover the persistent store (snapshot if clean, else a
        scan with ref counts rebuilt from the remaining queue indexes). Returns True if the
        store was clean."""
        from broker.queue_index.files import count_store_refs, queue_dir_name

        self.transient.wipe()
        if keep_queues is not None:
            keep = {queue_dir_name(self.vhost, q) for q in keep_queues}
            for name in os.listdir(self.queues_dir):
                if name not in keep:
                    shutil.rmtree(os.path.join(self.queues_dir, name), ignore_errors=True)
                    replication_hook.deleted(os.path.join(self.queues_dir, name))
        return self.persistent.recover(lambda: count_store_refs(self.queues_dir))

    def close(self) -> None:
        """Clean shutdown of both stores (call after every queue's `terminate`)."""
        self.persistent.close()
        self.transient.close()

    def discard(self, data_dir: str) -> str:
        """The vhost is deleted (call after every queue's `terminate(delete=True)`): close
        both stores without a flush or a snapshot (nothing in them is wanted), then move the
        vhost's directory into `<data_dir>/deleted/` under a fresh name, so that the vhost
        can be created again at once. Returns the moved directory, for the caller to remove
        off the event loop (`remove_discarded`); a directory left there by a crash is
        removed at the next start."""
        self.persistent.abandon()
        self.transient.abandon()
        aside = os.path.join(data_dir, DISCARDED, uuid.uuid4().hex)
        os.makedirs(os.path.dirname(aside), exist_ok=True)
        try:
            os.rename(self.root, aside)
        except FileNotFoundError:
            os.makedirs(aside)  # never written to: nothing to move
        replication_hook.deleted(self.root)
        return aside


DISCARDED = "deleted"  # <data_dir>/deleted/: deleted vhosts' directories awaiting removal


def remove_discarded(path: str) -> None:
    """Remove `path` (one directory `VhostStores.discard` moved aside, or the whole
    `<data_dir>/deleted/` at boot): blocking, for a worker thread."""
    shutil.rmtree(path, ignore_errors=True)
