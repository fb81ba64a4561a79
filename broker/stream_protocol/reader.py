"""One RabbitMQ Stream protocol connection (issue 37), after RabbitMQ 3.13.7's
`rabbit_stream_reader.erl`.

Owns: the connection's state machine (peer properties → SASL → tune → open → opened →
closing), its frames in and out, heartbeats, exchange_command_versions, publishing and
consuming; the commands that manage streams (create, delete, metadata, stream_stats, route,
partitions, super streams) are in stream_commands.py, called with this connection.
Talks to: the broker through `StreamServing` (authentication, permissions, vhosts),
broker/stream_protocol/core.py for every byte.
Must never: let one connection's bad input touch another: every error here ends in a
response code and, where RabbitMQ closes, a closed connection.

Errors as RabbitMQ answers them: a command other than the handshake's before
authentication, or a frame that does not parse → the connection closes (rabbit_stream_reader
handle_frame_pre_auth "unknown command ..., closing connection"); an unknown command after
open → a close request with UNKNOWN_FRAME (13); a frame above the negotiated frame_max
before open, or above `max_message_size` (128 MiB) after it → a close request with
FRAME_TOO_LARGE (14). After open the negotiated frame_max is not enforced, as RabbitMQ 3.10
to 3.13 enforce none (RabbitMQ 4.x does): clients rely on it, rstream's producer sends 1.5
MB publish frames on a 1 MiB frame_max; the ceiling keeps memory bounded. A failed login →
AUTHENTICATION_FAILURE (8), an unknown mechanism → SASL_MECHANISM_NOT_SUPPORTED (7), a
vhost the user may not use → VIRTUAL_HOST_ACCESS_FAILURE (12), each followed by the close.
Every close the server decides on lingers (`_fail`): a FIN after the last frame, then the
client's frames read and dropped for up to LINGER_S, so a frame it sent meanwhile cannot
turn into a reset that destroys the response it has not read yet.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any, Protocol, cast

from broker import __version__, admission, errors, tls
from broker.protocol import sasl
from broker.queue_delivery import RUN
from broker.stream.log import FIRST, LAST, NEXT
from broker.stream.queue import STREAM_PUBLISH, Subscription
from broker.stream_protocol import core
from broker.stream_protocol import stream_commands as commands

log = logging.getLogger("broker.stream_protocol")

# connection steps (rabbit_stream_reader's connection_step)
TCP_CONNECTED = "tcp_connected"
PEER_PROPERTIES_EXCHANGED = "peer_properties_exchanged"
AUTHENTICATING = "authenticating"
TUNING = "tuning"
TUNED = "tuned"
OPENED = "opened"
CLOSING = "closing"
FAILURE = "failure"
LINGER_S = 1.0  # how long a failed connection's socket is read after its FIN (s)

_PRE_AUTH = {core.PEER_PROPERTIES, core.SASL_HANDSHAKE, core.SASL_AUTHENTICATE, core.TUNE,
             core.OPEN, core.HEARTBEAT}


# the RabbitMQ version whose stream protocol this reader serves, announced in peer_properties:
# stream clients turn on super streams and single active consumer (>= 3.11) and filtering
# (>= 3.13) by it (the Go client's availableFeatures.SetVersion, the Java client's
# Utils.is3_11_OrMore); this broker's own version stays in "pybroker_version"
PROTOCOL_VERSION = "3.13.7"


class StreamServing(Protocol):
    """What a stream connection needs of the broker (broker.server.Broker satisfies it)."""

    @property
    def config(self) -> Any: ...

    @property
    def vhosts(self) -> dict[str, Any]: ...

    @property
    def users(self) -> Any: ...

    def check_user(self, username: str, password: str, peer: Any) -> bool: ...

    def loopback_allowed(self, username: str, peer: Any) -> bool: ...

    def cluster_name(self) -> str: ...


class StreamListener:
    """The stream protocol's listener state: its connections, and what metadata answers
    (`advertised_host`, `advertised_port`: stream.advertised_host / stream.advertised_port,
    else the bound address, or this machine's host name when bound to every address, as
    rabbit_stream:host/0 answers with the node's host name). `frame_max` (bytes) and
    `heartbeat` (s) are what the server proposes in tune (stream.frame_max, stream.heartbeat)."""

    def __init__(self, broker: StreamServing, *, host: str, port: int, frame_max: int,
                 heartbeat: int, advertised_host: str = "", advertised_port: int = 0) -> None:
        self.broker = broker
        self.host = host
        self.port = port  # the bound port once listening
        self.frame_max = frame_max
        self.heartbeat = heartbeat
        self.advertised_host = advertised_host
        self.advertised_port = advertised_port
        self.tls_port = 0  # the bound TLS port, when there is one
        self.connections: set[StreamConnection] = set()
        # rabbit_global_counters for protocol "stream": messages received (published),
        # confirmed to publishers, and delivered (records of the chunks sent to consumers)
        self.received = 0
        self.confirmed = 0
        self.delivered = 0
        self.blocked = False  # a resource alarm is in effect

    def endpoint(self, tls: bool = False) -> tuple[str, int]:
        """(host, port) clients are told to connect to (metadata, open's properties): the
        TLS port for a TLS connection (rabbit_stream:tls_port), as RabbitMQ answers."""
        host = self.advertised_host or self.host
        if host in ("", "0.0.0.0", "::"):
            host = socket.gethostname()
        if tls:
            return (host, self.tls_port)
        return (host, self.advertised_port or self.port)

    def protocol(self) -> StreamConnection:
        return StreamConnection(self)

    def alarms_changed(self, active: frozenset[str]) -> None:
        """A memory or disk alarm came or went: connections with publishers stop or resume
        reading their sockets (this protocol has no connection.blocked; RabbitMQ blocks
        the reader the same way)."""
        self.blocked = bool(active)
        for conn in list(self.connections):
            conn.flow()

    def close_all(self) -> None:
        """Broker shutdown: every connection gets a close request (OK, "shutdown") and its
        socket closes."""
        for conn in list(self.connections):
            conn.shutdown()


@dataclass
class Publisher:
    """A declared publisher: its stream queue, reference (None without one) and counters
    (messages published, confirmed, errored), as /api/stream/publishers shows them."""

    queue: Any
    reference: str | None
    published: int = 0
    confirmed: int = 0
    errored: int = 0


class StreamConnection(asyncio.Protocol):
    """One client connection (see the module docstring for the states and errors)."""

    protocol_name = "stream"  # what management lists as its protocol

    def __init__(self, listener: StreamListener) -> None:
        self.listener = listener
        self.broker = listener.broker
        self.transport: asyncio.Transport | None = None
        self.step = TCP_CONNECTED
        self.splitter = core.FrameSplitter(listener.frame_max)
        self.peer: Any = None
        self.client_properties: dict[str, str] = {}
        self.username = ""
        self.auth_mechanism = ""
        self.vhost: str | None = None
        self.frame_max = listener.frame_max  # negotiated
        self.heartbeat = listener.heartbeat  # negotiated (s)
        self.connected_at = time.time()
        self.peercert: dict | None = None  # the verified client certificate, under TLS
        # socket statistics for /api/connections (recv_oct, recv_cnt, send_oct, send_cnt)
        self.recv_oct = self.recv_cnt = self.send_oct = self.send_cnt = 0
        self._last_in = time.monotonic()
        self._heartbeat_timer: asyncio.TimerHandle | None = None
        self._close_corr = 0
        self.deliver_version = 1  # 2 once the client announces deliver v2
        self.publishers: dict[int, Publisher] = {}  # publisher id -> publisher
        # subscription id -> stream queue
        self.subscriptions: dict[int, Any] = {}
        # correlation id -> (stream queue, subscription id, active) of consumer_updates sent
        self._updates: dict[int, tuple[Any, int, bool]] = {}
        self._next_corr = 1 << 30  # the server's own correlation ids

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self.peer = transport.get_extra_info("peername")
        if transport.get_extra_info("ssl_object") is not None:
            self.peercert = transport.get_extra_info("peercert")
        self.listener.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self.step == FAILURE:
            return  # a lingering close (_fail): read and dropped
        self._last_in = time.monotonic()
        self.recv_oct += len(data)
        self.recv_cnt += 1
        try:
            frames = self.splitter.feed(data, blocks=self.step == OPENED)
        except core.FrameTooLarge as exc:
            log.warning("stream connection %s: %s, closing", self.peer, exc)
            self._close_with(core.FRAME_TOO_LARGE, "frame too large")
            return
        for frame in frames:
            if self.step in (FAILURE,) or self.transport is None:
                return
            try:
                if frame.__class__ is tuple:  # a run of publish frames (FrameSplitter.feed)
                    self._publish_messages(*frame)
                    continue
                self._handle(frame)
            except core.ParseError as exc:
                log.warning("stream connection %s: malformed frame (%s), closing",
                            self.peer, exc)
                self._fail()
                return
            except Exception:  # a bug here closes this connection only, with the trace
                log.exception("stream connection %s: internal error, closing", self.peer)
                self._close_with(core.INTERNAL_ERROR, "internal error")
                return

    def connection_lost(self, exc: Exception | None) -> None:
        self._gone()
        self.transport = None

    def _gone(self) -> None:
        """Leave the listener and the streams: at the socket's end, or as soon as the
        connection fails while its socket lingers (_fail). Idempotent."""
        self.listener.connections.discard(self)
        queues = [p.queue for p in self.publishers.values()] + list(self.subscriptions.values())
        for q in {id(q): q for q in queues}.values():
            q.client_down(self)
        self.subscriptions.clear()
        self.publishers.clear()
        if self._heartbeat_timer is not None:
            self._heartbeat_timer.cancel()

    def flow(self) -> None:
        """Stop reading while a resource alarm is in effect and this connection has a
        publisher; read again when either ends."""
        t = self.transport
        if t is None or t.is_closing():
            return
        if self.listener.blocked and self.publishers:
            t.pause_reading()
        else:
            t.resume_reading()

    def resume_writing(self) -> None:
        """The socket drained: stream queues may send this client chunks again."""
        for q in {id(q): q for q in self.subscriptions.values()}.values():
            q.cast((RUN,))

    def pause_writing(self) -> None:
        pass  # the queues look at write_buffer_size() before each chunk

    # -- what stream queues call (broker/stream/queue.py StreamClient) -------------------------
    def publish_confirmed(self, publisher_id: int, ids: list[int] | bytes) -> None:
        """The stream queue stored these (ints, or a PublishBlock's packed u64s)."""
        pub = self.publishers.get(publisher_id)
        if pub is not None:
            n = len(ids) // 8 if ids.__class__ is bytes else len(ids)
            pub.confirmed += n
            self.listener.confirmed += n
            self.send(core.publish_confirm(publisher_id, ids))

    def deliver_chunk(self, subscription_id: int, header: bytes, data: bytes | memoryview,
                      committed: int) -> None:
        """A Deliver frame: the chunk's stored header and data entries (osiris sends no
        bloom filter or trailer to consumers)."""
        if self.transport is None:
            return
        self.listener.delivered += int.from_bytes(header[4:8], "big")  # NumRecords
        head = core.deliver_header(subscription_id, len(header) + len(data),
                                   self.deliver_version, max(committed, 0)) + header
        self.transport.writelines((head, data))  # uvloop: one writev(2), no join copy
        self.send_oct += len(head) + len(data)
        self.send_cnt += 1

    def consumer_update(self, queue: Any, subscription_id: int, active: bool) -> None:
        """Ask the client whether a single active consumer takes over (active) or steps
        down; its answer goes back to `queue`."""
        self._next_corr += 1
        self._updates[self._next_corr] = (queue, subscription_id, active)
        self.send(core.consumer_update(self._next_corr, subscription_id, active))

    def _consumer_update_response(self, f: core.Frame) -> None:
        pending = self._updates.pop(f.corr, None)
        if pending is None:
            return
        q, sid, active = pending
        q.consumer_update_answered(self, sid, active, _log_spec(*f.fields["offset_spec"]))

    def write_buffer_size(self) -> int:
        t = self.transport
        return t.get_write_buffer_size() if t is not None and not t.is_closing() else 1 << 62

    def stream_gone(self, vhost: str, name: str) -> None:
        """Stream `name` was deleted: its publishers and subscriptions here go, and the
        client is told with metadata_update STREAM_NOT_AVAILABLE, as RabbitMQ does."""
        if vhost != self.vhost:
            return
        gone = [sid for sid, q in self.subscriptions.items() if q.name == name]
        pubs = [pid for pid, p in self.publishers.items() if p.queue.name == name]
        for sid in gone:
            del self.subscriptions[sid]
        for pid in pubs:
            del self.publishers[pid]
        if gone or pubs:
            self.send(core.metadata_update(name, core.STREAM_NOT_AVAILABLE))

    # -- sending -----------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        if (self.transport is not None and not self.transport.is_closing()
                and self.step != FAILURE):  # a failed connection's socket only lingers
            self.transport.write(data)
            self.send_oct += len(data)
            self.send_cnt += 1

    def _fail(self) -> None:
        """Stop serving the connection (RabbitMQ's connection_step = failure) with a
        lingering close: what was sent goes out followed by a FIN, and what the client
        still sends is read and dropped until it closes too, or for LINGER_S at most.

        Closing the socket outright could lose the last response: rstream, for one,
        sends its first heartbeat right after `open`; closed with that frame unread, the
        socket sends a reset instead of a FIN, and an asyncio client raises the reset
        ahead of the refusal it has received but not yet read (VIRTUAL_HOST_ACCESS_FAILURE
        became ConnectionResetError, now and then). A TLS transport cannot half-close and
        is closed at once."""
        self.step = FAILURE
        t = self.transport
        if t is None or t.is_closing():
            return
        self._gone()
        if not t.can_write_eof():
            t.close()
            return
        try:
            t.write_eof()
        except OSError:
            t.close()
            return
        asyncio.get_running_loop().call_later(LINGER_S, t.close)

    def shutdown(self) -> None:
        """The broker stops: tell the client, then close."""
        self._close_with(core.OK, "shutdown")

    def force_close(self, reason: str) -> None:
        """An operator closes the connection (DELETE /api/connections/{name}): RabbitMQ's
        stream reader stops on `{shutdown, Reason}` and closes the socket without a close
        frame (rabbit_stream_reader.erl, open(info, {shutdown, _})); logged as there."""
        log.info("forcing stream connection %s closing: %s", self.peer, reason)
        self._fail()

    def _close_with(self, code: int, reason: str) -> None:
        """Send a close request with `code`, then close the socket (the client's response
        is not waited for, as a client that sent garbage may never send one)."""
        self._close_corr += 1
        self.send(core.close(self._close_corr, code, reason))
        self._fail()

    # -- frames ------------------------------------------------------------------------------
    def _handle(self, frame: bytes) -> None:
        f = core.parse(frame)
        if f.fields.get("unknown") or f.fields.get("unexpected"):
            if self.step == OPENED:
                log.warning("stream connection %s: unknown command %d v%d, sending close",
                            self.peer, f.key, f.version)
                self._close_with(core.UNKNOWN_FRAME, "unknown frame")
            else:
                log.warning("stream connection %s: unknown command %d v%d, closing connection",
                            self.peer, f.key, f.version)
                self._fail()
            return
        if self.step != OPENED:
            if f.key not in _PRE_AUTH and not (f.key == core.CLOSE and self.step == CLOSING):
                log.warning("stream connection %s: command %s before the connection is open, "
                            "closing connection", self.peer, f.name)
                self._fail()
                return
        handler = _HANDLERS.get((f.key, f.response))
        if handler is None:
            if self.step == OPENED:
                self._close_with(core.UNKNOWN_FRAME, "unknown frame")
            else:
                self._fail()
            return
        handler(self, f)

    # -- handshake ---------------------------------------------------------------------------
    def _peer_properties(self, f: core.Frame) -> None:
        if self.step != TCP_CONNECTED:
            self._fail()
            return
        self.client_properties = f.fields["properties"]
        props = {
            "product": "RabbitMQ",
            "version": PROTOCOL_VERSION,
            "cluster_name": self.broker.cluster_name(),
            "platform": "Python",
            "copyright": "pybroker",
            "information": "Licensed under the MPL 2.0",
            "pybroker_version": __version__,
        }
        self.send(core.response(core.PEER_PROPERTIES, f.corr, core.OK, core.string_map(props)))
        self.step = PEER_PROPERTIES_EXCHANGED

    def _tls(self) -> bool:
        return (self.transport is not None
                and self.transport.get_extra_info("ssl_object") is not None)

    def _mechanisms(self) -> list[str]:
        """The configured mechanisms (auth_mechanisms.N), EXTERNAL only over TLS
        (rabbit_stream_utils:auth_mechanisms/1)."""
        return list(sasl.offered(self.broker.config.auth_mechanisms, self._tls()))

    def _sasl_handshake(self, f: core.Frame) -> None:
        self.send(core.response(core.SASL_HANDSHAKE, f.corr, core.OK,
                                core.strings(self._mechanisms())))
        self.step = AUTHENTICATING

    def _sasl_authenticate(self, f: core.Frame) -> None:
        mech = f.fields["mechanism"] or ""
        if mech not in self._mechanisms():
            self.send(core.response(core.SASL_AUTHENTICATE, f.corr,
                                    core.SASL_MECHANISM_NOT_SUPPORTED))
            self._fail()
            return
        try:
            username, password = sasl.parse_response(mech, f.fields["response"])
        except errors.AMQPError:
            self.send(core.response(core.SASL_AUTHENTICATE, f.corr, core.SASL_ERROR))
            self._fail()
            return
        if mech == "EXTERNAL":
            username = self._certificate_user()
        ok = admission.authenticate(self.broker, self.peer, mech, username,  # type: ignore[arg-type]
                                    password, protocol="stream")
        if not ok:
            loopback = (self.broker.users.user(username) is not None
                        and not self.broker.loopback_allowed(username, self.peer))
            code = core.SASL_AUTHENTICATION_FAILURE_LOOPBACK if loopback \
                else core.AUTHENTICATION_FAILURE
            self.send(core.response(core.SASL_AUTHENTICATE, f.corr, code))
            self._fail()
            return
        self.username = username
        self.auth_mechanism = mech
        self.send(core.response(core.SASL_AUTHENTICATE, f.corr, core.OK))
        self.send(core.tune(self.listener.frame_max, self.listener.heartbeat))
        self.step = TUNING

    def _certificate_user(self) -> str:
        """The EXTERNAL login name from the verified client certificate ("" without)."""
        ssl_object = self.transport.get_extra_info("ssl_object") if self.transport else None
        if ssl_object is None:
            return ""
        return tls.external_login_name(ssl_object.getpeercert(), self.broker.config) or ""

    def _tune(self, f: core.Frame) -> None:
        if self.step != TUNING:
            self._fail()
            return
        fm, hb = f.fields["frame_max"], f.fields["heartbeat"]
        self.frame_max = min(fm, self.listener.frame_max) if fm else self.listener.frame_max
        self.splitter.frame_max = self.frame_max
        self.heartbeat = hb
        self.step = TUNED
        if hb:
            loop = asyncio.get_running_loop()
            self._heartbeat_timer = loop.call_later(hb, self._heartbeat_tick)

    def _heartbeat_tick(self) -> None:
        """Send a heartbeat every `heartbeat` seconds; close after two silent periods (the
        client sends heartbeats or frames)."""
        if self.transport is None or self.step == FAILURE:
            return
        if time.monotonic() - self._last_in > 2 * self.heartbeat:
            log.warning("stream connection %s: missed heartbeats from client, timeout: %ds",
                        self.peer, self.heartbeat)
            self._fail()
            return
        self.send(core.heartbeat())
        self._heartbeat_timer = asyncio.get_running_loop().call_later(
            self.heartbeat, self._heartbeat_tick)

    def _open(self, f: core.Frame) -> None:
        if self.step != TUNED:
            self._fail()
            return
        vhost = f.fields["virtual_host"] or "/"
        try:
            allowed = (vhost in self.broker.vhosts
                       and self.broker.users.control.vhost_allowed(self.username, vhost))
        except errors.AMQPError:  # connection limits
            allowed = False
        if not allowed:
            log.warning("stream connection %s: access to vhost '%s' refused for user '%s'",
                        self.peer, vhost, self.username)
            self.send(core.response(core.OPEN, f.corr, core.VIRTUAL_HOST_ACCESS_FAILURE))
            self._fail()
            return
        host, port = self.listener.endpoint(self._tls())
        self.vhost = vhost
        self.send(core.response(core.OPEN, f.corr, core.OK, core.string_map(
            {"advertised_host": host, "advertised_port": str(port)})))
        self.step = OPENED
        # RabbitMQ 3.10-3.13 read frames of any size once open (see the module docstring)
        self.splitter.frame_max = max(self.frame_max, self.broker.config.max_message_size)

    def _heartbeat(self, f: core.Frame) -> None:
        pass  # arrival already counted

    def _close_request(self, f: core.Frame) -> None:
        log.info("stream connection %s closed by client: %s %s", self.peer,
                 f.fields["closing_code"], f.fields["closing_reason"])
        self.send(core.response(core.CLOSE, f.corr, core.OK))
        self.step = CLOSING
        if self.transport is not None:
            self.transport.close()

    def _close_response(self, f: core.Frame) -> None:
        self._fail()

    # -- what stream_commands.py uses ------------------------------------------------------
    def allowed(self, name: str, permission: str) -> bool:
        assert self.vhost is not None
        return self.broker.users.control.resource_allowed(self.username, self.vhost, name,
                                                         permission)

    def stream(self, name: str) -> Any | None:
        """The stream queue `name` of this connection's vhost (None when there is none or
        the queue is not a stream)."""
        assert self.vhost is not None
        q = self.broker.vhosts[self.vhost].queues.get(name)
        return q if q is not None and getattr(q, "queue_type", "") == "stream" else None

    def current_vhost(self) -> Any:
        """The vhost (broker.vhost.VHost) this connection opened."""
        return self.broker.vhosts[self.vhost or "/"]

    def endpoint(self) -> tuple[str, int]:
        """(host, port) metadata advertises for this connection's listener."""
        return self.listener.endpoint(self._tls())

    def _exchange_command_versions(self, f: core.Frame) -> None:
        for key, _lo, hi in f.fields["commands"]:
            if key == core.DELIVER and hi >= 2:
                self.deliver_version = 2
        self.send(core.response(core.EXCHANGE_COMMAND_VERSIONS, f.corr, core.OK,
                                core.command_versions(core.COMMAND_VERSIONS)))


    # -- publishing --------------------------------------------------------------------------
    def _declare_publisher(self, f: core.Frame) -> None:
        d = f.fields
        pid, ref, name = d["publisher_id"], d["reference"] or None, d["stream"] or ""
        if pid in self.publishers:
            self.send(core.response(core.DECLARE_PUBLISHER, f.corr, core.PRECONDITION_FAILED))
            return
        if not self.allowed(name, "write"):
            self.send(core.response(core.DECLARE_PUBLISHER, f.corr, core.ACCESS_REFUSED))
            return
        q = self.stream(name)
        if q is None:
            self.send(core.response(core.DECLARE_PUBLISHER, f.corr, core.STREAM_DOES_NOT_EXIST))
            return
        if ref is not None and any(p.reference == ref and p.queue is q
                                   for p in self.publishers.values()):
            # rabbit_stream_reader: one reference per stream and connection
            self.send(core.response(core.DECLARE_PUBLISHER, f.corr, core.PRECONDITION_FAILED))
            return
        self.publishers[pid] = Publisher(q, ref)
        q.clients.add(self)
        self.send(core.response(core.DECLARE_PUBLISHER, f.corr, core.OK))
        if self.listener.blocked:
            self.flow()

    def _publish(self, f: core.Frame) -> None:
        self._publish_messages(f.fields["publisher_id"], f.fields["messages"])

    def _publish_messages(self, pid: int, messages: core.Published) -> None:
        """publish: to the publisher's stream queue, or publish_error for every message
        (PUBLISHER_DOES_NOT_EXIST, STREAM_DOES_NOT_EXIST once its stream is gone)."""
        pub = self.publishers.get(pid)
        if pub is None or pub.queue.deleted:
            code = core.PUBLISHER_DOES_NOT_EXIST if pub is None else core.STREAM_DOES_NOT_EXIST
            if pub is not None:
                pub.errored += len(messages)
            ids = (messages.id_list() if isinstance(messages, core.PublishBlock)
                   else [m[0] for m in messages])
            self.send(core.publish_error(pid, [(i, code) for i in ids]))
            return
        pub.published += len(messages)
        self.listener.received += len(messages)
        pub.queue.cast((STREAM_PUBLISH, self, pid, pub.reference, messages))

    def _query_publisher_sequence(self, f: core.Frame) -> None:
        q = self.stream(f.fields["stream"] or "")
        if q is None:
            self.send(core.response(core.QUERY_PUBLISHER_SEQUENCE, f.corr,
                                    core.STREAM_DOES_NOT_EXIST, struct.pack(">Q", 0)))
            return
        seq = q.call(lambda: q.log.sequences.get(f.fields["reference"] or "", 0))
        self.send(core.response(core.QUERY_PUBLISHER_SEQUENCE, f.corr, core.OK,
                                struct.pack(">Q", seq)))

    def _delete_publisher(self, f: core.Frame) -> None:
        if self.publishers.pop(f.fields["publisher_id"], None) is None:
            self.send(core.response(core.DELETE_PUBLISHER, f.corr,
                                    core.PUBLISHER_DOES_NOT_EXIST))
            return
        self.send(core.response(core.DELETE_PUBLISHER, f.corr, core.OK))

    # -- consuming ---------------------------------------------------------------------------
    def _subscribe(self, f: core.Frame) -> None:
        d = f.fields
        sid, name = d["subscription_id"], d["stream"] or ""
        if sid in self.subscriptions:
            self.send(core.response(core.SUBSCRIBE, f.corr, core.SUBSCRIPTION_ID_ALREADY_EXISTS))
            return
        if not self.allowed(name, "read"):
            self.send(core.response(core.SUBSCRIBE, f.corr, core.ACCESS_REFUSED))
            return
        q = self.stream(name)
        if q is None:
            self.send(core.response(core.SUBSCRIBE, f.corr, core.STREAM_DOES_NOT_EXIST))
            return
        spec = _log_spec(*d["offset_spec"])
        offset = q.call(q.log.locate, NEXT if spec is None else spec)  # offset 0 is an offset
        self.subscriptions[sid] = q
        q.clients.add(self)
        self.send(core.response(core.SUBSCRIBE, f.corr, core.OK))
        sub = Subscription(self, sid, offset, d["credit"], d["properties"])
        super_stream = d["properties"].get("super-stream")
        if super_stream:
            names = [s_ for s_, _k in commands.super_stream_partitions(self, super_stream) or []]
            sub.partition_index = names.index(name) if name in names else 0
        q.subscribe(sub)

    def _credit(self, f: core.Frame) -> None:
        sid = f.fields["subscription_id"]
        q = self.subscriptions.get(sid)
        if q is None or not q.add_credit(self, sid, f.fields["credit"]):
            self.send(core.credit_response(core.SUBSCRIPTION_ID_DOES_NOT_EXIST, sid))

    def _unsubscribe(self, f: core.Frame) -> None:
        sid = f.fields["subscription_id"]
        q = self.subscriptions.pop(sid, None)
        if q is None:
            self.send(core.response(core.UNSUBSCRIBE, f.corr,
                                    core.SUBSCRIPTION_ID_DOES_NOT_EXIST))
            return
        q.unsubscribe(self, sid)
        self.send(core.response(core.UNSUBSCRIBE, f.corr, core.OK))

    # -- offset tracking -----------------------------------------------------------------------
    def _store_offset(self, f: core.Frame) -> None:
        """store_offset has no response; a stream that does not exist or a user without
        read access is ignored, as in rabbit_stream_reader."""
        name, ref = f.fields["stream"] or "", f.fields["reference"] or ""
        q = self.stream(name)
        if q is None or not ref or not self.allowed(name, "read"):
            return
        offset = f.fields["offset"]
        q.call(q.log.store_offsets, {ref: offset})

    def _query_offset(self, f: core.Frame) -> None:
        name, ref = f.fields["stream"] or "", f.fields["reference"] or ""
        if not self.allowed(name, "read"):
            self.send(core.response(core.QUERY_OFFSET, f.corr, core.ACCESS_REFUSED,
                                    struct.pack(">Q", 0)))
            return
        q = self.stream(name)
        if q is None:
            self.send(core.response(core.QUERY_OFFSET, f.corr, core.STREAM_DOES_NOT_EXIST,
                                    struct.pack(">Q", 0)))
            return
        offset = q.log.offsets.get(ref)
        if offset is None:
            self.send(core.response(core.QUERY_OFFSET, f.corr, core.NO_OFFSET,
                                    struct.pack(">Q", 0)))
            return
        self.send(core.response(core.QUERY_OFFSET, f.corr, core.OK, struct.pack(">Q", offset)))


def _log_spec(kind: int, value: int | None) -> Any:
    """A protocol offset specification as StreamLog.locate takes it: FIRST, LAST, NEXT, an
    offset or ("timestamp", ms); None for "none" (keep the subscription's own)."""
    if kind == core.OFFSET_OFFSET:
        return value
    if kind == core.OFFSET_TIMESTAMP:
        return ("timestamp", value)
    return {core.OFFSET_FIRST: FIRST, core.OFFSET_LAST: LAST, core.OFFSET_NEXT: NEXT}.get(kind)


_HANDLERS = {
    (core.PEER_PROPERTIES, False): StreamConnection._peer_properties,
    (core.SASL_HANDSHAKE, False): StreamConnection._sasl_handshake,
    (core.SASL_AUTHENTICATE, False): StreamConnection._sasl_authenticate,
    (core.TUNE, True): StreamConnection._tune,
    (core.TUNE, False): StreamConnection._tune,
    (core.OPEN, False): StreamConnection._open,
    (core.HEARTBEAT, False): StreamConnection._heartbeat,
    (core.CLOSE, False): StreamConnection._close_request,
    (core.CLOSE, True): StreamConnection._close_response,
    (core.CREATE_STREAM, False): commands.create_stream,
    (core.DELETE_STREAM, False): commands.delete_stream,
    (core.METADATA, False): commands.metadata,
    (core.STREAM_STATS, False): commands.stream_stats,
    (core.EXCHANGE_COMMAND_VERSIONS, False): StreamConnection._exchange_command_versions,
    (core.PARTITIONS, False): commands.partitions,
    (core.ROUTE, False): commands.route,
    (core.DECLARE_PUBLISHER, False): StreamConnection._declare_publisher,
    (core.PUBLISH, False): StreamConnection._publish,
    (core.QUERY_PUBLISHER_SEQUENCE, False): StreamConnection._query_publisher_sequence,
    (core.DELETE_PUBLISHER, False): StreamConnection._delete_publisher,
    (core.SUBSCRIBE, False): StreamConnection._subscribe,
    (core.CREDIT, False): StreamConnection._credit,
    (core.UNSUBSCRIBE, False): StreamConnection._unsubscribe,
    (core.STORE_OFFSET, False): StreamConnection._store_offset,
    (core.QUERY_OFFSET, False): StreamConnection._query_offset,
    (core.CREATE_SUPER_STREAM, False): commands.create_super_stream_command,
    (core.DELETE_SUPER_STREAM, False): commands.delete_super_stream,
    (core.CONSUMER_UPDATE, True): StreamConnection._consumer_update_response,
}
