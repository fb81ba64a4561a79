# Owns: a shovel's AMQP 1.0 ends: one proton Container (connection, session, one link) in
# its own thread per end, and the bridge between that thread and the event loop.
# Talked to by: broker/shovel/link.py (through the Source / Destination protocols of
# broker/shovel/endpoint.py).
# Must never: block the event loop (proton runs in its thread; results hop back with
# call_soon_threadsafe), touch proton objects outside their thread, or settle a source
# message before the link says so.
"""A shovel's AMQP 1.0 ends on python-qpid-proton (rabbit_amqp10_shovel and amqp10_client in
RabbitMQ 3.10.8 are the reference).

URIs are amqp10_client's: `amqp://[user:pass@]host[:port]` (5672; amqps://: 5671, TLS) with
no path other than "/" (RabbitMQ refuses one: `path_segment_not_supported`), and the query
keys `sasl=anon|plain`, `hostname` (the open frame's hostname; RabbitMQ's AMQP 1.0 plugin
reads `vhost:NAME` there), `container_id`, `idle_time_out` (ms), `max_frame_size`, and for
amqps `cacertfile`, `certfile`, `keyfile`, `verify=verify_none`. SASL: PLAIN with the
user info, ANONYMOUS with `sasl=anon`, none at all otherwise (as amqp10_client). The URIs
are tried in list order (RabbitMQ's AMQP 1.0 shovel uses only the first).

The source attaches a receiver link to `src-address` (named `<shovel>_<16 hex>_receiver`),
pre-settled under no-ack, and grants `src-prefetch-count` credit, topped up once it drops
to a tenth (a numerical `src-delete-after` grants exactly that much credit, once). Each
message's body goes to the link (amqp10_message.body_bytes); ack settles it `accepted`, nack
`rejected`. The destination attaches a sender link to `dest-address` and sends each message
(amqp10_message.to_amqp10) with the source's tag as its delivery tag: unsettled under
on-confirm (the peer's `accepted` confirms it; `rejected`, `released` or `modified`
refuses it), pre-settled otherwise.

Threads: each end's Container runs in a daemon thread. The loop side asks it to do
something with `_ProtonLink.call(fn)` (an EventInjector wakes the container, which runs fn
in its thread); the thread reports with `loop.call_soon_threadsafe`. An end that fails
(refused or lost connection, the peer detaching the link or closing the connection)
resolves `closed` with an EndpointError carrying the peer's condition.
"""

from __future__ import annotations

import asyncio
import binascii
import logging
import os
import queue
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proton import Delivery, Endpoint, Event, Handler, Message, SSLDomain
from proton.handlers import MessagingHandler
from proton.reactor import ApplicationEvent, AtMostOnce, Container, EventInjector

from broker.shovel.amqp10_message import body_bytes, to_amqp10
from broker.shovel.client import redact
from broker.shovel.definition import ShovelDef
from broker.shovel.endpoint import (
    Confirm,
    Deliver,
    EndpointError,
    ShovelMessage,
    forward_table,
)

log = logging.getLogger("broker.shovel")
CONNECT_TIMEOUT = 15.0  # s: TCP connect, SASL, open and attach
CLOSE_TIMEOUT = 3.0  # s: longest a close waits for the container thread to end


