"""Accepted connections handed to the worker with the fewest (issue 47, docs/multicore.md
"Connections: one acceptor, fewest connections").

Owns: `Acceptor`, in the node process: it accepts on the listeners, reads nothing, and passes
each socket's file descriptor (`socket.send_fds`, SCM_RIGHTS) to the live worker with the
fewest connections, as Seastar's connection distribution does (SO_REUSEPORT's 4-tuple hash
leaves workers idle when there are few connections: 16 producers + 16 consumers on 16
workers put 4.8 on the busiest on average, and none on about 2). `HandOffReceiver`, in a
worker: it takes each descriptor with the listener's name and gives the socket to `adopt`
(which starts a reader on it with `loop.connect_accepted_socket`), and reports each close
back so the counts stay true. Talks to: the supervisor (which gives it one SOCK_SEQPACKET
socket pair per worker) and the worker's listener code. Must never: read from a client's
socket, or hand a connection to a worker it was told is gone.

Wire format on the hand-off socket (SOCK_SEQPACKET: one message per datagram):
node → worker: b"A" + listener name (ASCII), with one descriptor attached;
node → worker: b"L" + a worker's index (ASCII digits), with one descriptor attached: this
worker's end of a new link to that worker, which restarted;
worker → node: b"C" + listener name, one per connection closed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

log = logging.getLogger("broker.workers")

ACCEPT_BATCH = 64  # connections accepted per readiness callback before yielding


def handoff_pair() -> tuple[socket.socket, socket.socket]:
    """(node end, worker end) of one worker's hand-off channel, both non-blocking."""
    node, worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    node.setblocking(False)
    worker.setblocking(False)
    return node, worker


