"""A TCP proxy in front of the broker whose connections a test can cut: a portable way to
make the data source lose its connection mid-stream (no broker admin API needed)."""

from __future__ import annotations

import socket
import threading
import urllib.parse


class TcpProxy:
    """Forwards 127.0.0.1:<port> to `target_url`'s host:port; `cut()` drops every live
    connection (both directions), new connections are still accepted afterwards."""

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
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(src, dst)

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
        self._running = False
        self._listener.close()
        self._thread.join(timeout=5)
        self.cut()
