"""A small AMQP 1.0 peer for the shovel tests, on python-qpid-proton's Container.listen, run
in its own thread: named in-memory queues (one per address, made on first use). A sender
attached to an address delivers its messages (accepted ones are removed; released, modified
or unsettled ones at detach go back to the front); a receiver's transfers are stored and
accepted (or rejected, for an address in `reject`). Connections are accepted without SASL
or with SASL ANONYMOUS.

`Amqp10Peer(port).start()` listens on 127.0.0.1:port (0: a free port) and returns once it
is listening; `stop()` closes every connection and the listener; `put`, `messages`,
`wait_for_count` are thread-safe.
"""

from __future__ import annotations

import collections
import os
import queue
import socket
import threading
from collections.abc import Callable
from typing import Any

from proton import Delivery, Endpoint, Message
from proton.handlers import MessagingHandler
from proton.reactor import ApplicationEvent, Container, EventInjector


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Handler(MessagingHandler):
    def __init__(self, peer: Amqp10Peer) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=True)
        self.peer = peer
        self.senders: dict[str, list[Any]] = collections.defaultdict(list)  # address -> links
        self.unsettled: dict[Any, tuple[str, Message]] = {}  # our outgoing, by delivery tag
        self.tag = 0
        self.acceptor: Any = None
        self.connections: list[Any] = []

    def on_start(self, event):
        self.acceptor = event.container.listen(f"127.0.0.1:{self.peer.port}")
        self.peer.ready.set()

    def on_connection_opening(self, event):
        self.connections.append(event.connection)
        event.connection.open()

    def on_link_opening(self, event):
        link = event.link
        if link.is_sender:
            address = link.remote_source.address
            link.source.address = address
            self.senders[address].append(link)
        else:
            link.target.address = link.remote_target.address
            link.flow(self.peer.credit)
        link.open()

    def on_link_closing(self, event):
        self._detached(event.link)
        event.link.close()

    def on_link_error(self, event):
        self._detached(event.link)

    def on_connection_closing(self, event):
        for link in list(self._links(event.connection)):
            self._detached(link)

    def on_disconnected(self, event):
        if event.connection is not None:
            for link in list(self._links(event.connection)):
                self._detached(link)

    def _links(self, conn):
        link = conn.link_head(0)
        while link:
            yield link
            link = link.next(0)

    def _detached(self, link):
        if link.is_sender:
            for links in self.senders.values():
                if link in links:
                    links.remove(link)
            # unsettled deliveries on this link go back to their queue, at the front
            for tag, (address, msg) in list(self.unsettled.items()):
                if tag[0] is link:
                    del self.unsettled[tag]
                    self.peer.queues[address].appendleft(msg)

    def on_sendable(self, event):
        self._pump(event.link)

    def _pump(self, link):
        if not (link.state & Endpoint.LOCAL_ACTIVE):
            return
        address = link.source.address
        q = self.peer.queues[address]
        while link.credit > 0 and q:
            msg = q.popleft()
            self.tag += 1
            dlv = link.send(msg, tag=str(self.tag))
            if link.remote_snd_settle_mode == 1 or link.snd_settle_mode == 1:  # settled
                dlv.settle()
                self.peer.moved[address] += 1
            else:
                self.unsettled[(link, dlv.tag)] = (address, msg)

    def on_accepted(self, event):
        dlv = event.delivery
        item = self.unsettled.pop((dlv.link, dlv.tag), None)
        if item is not None:
            self.peer.moved[item[0]] += 1
            self.peer.accepted[item[0]].append(item[1])

    def on_rejected(self, event):
        dlv = event.delivery
        item = self.unsettled.pop((dlv.link, dlv.tag), None)
        if item is not None:
            self.peer.rejected[item[0]].append(item[1])

    def on_released(self, event):
        dlv = event.delivery
        item = self.unsettled.pop((dlv.link, dlv.tag), None)
        if item is not None:
            self.peer.queues[item[0]].appendleft(item[1])
            self._pump(dlv.link)

    def on_message(self, event):
        dlv, link = event.delivery, event.link
        address = link.target.address
        if address in self.peer.reject:
            dlv.update(Delivery.REJECTED)
        else:
            with self.peer.lock:
                self.peer.received[address].append(event.message)
            dlv.update(Delivery.ACCEPTED)
        dlv.settle()
        if link.credit < self.peer.credit // 2:
            link.flow(self.peer.credit - link.credit)

    def on_peer_call(self, _event):
        while True:
            try:
                fn = self.peer.calls.get_nowait()
            except queue.Empty:
                return
            fn(self)

    def stop(self):
        for conn in self.connections:
            if not (conn.state & Endpoint.LOCAL_CLOSED):
                conn.close()
        self.acceptor.close()
        self.peer.injector.close()
        self.peer.container.schedule(0.3, _Stopper(self.peer.container))


class _Stopper:
    """Stops the container once the closes had their chance (a peer that went away)."""

    def __init__(self, container: Container) -> None:
        self.container = container

    def on_timer_task(self, _event):
        self.container.stop()


class Amqp10Peer:
    """The peer (see the module docstring)."""

    def __init__(self, port: int = 0, credit: int = 100) -> None:
        self.port = port or free_port()
        self.credit = credit  # what a sending client gets
        self.queues: dict[str, collections.deque[Message]] = collections.defaultdict(
            collections.deque)  # address -> messages to deliver
        self.received: dict[str, list[Message]] = collections.defaultdict(list)
        self.accepted: dict[str, list[Message]] = collections.defaultdict(list)
        self.rejected: dict[str, list[Message]] = collections.defaultdict(list)
        self.moved: dict[str, int] = collections.defaultdict(int)  # settled by receivers
        self.reject: set[str] = set()  # addresses whose transfers are rejected
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.calls: queue.SimpleQueue[Callable[[_Handler], None]] = queue.SimpleQueue()
        self.injector = EventInjector()
        self.handler = _Handler(self)
        self.container = Container(self.handler)
        self.container.selectable(self.injector)
        self.thread = threading.Thread(target=self.container.run, daemon=True,
                                       name="amqp10-peer")

    @property
    def uri(self) -> str:
        return f"amqp://127.0.0.1:{self.port}"

    def start(self) -> Amqp10Peer:
        self.thread.start()
        if not self.ready.wait(10):
            raise RuntimeError("the AMQP 1.0 peer did not start")
        return self

    def _call(self, fn: Callable[[_Handler], None]) -> None:
        self.calls.put(fn)
        self.injector.trigger(ApplicationEvent("peer_call"))

    def put(self, address: str, messages: list[Message]) -> None:
        """Queue messages at `address` for its receivers."""
        def do(h: _Handler) -> None:
            self.queues[address].extend(messages)
            for link in h.senders.get(address, []):
                h._pump(link)
        self._call(do)

    def messages(self, address: str) -> list[Message]:
        with self.lock:
            return list(self.received[address])

    def stop(self) -> None:
        self._call(lambda h: h.stop())
        self.thread.join(10)
        for fd in self.injector.pipe:
            os.close(fd)