class Acceptor:
    """Accepts on the listeners given to `serve` and hands each connection to the live worker
    with the fewest (ties to the lowest index). `connections[i]` counts what worker i holds.
    With no live worker, a connection is closed at once (the client sees a reset and
    retries, as when a RabbitMQ node is starting)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._workers: dict[int, socket.socket] = {}  # live worker -> its hand-off socket
        self.connections: dict[int, int] = {}  # live worker -> connections it holds
        self._listeners: list[socket.socket] = []  # sockets we accept on
        self.handed = 0  # connections handed out since start (tests, metrics)

    def add_worker(self, index: int, sock: socket.socket) -> None:
        """Worker `index` is up; `sock` is the node end of its hand-off pair."""
        self._workers[index] = sock
        self.connections[index] = 0
        self._loop.add_reader(sock.fileno(), self._read_notes, index)

    def send_link(self, index: int, peer: int, sock: socket.socket) -> bool:
        """Give live worker `index` its end of a new link to restarted worker `peer`
        (False when `index` is gone)."""
        hand = self._workers.get(index)
        if hand is None:
            return False
        try:
            socket.send_fds(hand, [b"L" + str(peer).encode()], [sock.fileno()])
        except OSError as exc:
            log.warning("new link to worker %d for worker %d failed: %s", peer, index, exc)
            return False
        return True

    def worker_gone(self, index: int) -> None:
        """Worker `index` died: nothing more is handed to it (its connections died with it)."""
        sock = self._workers.pop(index, None)
        self.connections.pop(index, None)
        if sock is not None:
            self._loop.remove_reader(sock.fileno())
            sock.close()

    def serve(self, listener: socket.socket, name: str, worker: int | None = None) -> None:
        """Accept on `listener` (bound and listening) and hand its connections out, tagged
        `name` (broker/listeners.py's AMQP, AMQPS, ...) so that the worker knows which
        protocol and TLS settings to serve them with; all to `worker` when given (the
        stream protocol's, to worker 0), uncounted: the worker reports no close for them."""
        listener.setblocking(False)
        self._listeners.append(listener)
        self._loop.add_reader(listener.fileno(), self._accept, listener,
                              name.encode("ascii"), worker)

    def close(self) -> None:
        """Stop accepting (the listeners are closed) and drop the workers' channels."""
        for listener in self._listeners:
            self._loop.remove_reader(listener.fileno())
            listener.close()
        self._listeners = []
        for index in list(self._workers):
            self.worker_gone(index)

    def pick(self) -> int | None:
        """The live worker with the fewest connections, the lowest index among equals."""
        if not self.connections:
            return None
        return min(self.connections, key=lambda i: (self.connections[i], i))

    # -- callbacks ---------------------------------------------------------------------------
    def _accept(self, listener: socket.socket, name: bytes, worker: int | None) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and the like: RabbitMQ's ranch logs and goes on
                log.warning("accept on %s failed: %s", name.decode(), exc)
                return
            with conn:
                self.hand(conn, name, worker)

    def hand(self, conn: socket.socket, name: bytes, worker: int | None = None) -> bool:
        """Hand `conn` (the caller closes its copy) to `worker`, uncounted, or to the
        least loaded worker that takes it; False when none did (the client sees a reset
        and retries)."""
        if worker is None:
            return self._hand(conn, name)
        hand = self._workers.get(worker)
        if hand is None:
            return False
        try:
            socket.send_fds(hand, [b"A" + name], [conn.fileno()])
        except OSError as exc:  # full (BlockingIOError) or its end closed
            log.warning("hand-off to worker %d failed: %s", worker, exc)
            return False
        self.handed += 1
        return True

    def _hand(self, conn: socket.socket, name: bytes) -> bool:
        """Hand `conn` to the least loaded worker that takes it. A worker whose hand-off
        socket is full (it has not read a whole buffer of hand-offs: stopped or far
        behind) is passed over for this connection."""
        for index in sorted(self.connections, key=lambda i: (self.connections[i], i)):
            try:
                socket.send_fds(self._workers[index], [b"A" + name], [conn.fileno()])
            except BlockingIOError:
                log.warning("worker %d is not taking connections; trying another", index)
                continue
            except OSError as exc:  # its end is closed: it died (the supervisor will say)
                log.warning("hand-off to worker %d failed: %s", index, exc)
                continue
            self.connections[index] += 1
            self.handed += 1
            return True
        return False

    def _read_notes(self, index: int) -> None:
        sock = self._workers.get(index)
        while sock is not None:
            try:
                note = sock.recv(256)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                note = b""
            if not note:  # the worker's end closed
                self.worker_gone(index)
                return
            if note[:1] == b"C" and index in self.connections:
                self.connections[index] = max(0, self.connections[index] - 1)


class HandOffReceiver:
    """A worker's end: each handed socket goes to `adopt(sock, listener_name)`; `closed(name)`
    tells the node a connection from that listener is gone."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                 adopt: Callable[[socket.socket, str], None],
                 on_node_gone: Callable[[], None],
                 on_link: Callable[[int, socket.socket], None] | None = None) -> None:
        self._loop = loop
        self._sock = sock
        self._adopt = adopt  # starts serving an accepted socket
        self._on_node_gone = on_node_gone  # the node process died: the worker stops
        self._on_link = on_link  # a new link to a restarted worker
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._read)

    def closed(self, name: str) -> None:
        """A connection that came from listener `name` closed."""
        try:
            self._sock.send(b"C" + name.encode("ascii"))
        except OSError:  # the node is gone; _read will see it
            pass

    def close(self) -> None:
        if self._sock.fileno() < 0:
            return  # closed already (the node went first)
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()

    def _read(self) -> None:
        while True:
            try:
                msg, fds, _flags, _addr = socket.recv_fds(self._sock, 256, 4)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                msg, fds = b"", []
            if not msg and not fds:
                self.close()
                self._on_node_gone()
                return
            for fd in fds:
                sock = socket.socket(fileno=fd)
                if msg[:1] not in (b"A", b"L") or len(fds) != 1:
                    log.error("hand-off message %r with %d descriptors: dropped", msg, len(fds))
                    sock.close()
                elif msg[:1] == b"L" and self._on_link is not None:
                    self._on_link(int(msg[1:]), sock)
                elif msg[:1] == b"A":
                    self._adopt(sock, msg[1:].decode("ascii"))
                else:
                    sock.close()
