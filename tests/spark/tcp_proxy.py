"""A TCP proxy in front of the broker whose connections a test can cut or pause: a portable
way to make the data source lose its connection mid-stream, or to make the broker look paused
(connections stay open, nothing moves: as a SIGSTOPped broker), without a broker admin API."""

from __future__ import annotations

import socket
import threading
import time
import urllib.parse


class TcpProxy:
    """Forwards 127.0.0.1:<port> to `target_url`'s host:port; `cut()` drops every live
    connection (both directions), new connections are still accepted afterwards. `pause()`
    stops forwarding on every connection, new ones included (TCP connects still succeed, as
    with a stopped broker process), until `resume()`; `pause_after(n)` pauses once any one
    connection has carried more than `n` bytes from the broker."""

    def __init__(self, target_url: str) -> None:
        parts = urllib.parse.urlsplit(target_url)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 5672)
        self._parts = parts
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []  # every live client and upstream socket
        self._running = True
        self.accepted = 0  # connections accepted so far
        self._flowing = threading.Event()  # cleared while paused: pumps hold what they read
        self._flowing.set()
        self._pause_after: int | None = None  # bytes from the broker on one connection
        self.paused_at: float | None = None  # time.monotonic() of the last pause
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The target URL with the proxy's port."""
        netloc = self._parts.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{self.port}"
        return urllib.parse.urlunsplit(self._parts._replace(
            netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))

    def _accept_loop(self) -> None:
        while self._running:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, upstream]
                self.accepted += 1
            for src, dst, from_broker in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pump, args=(src, dst, from_broker),
                                 daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_broker: bool) -> None:
        carried = 0
        try:
            while data := src.recv(65536):
                carried += len(data)
                limit = self._pause_after
                if from_broker and limit is not None and carried > limit:
                    self.pause()
                self._flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(src, dst)

    def pause(self) -> None:
        """Stop forwarding (both directions, every connection, new ones too)."""
        if self._flowing.is_set():
            self.paused_at = time.monotonic()
        self._flowing.clear()

    def pause_after(self, n: int) -> None:
        """Pause once a connection has carried more than `n` bytes from the broker."""
        self._pause_after = n

    def resume(self) -> None:
        self._pause_after = None
        self._flowing.set()

    def _drop(self, *socks: socket.socket) -> None:
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
            with self._lock:
                if s in self._socks:
                    self._socks.remove(s)

    def cut(self) -> int:
        """Drop every live connection; returns how many client connections were cut."""
        with self._lock:
            socks = list(self._socks)
        self._drop(*socks)
        return len(socks) // 2

    def close(self) -> None:
        self.resume()  # pumps held by a pause must run to notice their sockets are gone
        self._running = False
        self._listener.close()
        self._thread.join(timeout=5)
        self.cut()