@dataclass(frozen=True)
class Amqp10Uri:
    """A parsed AMQP 1.0 shovel URI (amqp10_client:parse_uri)."""

    url: str  # what proton connects to: scheme://host:port (no user info)
    host: str
    sasl: str  # none | anon | plain
    user: str | None
    password: str | None
    hostname: str | None  # open frame hostname (None: the host)
    container_id: str | None
    idle_time_out: float | None  # s
    max_frame_size: int | None
    tls: dict[str, str]  # amqps query options ({} for amqp://)
    secure: bool

    @classmethod
    def parse(cls, uri: str) -> Amqp10Uri:
        """EndpointError for what amqp10_client refuses."""
        u = urllib.parse.urlsplit(uri)
        if u.scheme not in ("amqp", "amqps"):
            raise EndpointError(f"not an amqp:// or amqps:// URI: {redact(uri)}")
        if u.path not in ("", "/"):
            raise EndpointError(f"path_segment_not_supported: {redact(uri)} (an AMQP 1.0 "
                                f"URI has no vhost path; use ?hostname=vhost:NAME)")
        if not u.hostname:
            raise EndpointError(f"no host in {redact(uri)} (this broker does not accept "
                                f"AMQP 1.0 connections itself)")
        query = dict(urllib.parse.parse_qsl(u.query))
        user = urllib.parse.unquote(u.username) if u.username else None
        password = urllib.parse.unquote(u.password) if u.password is not None else None
        sasl = query.get("sasl")
        if sasl == "plain" and not user:
            raise EndpointError("plain_sasl_missing_userinfo")
        if sasl != "anon":
            sasl = "plain" if user else "none"
        secure = u.scheme == "amqps"
        port = u.port or (5671 if secure else 5672)
        host = u.hostname
        netloc = f"[{host}]" if ":" in host else host
        idle = query.get("idle_time_out")
        frame = query.get("max_frame_size")
        return cls(url=f"{u.scheme}://{netloc}:{port}", host=host, sasl=sasl, user=user,
                   password=password, hostname=query.get("hostname"),
                   container_id=query.get("container_id"),
                   idle_time_out=int(idle) / 1000.0 if idle else None,
                   max_frame_size=int(frame) if frame else None,
                   tls={k: v for k, v in query.items()
                        if k in ("cacertfile", "certfile", "keyfile", "verify")},
                   secure=secure)

    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments for proton's Container.connect."""
        opts: dict[str, Any] = {"reconnect": False}
        if self.sasl == "none":
            opts["sasl_enabled"] = False
        elif self.sasl == "anon":
            opts["allowed_mechs"] = "ANONYMOUS"
        else:
            opts.update(allowed_mechs="PLAIN", user=self.user, password=self.password or "",
                        allow_insecure_mechs=True)
        if self.hostname:
            opts["virtual_host"] = self.hostname
            opts["sni"] = self.host
        if self.container_id:
            opts["container_id"] = self.container_id
        if self.idle_time_out:
            opts["heartbeat"] = self.idle_time_out
        if self.max_frame_size:
            opts["max_frame_size"] = self.max_frame_size
        if self.secure:
            domain = SSLDomain(SSLDomain.MODE_CLIENT)
            if "cacertfile" in self.tls:
                domain.set_trusted_ca_db(self.tls["cacertfile"])
            if "certfile" in self.tls:
                domain.set_credentials(self.tls["certfile"], self.tls.get("keyfile", ""),
                                       None)
            if self.tls.get("verify") == "verify_none":
                domain.set_peer_authentication(SSLDomain.ANONYMOUS_PEER)
            else:
                domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME,
                                               self.tls.get("cacertfile"))
            opts["ssl_domain"] = domain
        return opts


def _condition(endpoint: Any, default: str) -> str:
    """`name: description` of an endpoint's (remote) error condition."""
    cond = getattr(endpoint, "remote_condition", None) or getattr(endpoint, "condition", None)
    if cond is None:
        return default
    return f"{cond.name}: {cond.description}" if cond.description else str(cond.name)


class _Events:
    """What a link's thread reports; each runs on the event loop."""

    def __init__(self) -> None:
        self.opened: Callable[[], None] = lambda: None
        self.failed: Callable[[str], None] = lambda reason: None
        self.message: Callable[[int, bytes], None] = lambda tag, body: None
        self.outcome: Callable[[int, bool], None] = lambda out, ok: None
        self.ended: Callable[[], None] = lambda: None


