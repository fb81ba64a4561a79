"""Every worker's connections, as the other workers of one broker know them (issue 47 item 4,
docs/multicore.md "One broker to operators"; RabbitMQ's rabbit_connection_tracking keeps
the same per node).

Owns, in every worker: telling the others when one of its connections opens or goes, with
its (vhost, user), and counting theirs for the connection limits (`count_elsewhere`); the
same for the open channels of users with a max-channels limit (`channels_elsewhere`);
closing one of its connections when worker 0's management API asks ("close_conn"). In
worker 0: the other workers' connections as `ReportedConn`s (told at once when they open
and go, refreshed by each report) and their own figures (reports.worker_view), which the
management API lists (`remote_connections`, `worker_views`). Talks to: the worker's mesh,
broker/workers/runtime.py (which numbers connections and feeds it the reports). Must
never: keep a connection's state beyond what the API shows.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker.management.rates import RateSampler
from broker.workers import reports
from broker.workers.mesh import Mesh
from broker.workers.reports import ConnRow, ReportedConn

if TYPE_CHECKING:
    from broker.reader import Reader
    from broker.server import Broker
    from broker.started import ReportedConnection

OWNER = 0  # the worker whose management API lists every connection


class ConnectionTracking:
    """Worker `index` of `count`; `serial(reader)` numbers one of our connections as the
    others name it, `reader_of(serial)` finds it again (None once it is gone)."""

    def __init__(self, index: int, count: int, mesh: Mesh, serial: Callable[[Any], int],
                 reader_of: Callable[[int], Any]) -> None:
        self.index = index
        self.count = count
        self.mesh = mesh
        self.serial = serial
        self.reader_of = reader_of
        self.broker: Broker | None = None  # set before it starts
        # every worker: the others' open connections by (vhost, user), as they told them
        self._elsewhere: dict[int, Counter[tuple[str, str]]] = defaultdict(Counter)
        self._told_open: dict[Reader, tuple[str, str]] = {}  # ours, as we told them
        # worker 0: the others' connections ((worker, serial) ->) and their own figures
        self.reported: dict[tuple[int, int], ReportedConn] = {}
        self.views: dict[int, dict[str, Any]] = {}
        mesh.on("conn_up", lambda peer, record: self.conn_up(peer, record[1]))
        mesh.on("conn_gone", self._on_gone)
        mesh.on("conn_count", self._on_count)
        mesh.on("close_conn", self._on_close)
        # every worker: the others' open channels of each user with a max-channels limit
        self._user_channels: dict[int, dict[str, int]] = defaultdict(dict)
        self._told_channels: dict[str, int] = {}  # ours, as we last told them
        mesh.on("user_channels", self._on_user_channels)

    # -- our connections -----------------------------------------------------------------------
    def opened(self, reader: Reader) -> None:
        """One of our connections is open: every other worker counts it for the connection
        limits; worker 0's management API lists it now (the reports keep it up to date)."""
        assert reader.vhost is not None and self.broker is not None
        self._told_open[reader] = (reader.vhost.name, reader.username)
        self._tell_count(reader.vhost.name, reader.username, 1)
        if self.index != OWNER:
            self.mesh.send(OWNER, ("conn_up", reports.connection_row(
                self.broker.started(), RateSampler(), reader, self.serial(reader))))

    def gone(self, reader: Reader, serial: int | None) -> None:
        """One of our connections closed (`serial`: its number, if it had one)."""
        told = self._told_open.pop(reader, None)
        if told is not None:
            self._tell_count(*told, -1)
        if serial is not None and self.index != OWNER:  # the API stops listing it now
            self.mesh.send(OWNER, ("conn_gone", serial))

    def _tell_count(self, vhost: str, username: str, delta: int) -> None:
        for peer in range(self.count):
            if peer != self.index:
                self.mesh.send(peer, ("conn_count", vhost, username, delta))

    def user_channels(self, username: str, count: int) -> None:
        """We hold `count` open channels of `username`, a user with a max-channels limit
        (Broker.channels_changed): the other workers count them at their channel.open."""
        if self._told_channels.get(username) == count:
            return
        self._told_channels[username] = count
        for peer in range(self.count):
            if peer != self.index:
                self.mesh.send(peer, ("user_channels", username, count))

    def channels_elsewhere(self, username: str) -> int:
        """Open channels of `username` in the other workers, as they last told them (for
        users with a max-channels limit; a limit set just now counts them once each worker
        has applied it and told its own)."""
        return sum(counts.get(username, 0) for counts in self._user_channels.values())

    def _on_user_channels(self, peer: int, record: tuple) -> None:
        _, username, count = record
        self._user_channels[peer][username] = count

    def _on_close(self, peer: int, record: tuple) -> None:
        """Worker 0's management API closes one of our connections."""
        _, serial, code, text = record
        reader = self.reader_of(serial)
        if reader is not None:
            reader.close(code, text)

    # -- the others' connections -----------------------------------------------------------------
    def _on_count(self, peer: int, record: tuple) -> None:
        _, vhost, username, delta = record
        self._elsewhere[peer][(vhost, username)] += delta

    def _on_gone(self, peer: int, record: tuple) -> None:
        self.reported.pop((peer, record[1]), None)

    def count_elsewhere(self, vhost: str, username: str) -> tuple[int, int, int]:
        """(all, in `vhost`, of `username`) open connections of the other workers, as they
        told them (Broker.connections_elsewhere). A connection two workers admit in the
        same instant can pass a limit by one, as in a RabbitMQ cluster, whose nodes track
        their connections apart."""
        total = in_vhost = of_user = 0
        for counts in self._elsewhere.values():
            for (v, u), n in counts.items():
                total += n
                in_vhost += n if v == vhost else 0
                of_user += n if u == username else 0
        return total, in_vhost, of_user

    def conn_up(self, peer: int, row: ConnRow) -> None:
        """Worker 0: connection `row` of worker `peer` (opened, or in a report)."""
        conn = self.reported.get((peer, row[0])) or ReportedConn(peer, row[0], self.mesh.send)
        conn.update(row)
        self.reported[(peer, row[0])] = conn

    def report(self, peer: int, conns: list[ConnRow], view: dict[str, Any]) -> None:
        """Worker 0: `peer`'s periodic report: its connections now and its own figures."""
        self.views[peer] = view
        listed = {(peer, row[0]) for row in conns}
        for key in [k for k in self.reported if k[0] == peer and k not in listed]:
            del self.reported[key]
        for row in conns:
            self.conn_up(peer, row)

    def remote_connections(self) -> list[ReportedConnection]:
        return list(self.reported.values())

    def worker_views(self) -> list[dict[str, Any]]:
        """Every live worker's view (reports.worker_view): ours now, the others' as last
        reported, by index."""
        assert self.broker is not None
        return [reports.worker_view(self.broker, self.index),
                *(self.views[i] for i in sorted(self.views))]

    # -- a peer died, a peer came back ---------------------------------------------------------
    def peer_lost(self, peer: int) -> None:
        """Its connections died with it."""
        self._elsewhere.pop(peer, None)
        self._user_channels.pop(peer, None)
        for key in [k for k in self.reported if k[0] == peer]:
            del self.reported[key]
        self.views.pop(peer, None)

    def peer_back(self, peer: int) -> None:
        """A restarted worker is told our open connections."""
        for vhost, username in self._told_open.values():
            self.mesh.send(peer, ("conn_count", vhost, username, 1))
        for username, count in self._told_channels.items():
            self.mesh.send(peer, ("user_channels", username, count))
