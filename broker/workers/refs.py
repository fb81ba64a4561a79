"""Names for a connection or a channel that lives in another worker process (issue 47).

Owns: `ConnRef` and `ChannelRef`, and interning ConnRefs so that code that compares an
exclusive queue's owner by identity (`queue.exclusive_owner is owner`, broker/vhost.py) works
unchanged when the owner is a connection of another worker. Talks to: the worker runtime and
the remote proxies. Must never: hold a connection object.
"""

from __future__ import annotations

from typing import NamedTuple


class ConnRef(NamedTuple):
    """Connection `serial` of worker `worker` (serials count from 1 in each worker). The
    attributes an exclusive owner is read for (management listings) are those of a closed
    connection: no peer, no transport."""

    worker: int
    serial: int

    @property
    def peer(self) -> None:
        return None

    @property
    def transport(self) -> None:
        return None

    @property
    def username(self) -> str:
        return ""


class ChannelRef(NamedTuple):
    """Channel `number` of connection `serial` of worker `worker`."""

    worker: int
    serial: int
    number: int


_INTERNED: dict[tuple[int, int], ConnRef] = {}


def conn_ref(worker: int, serial: int) -> ConnRef:
    """The one ConnRef object for (worker, serial) in this process, so `is` compares them."""
    ref = _INTERNED.get((worker, serial))
    if ref is None:
        ref = _INTERNED[(worker, serial)] = ConnRef(worker, serial)
    return ref


def forget(worker: int, serial: int) -> None:
    """The connection closed: its ConnRef is no longer needed here."""
    _INTERNED.pop((worker, serial), None)


def forget_worker(worker: int) -> list[ConnRef]:
    """Every ConnRef of `worker` (it died), removed."""
    gone = [ref for key, ref in _INTERNED.items() if key[0] == worker]
    for ref in gone:
        del _INTERNED[(ref.worker, ref.serial)]
    return gone