class _ProtonLink(MessagingHandler):
    """One connection with one link, run by its own Container in its own thread. Every
    method but `start` and `call` runs in that thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, uri: Amqp10Uri, address: str,
                 sender: bool, settled: bool, name: str, events: _Events) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=True)
        self.loop = loop
        self.uri = uri
        self.address = address
        self.sender = sender
        self.settled = settled  # pre-settled link (no-ack)
        self.name = name  # link name
        self.events = events
        self.conn: Any = None
        self.link: Any = None
        self.closing = False  # our close began (or a failure was reported): report no more
        self.deliveries: dict[int, Delivery] = {}  # receiver: unsettled, by our tag
        self.next_tag = 0
        self.sent: dict[Any, int] = {}  # sender: delivery tag -> out id, until the outcome
        self.credit = 0  # receiver: credit to top up to (0: never)
        self.renew_below = 0
        self._calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards _ended against a late `call`
        self._ended = False
        self._injector = EventInjector()
        self.container = Container(self)
        self.container.selectable(self._injector)
        self.thread = threading.Thread(target=self._run, name=f"amqp10 {name}", daemon=True)

    # -- any thread --------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def call(self, fn: Callable[[], None]) -> None:
        """Run fn in the container's thread (dropped once the thread has ended)."""
        with self._lock:
            if self._ended:
                return
            self._calls.put(fn)
            self._injector.trigger(ApplicationEvent("shovel_call"))

    # -- the container's thread --------------------------------------------------------------
    def _to_loop(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop has closed (broker shut down)
            pass

    def _run(self) -> None:
        try:
            self.container.run()
        except Exception as exc:  # noqa: BLE001 - a handler bug: report it, end the thread
            log.exception("AMQP 1.0 link %s crashed", self.name)
            if not self.closing:
                self._to_loop(self.events.failed, f"AMQP 1.0 client error: {exc!r}")
        finally:
            with self._lock:
                self._ended = True
                for fd in self._injector.pipe:
                    os.close(fd)
            self._to_loop(self.events.ended)

    def on_shovel_call(self, _event: Event) -> None:
        while True:
            try:
                fn = self._calls.get_nowait()
            except queue.Empty:
                return
            fn()

    def on_start(self, event: Event) -> None:
        self.conn = event.container.connect(url=self.uri.url, **self.uri.connect_options())
        options = AtMostOnce() if self.settled else None
        if self.sender:
            self.link = event.container.create_sender(self.conn, target=self.address,
                                                      name=self.name, options=options)
        else:
            self.link = event.container.create_receiver(self.conn, source=self.address,
                                                        name=self.name, options=options)

    def on_link_opened(self, _event: Event) -> None:
        self._to_loop(self.events.opened)

    def _fail(self, reason: str) -> None:
        if self.closing:
            return
        self.closing = True
        self._to_loop(self.events.failed, reason)
        if self.conn is not None:
            self.conn.close()
        self.container.stop()

    def on_transport_error(self, event: Event) -> None:
        self._fail(_condition(event.transport, "transport error"))

    def on_connection_error(self, event: Event) -> None:
        self._fail(_condition(event.connection, "connection closed by the peer"))

    def on_session_error(self, event: Event) -> None:
        self._fail(_condition(event.session, "session ended by the peer"))

    def on_link_error(self, event: Event) -> None:
        self._fail(_condition(event.link, "link detached by the peer"))

    def on_connection_closing(self, _event: Event) -> None:
        self._fail("connection closed by the peer")

    def on_session_closing(self, _event: Event) -> None:
        self._fail("session ended by the peer")

    def on_link_closing(self, _event: Event) -> None:
        self._fail("link detached by the peer")

    def on_disconnected(self, event: Event) -> None:
        self._fail(_condition(event.transport, "connection lost"))

    def on_transport_closed(self, event: Event) -> None:
        if self.closing:
            self.container.stop()
        else:
            self._fail(_condition(event.transport, "connection lost"))

    # receiving
    def on_message(self, event: Event) -> None:
        dlv = event.delivery
        assert dlv is not None
        self.next_tag += 1
        tag = self.next_tag
        if dlv.settled or self.settled:  # `settled`: the peer sent it settled
            dlv.settle()
        else:
            self.deliveries[tag] = dlv
        if self.credit and self.link.credit <= self.renew_below:
            self.link.flow(self.credit - self.link.credit)
        self._to_loop(self.events.message, tag, body_bytes(event.message))

    def flow(self, credit: int, renew: bool) -> None:
        """Grant `credit`; with `renew`, top it up again once it drops to a tenth."""
        if renew:
            self.credit, self.renew_below = credit, round(credit / 10)
        if self.link is not None and credit:
            self.link.flow(credit)

    def settle_tag(self, tag: int, accepted: bool) -> None:
        dlv = self.deliveries.pop(tag, None)
        if dlv is not None:
            dlv.update(Delivery.ACCEPTED if accepted else Delivery.REJECTED)
            dlv.settle()

    # sending
    def send(self, out: int, message: Message, tag: str, settle: bool) -> None:
        if self.link is None or self.closing:
            return
        dlv = self.link.send(message, tag=tag)
        if settle:
            dlv.settle()
        else:
            self.sent[dlv.tag] = out

    def _outcome(self, event: Event, ok: bool) -> None:
        dlv = event.delivery
        assert dlv is not None
        out = self.sent.pop(dlv.tag, None)
        if out is not None:
            self._to_loop(self.events.outcome, out, ok)

    def on_accepted(self, event: Event) -> None:
        self._outcome(event, True)

    def on_rejected(self, event: Event) -> None:
        self._outcome(event, False)

    def on_released(self, event: Event) -> None:  # released or modified
        self._outcome(event, False)

    def shutdown(self) -> None:
        """Detach, close the connection; the container stops once the socket is closed
        (or after a second, when the peer does not answer)."""
        if self.closing:
            self.container.stop()
            return
        self.closing = True
        if self.link is not None:
            self.link.close()
        if self.conn is not None:
            self.conn.close()
        if self.conn is None or self.conn.state & Endpoint.REMOTE_UNINIT:
            self.container.stop()
        else:
            self.container.schedule(1.0, _Stopper(self.container))


class _Stopper(Handler):
    """A timer handler that stops a container (a peer that never answers our close)."""

    def __init__(self, container: Container) -> None:
        self.container = container

    def on_timer_task(self, _event: Event) -> None:
        self.container.stop()


def _link_name(shovel: str, role: str) -> str:
    """rabbit_amqp10_shovel gen_unique_name: `<shovel>_<16 hex digits>_<role>`."""
    return f"{shovel}_{binascii.hexlify(os.urandom(8)).decode()}_{role}"


class _Amqp10End:
    """The loop side of one AMQP 1.0 end: opens a _ProtonLink on the first URI that works."""

    def __init__(self, d: ShovelDef, uris: tuple[str, ...], address: str, sender: bool) -> None:
        self.d = d
        self._uris = uris
        self._address = address
        self._sender = sender
        self._loop = asyncio.get_running_loop()
        self.uri: str | None = None
        self.closed: asyncio.Future[Exception] = self._loop.create_future()
        self._link: _ProtonLink | None = None
        self._ended: asyncio.Future[None] | None = None
        self.events = _Events()

    async def _open(self) -> None:
        role = "sender" if self._sender else "receiver"
        last: EndpointError | None = None
        for uri in self._uris:
            try:
                await self._try(uri, role)
                self.uri = uri
                return
            except EndpointError as exc:
                last = exc
                await self.close()
        raise last or EndpointError(f"no {role} URI")

    async def _try(self, uri: str, role: str) -> None:
        parsed = Amqp10Uri.parse(uri)
        loop = self._loop
        opened: asyncio.Future[None] = loop.create_future()
        self._ended = ended = loop.create_future()

        def on_opened() -> None:
            if not opened.done():
                opened.set_result(None)

        def on_failed(reason: str) -> None:
            err = EndpointError(f"{redact(uri)}: {reason}")
            if not opened.done():
                opened.set_exception(err)
            elif self._link is link and not self.closed.done():  # not a closed attempt's
                self.closed.set_result(err)

        def on_ended() -> None:
            if not ended.done():
                ended.set_result(None)

        self.events.opened, self.events.failed = on_opened, on_failed
        self.events.ended = on_ended
        self._link = link = _ProtonLink(loop, parsed, self._address, self._sender,
                                        self.d.ack_mode == "no-ack",
                                        _link_name(self.d.name, role), self.events)
        link.start()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                await opened
        except TimeoutError:
            raise EndpointError(f"{redact(uri)}: timeout") from None

    async def close(self) -> None:
        link, ended = self._link, self._ended
        self._link = None
        if link is None or ended is None:
            return
        link.call(link.shutdown)
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await ended
        except TimeoutError:
            log.warning("AMQP 1.0 link %s did not close within %s s", link.name, CLOSE_TIMEOUT)


class Amqp10Source(_Amqp10End):
    """An AMQP 1.0 source: a receiver link on `src-address` (see the module docstring)."""

    def __init__(self, d: ShovelDef) -> None:
        super().__init__(d, d.src_uris, d.src_address or "", sender=False)

    async def open(self) -> int:
        await self._open()
        return 0  # an AMQP 1.0 node has no depth to read: queue-length moves nothing

    async def consume(self, deliver: Deliver, prefetch: int, no_ack: bool,
                      limit: int | None) -> None:
        def message(tag: int, body: bytes) -> None:
            deliver(ShovelMessage(tag, body))

        self.events.message = message
        link = self._link
        if link is not None:
            if limit is not None:  # rabbit_amqp10_shovel init_source: {R, never}
                link.call(lambda: link.flow(limit, renew=False))
            else:
                link.call(lambda: link.flow(prefetch, renew=True))

    def ack(self, tag: int) -> None:
        link = self._link
        if link is not None:
            link.call(lambda: link.settle_tag(tag, True))

    def nack(self, tag: int) -> None:
        link = self._link
        if link is not None:
            link.call(lambda: link.settle_tag(tag, False))


class Amqp10Destination(_Amqp10End):
    """An AMQP 1.0 destination: a sender link on `dest-address` (see the module
    docstring). `cluster_name` goes into the forward headers (shovelled-by)."""

    def __init__(self, d: ShovelDef, cluster_name: str) -> None:
        super().__init__(d, d.dest_uris, d.dest_address or "", sender=True)
        self._forward = forward_table(d, cluster_name) if d.add_forward_headers else None
        self._confirms = False
        self._next_out = 0

    async def open(self, on_confirm: Confirm | None) -> None:
        if on_confirm is not None:
            self._confirms = True
            self.events.outcome = lambda out, ok: on_confirm([out], ok)
        await self._open()

    def forward(self, msg: ShovelMessage, src_uri: str) -> int:
        self._next_out += 1
        out = self._next_out
        message = to_amqp10(msg, self.d, self._forward, int(time.time() * 1000))
        link = self._link
        if link is not None:
            settle = not self._confirms
            link.call(lambda: link.send(out, message, str(msg.tag), settle))
        return out
