# bench/sink.py — `python -m bench sink`: a do-nothing AMQP server to measure the client.
#
# Owns: a minimal AMQP 0-9-1 server that accepts any login, answers declares/binds/qos with
# their -ok, confirms every publish at once, and hands each published message straight to a
# consumer of the queue it routes to (round-robin; held in a plain deque while a queue has no
# consumer). No persistence, no prefetch, no acks: what it measures is the client's ceiling.
# With --fault it misbehaves on purpose (drops, duplicates, or drops and nacks one message) so
# tests can prove the bench's exactly-once check and --resend work.
# Talks to: bench clients over TCP; bench.wire for the hot frames, pamqp for the rest.
# Must never: be used as a broker (it has none of a broker's guarantees).
"""Do-nothing sink server (``python -m bench sink --port 5673 [--fault drop|duplicate]``)."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import signal
from collections import deque
from typing import Any

from pamqp import commands as C
from pamqp import frame
from pamqp.exceptions import UnmarshalingException

from bench import batch, wire


def _rechannel(raw: bytes, channel: int) -> bytes:
    """The same frames with their channel field set to ``channel``."""
    out = bytearray(raw)
    pos = 0
    while pos < len(out):
        size = wire.FRAME_HEADER_STRUCT.unpack_from(out, pos)[2]
        out[pos + 1 : pos + 3] = channel.to_bytes(2, "big")
        pos += 8 + size
    return bytes(out)


STICKY = 256  # messages per consumer turn on the batch paths


class Queue:
    """A named queue: consumers [(conn, channel, DeliverEncoder, tag counter)] and a backlog."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.consumers: list[list[Any]] = []
        self.rr = 0
        self.left = 0  # messages the current consumer still gets before the next one's turn
        self.backlog: deque[tuple[str, str, bytes, int]] = deque()  # (ex, rk, raw, channel)


class Sink:
    """Shared state of all connections: queues, exchanges (bindings), fault injection."""

    def __init__(self, fault: str | None = None, fault_at: int = 10, block_at: int = 0,
                 block_for: float = 0.0) -> None:
        self.block_at = block_at  # after this many publishes send connection.blocked (0 = never)
        self.block_for = block_for  # seconds until connection.unblocked
        self.batching = True  # forward runs of identical publishes with bytes.replace
        self.queues: dict[str, Queue] = {}
        self.exchanges: dict[str, tuple[str, dict[str, set[str]]]] = {}  # name -> (type, rk->qs)
        self.fault = fault
        self.fault_at = fault_at  # 1-based index of the published message to drop / duplicate
        self.published = 0
        self.conns: set[SinkConnection] = set()
        self.dirty: set[SinkConnection] = set()
        self.paused: set[SinkConnection] = set()  # consumer connections whose buffer is full
        self.route_cache: dict[bytes, tuple[list[Queue], str, str]] = {}

    def route(self, exchange: str, rk: str) -> list[Queue]:
        if exchange == "":
            q = self.queues.get(rk)
            return [q] if q else []
        kind, binds = self.exchanges.get(exchange, ("direct", {}))
        names = set().union(*binds.values()) if kind == "fanout" else binds.get(rk, set())
        return [self.queues[n] for n in sorted(names) if n in self.queues]

    def deliver(self, q: Queue, exchange: str, rk: str, raw: bytes, src_ch: int) -> None:
        """Hand one message to q's next consumer. ``raw`` is its content header and body
        frames exactly as the publisher sent them on channel ``src_ch``; they are forwarded
        as they are when the consumer's channel number is the same (the common case)."""
        if not q.consumers:
            q.backlog.append((exchange, rk, raw, src_ch))
            return
        q.rr = (q.rr + 1) % len(q.consumers)
        conn, ch, enc, tags = q.consumers[q.rr]
        out = conn.out
        out.append(enc.encode(next(tags)))
        out.append(raw if ch == src_ch else _rechannel(raw, ch))
        self.dirty.add(conn)

    def pick(self, q: Queue, n: int) -> list[Any]:
        """The consumer of q for the next ``n`` messages: round-robin, but each keeps its turn
        for STICKY messages so a consumer sees runs long enough for bench.batch."""
        q.left -= n
        if q.left <= 0 or q.rr >= len(q.consumers):
            q.rr = (q.rr + 1) % len(q.consumers)
            q.left = STICKY
        return q.consumers[q.rr]

    def block(self) -> None:
        """connection.blocked to every connection now, connection.unblocked block_for later."""
        for conn in self.conns:
            conn.send(C.Connection.Blocked("bench sink --block-at"))
        loop = asyncio.get_running_loop()
        loop.call_later(self.block_for, self._unblock)

    def _unblock(self) -> None:
        for conn in self.conns:
            conn.send(C.Connection.Unblocked())
        self.flush()

    def flush(self) -> None:
        for conn in self.dirty:
            if conn.out and conn.transport is not None and not conn.transport.is_closing():
                conn.transport.write(b"".join(conn.out))
            conn.out = []
        self.dirty.clear()


class SinkConnection(asyncio.Protocol):
    """One client connection to the sink (see module comment)."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.transport: Any = None
        self.out: list[bytes] = []
        self.buf = b""
        self.started = False
        self.confirming: dict[int, int] = {}  # channel -> publishes seen (confirm mode)
        self.to_confirm: set[int] = set()  # channels owing an ack after this batch
        self.content: tuple[int, list[Queue], str, str] | None = None  # (ch, queues, ex, rk)
        self.left = 0
        self.bodies: list[bytes] = []
        self.content_ch = 0  # channel of the message being completed
        self.no_batch = False  # a batch failed validation during this data_received
        self.consumer_ids = itertools.count(1)

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.sink.conns.add(self)
        transport.set_write_buffer_limits(high=4 * 1024 * 1024)

    def connection_lost(self, exc: Exception | None) -> None:
        self.sink.conns.discard(self)
        self.sink.paused.discard(self)
        for q in self.sink.queues.values():
            q.consumers = [c for c in q.consumers if c[0] is not self]
        self._resume_all()

    def pause_writing(self) -> None:
        self.sink.paused.add(self)
        for c in self.sink.conns:
            c.transport.pause_reading()

    def resume_writing(self) -> None:
        self.sink.paused.discard(self)
        self._resume_all()

    def _resume_all(self) -> None:
        if not self.sink.paused:
            for c in self.sink.conns:
                if not c.transport.is_closing():
                    c.transport.resume_reading()

    def send(self, method: Any, ch: int = 0) -> None:
        self.out.append(frame.marshal(method, ch))
        self.sink.dirty.add(self)

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        pos = 0
        if not self.started:
            if len(buf) < 8:
                self.buf = buf
                return
            self.started = True
            pos = 8
            self.send(C.Connection.Start(server_properties={"product": "bench-sink"},
                                         mechanisms="PLAIN AMQPLAIN", locales="en_US"))
        n = len(buf)
        unpack = wire.FRAME_HEADER_STRUCT.unpack_from
        sink = self.sink
        self.no_batch = False
        while n - pos >= 7:
            ftype, ch, size = unpack(buf, pos)
            start = pos + 7
            end = start + size
            if end >= n:
                break
            if buf[end] != 0xCE:
                self.transport.abort()
                return
            pos = end + 1
            if ftype == 3:
                self.bodies.append(buf[start - 7 : end + 1])
                self.left -= size
                if self.left <= 0:
                    self._message_done(b"".join(self.bodies))
            elif ftype == 1:
                sig = buf[start : start + 4]
                if sig == wire.PUBLISH:
                    key = buf[start:end]
                    route = sink.route_cache.get(key)
                    if route is None:
                        _, _, pub = frame.unmarshal(buf[start - 7 : end + 1])
                        route = (sink.route(pub.exchange, pub.routing_key), pub.exchange,
                                 pub.routing_key)
                        sink.route_cache[key] = route
                    self.content = (ch, *route)
                    if ch in self.confirming:
                        self.confirming[ch] += 1
                        self.to_confirm.add(ch)
                    # Fast path: header + one body frame already here -> forward as one slice.
                    if n - pos >= 23 and buf[pos] == 2:
                        hsize = unpack(buf, pos)[2]
                        bpos = pos + 8 + hsize
                        if n - bpos >= 7 and buf[bpos] == 3:
                            bsize = unpack(buf, bpos)[2]
                            bend = bpos + 7 + bsize
                            if (bend < n and buf[bend] == 0xCE and buf[pos + 7 + hsize] == 0xCE
                                    and wire.parse_header_body_size(buf, pos + 7) == bsize):
                                self._message_done(buf[pos : bend + 1])
                                # The next messages of this publisher are usually byte-identical
                                # but for the body: forward them in one C-level pass.
                                fstart = start - 7
                                pos = bend + 1 + self._batch(
                                    buf, bend + 1, buf[fstart:start + size + 1],
                                    buf[end + 1 : bpos], buf[bpos : bpos + 7], ch, route[0])
                elif sig == wire.ACK or sig == wire.NACK:
                    pass  # consumer acks: nothing to release
                else:
                    self._method(buf[start - 7 : end + 1], ch)
            elif ftype == 2:
                self.left = wire.parse_header_body_size(buf, start)
                self.bodies = [buf[start - 7 : end + 1]]
                if self.left == 0:
                    self._message_done(self.bodies[0])
        self.buf = buf[pos:] if pos < n else b""
        for ch in self.to_confirm:
            self.out.append(wire.ack_frame(ch, self.confirming[ch], True))
            sink.dirty.add(self)
        self.to_confirm.clear()
        sink.flush()

    def _batch(self, buf: bytes, at: int, pub: bytes, head: bytes, body_head: bytes, ch: int,
               queues: list[Queue]) -> int:
        """Forward the run of messages starting at ``buf[at]`` that repeat the one just seen
        (same publish frame, same content header frame, same body size) without parsing
        frames; returns the bytes consumed (0 = none, the caller's frame loop takes over).

        Small messages: one bytes.replace over the whole run (validated by counting each
        fixed part). Large ones (> 512 B, where count/replace would scan the bodies): one
        slice per message, each checked for its publish, header and body-frame prefix and its
        end octet. A run goes to one consumer per queue, which keeps its consumer for
        STICKY messages so consumers see long runs too; deliveries of one run carry the same
        delivery_tag (the sink ignores acks).
        """
        sink = self.sink
        lp, lh = len(pub), len(head)
        size = lp + lh + len(body_head) + wire.FRAME_HEADER_STRUCT.unpack_from(body_head)[2] + 1
        k = (len(buf) - at) // size
        for limit in (sink.fault_at if sink.fault else 0, sink.block_at):
            if limit and sink.published < limit <= sink.published + k:
                k = limit - 1 - sink.published
        if (k < 2 or self.no_batch or not sink.batching or not buf.startswith(pub, at)
                or not queues or any(not q.consumers for q in queues)):
            return 0
        # Gallop (1, 2, 4, …) then bisect for the run's length: publishers interleave their
        # channels' batches on one connection, so the run usually ends before the buffer does.
        k = batch.run_length(buf, pub, at, size, k)
        if size <= 512:
            region = buf[at : at + k * size]
            if k < 2 or (region.count(pub) != k or region.count(head) != k
                         or region.count(body_head) != k or region[-1] != 0xCE):
                self.no_batch = k >= 2  # layout differs: frame by frame for the rest of this read
                return 0
            for q in queues:
                conn, dch, enc, tags = sink.pick(q, k)
                out = region.replace(pub, enc.encode(next(tags)))
                if dch != ch:
                    out = out.replace(head, _rechannel(head, dch)).replace(
                        body_head, _rechannel(body_head, dch))
                conn.out.append(out)
                sink.dirty.add(conn)
        else:
            starts = []
            m = at
            for _ in range(k):
                if not (buf.startswith(pub, m) and buf.startswith(head, m + lp)
                        and buf.startswith(body_head, m + lp + lh) and buf[m + size - 1] == 0xCE):
                    break
                starts.append(m)
                m += size
            k = len(starts)
            if k < 2:
                return 0
            for q in queues:
                conn, dch, enc, tags = sink.pick(q, k)
                deliver = enc.encode(next(tags))
                out = conn.out
                if dch == ch:
                    for m in starts:
                        out.append(deliver)
                        out.append(buf[m + lp : m + size])
                else:
                    prefix = deliver + _rechannel(head, dch) + _rechannel(body_head, dch)
                    skip = lp + lh + len(body_head)
                    for m in starts:
                        out.append(prefix)
                        out.append(buf[m + skip : m + size])
                sink.dirty.add(conn)
        sink.published += k
        if ch in self.confirming:
            self.confirming[ch] += k
        return k * size

    def _message_done(self, raw: bytes) -> None:
        if self.content is None:
            return
        self.content_ch, queues, ex, rk = self.content
        self.content = None
        sink = self.sink
        sink.published += 1
        copies = 1
        if sink.fault and sink.published == sink.fault_at:
            copies = 2 if sink.fault == "duplicate" else 0
            ch = self.content_ch
            if sink.fault == "nack" and ch in self.confirming:
                seq = self.confirming[ch]
                if seq > 1:
                    self.out.append(wire.ack_frame(ch, seq - 1, True))
                self.out.append(wire.nack_frame(ch, seq, False))
                sink.dirty.add(self)
        if sink.published == sink.block_at:
            sink.block()
        for q in queues:
            for _ in range(copies):
                sink.deliver(q, ex, rk, raw, self.content_ch)

    def _method(self, raw: bytes, ch: int) -> None:  # noqa: C901 - one branch per method
        try:
            _, _, m = frame.unmarshal(raw)
        except UnmarshalingException:
            self.transport.abort()
            return
        sink = self.sink
        if isinstance(m, C.Connection.StartOk):
            self.send(C.Connection.Tune(2047, 131072, 0))
        elif isinstance(m, C.Connection.Open):
            self.send(C.Connection.OpenOk())
        elif isinstance(m, C.Connection.Close):
            self.send(C.Connection.CloseOk())
            sink.flush()
            self.transport.close()
        elif isinstance(m, C.Channel.Open):
            self.send(C.Channel.OpenOk(), ch)
        elif isinstance(m, C.Channel.Close):
            self.send(C.Channel.CloseOk(), ch)
        elif isinstance(m, C.Exchange.Declare):
            sink.exchanges.setdefault(m.exchange, (m.exchange_type, {}))
            sink.route_cache.clear()
            self.send(C.Exchange.DeclareOk(), ch)
        elif isinstance(m, C.Exchange.Delete):
            sink.exchanges.pop(m.exchange, None)
            sink.route_cache.clear()
            self.send(C.Exchange.DeleteOk(), ch)
        elif isinstance(m, C.Queue.Declare):
            name = m.queue or f"sink.gen-{id(self)}-{len(sink.queues)}"
            q = sink.queues.setdefault(name, Queue(name))
            sink.route_cache.clear()
            self.send(C.Queue.DeclareOk(name, len(q.backlog), len(q.consumers)), ch)
        elif isinstance(m, C.Queue.Bind):
            sink.exchanges.setdefault(m.exchange, ("direct", {}))[1].setdefault(
                m.routing_key, set()).add(m.queue)
            sink.route_cache.clear()
            self.send(C.Queue.BindOk(), ch)
        elif isinstance(m, C.Queue.Purge):
            q = sink.queues.get(m.queue)
            count = len(q.backlog) if q else 0
            if q:
                q.backlog.clear()
            self.send(C.Queue.PurgeOk(count), ch)
        elif isinstance(m, C.Queue.Delete):
            sink.queues.pop(m.queue, None)
            for _, binds in sink.exchanges.values():
                for qs in binds.values():
                    qs.discard(m.queue)
            sink.route_cache.clear()
            self.send(C.Queue.DeleteOk(0), ch)
        elif isinstance(m, C.Basic.Qos):
            self.send(C.Basic.QosOk(), ch)
        elif isinstance(m, C.Basic.Consume):
            self._consume(m, ch)
        elif isinstance(m, C.Basic.Cancel):
            for q in sink.queues.values():
                q.consumers = [c for c in q.consumers
                               if not (c[0] is self and c[2].tag == m.consumer_tag)]
            self.send(C.Basic.CancelOk(m.consumer_tag), ch)
        elif isinstance(m, C.Confirm.Select):
            self.confirming[ch] = 0
            self.send(C.Confirm.SelectOk(), ch)

    def _consume(self, m: C.Basic.Consume, ch: int) -> None:
        sink = self.sink
        q = sink.queues.setdefault(m.queue, Queue(m.queue))
        tag = m.consumer_tag or f"sink-ctag-{next(self.consumer_ids)}"
        enc = wire.DeliverEncoder(ch, tag, "", m.queue)
        enc.tag = tag  # type: ignore[attr-defined]
        self.send(C.Basic.ConsumeOk(tag), ch)
        q.consumers.append([self, ch, enc, itertools.count(1)])
        while q.backlog:
            ex, rk, raw, src_ch = q.backlog.popleft()
            sink.deliver(q, ex, rk, raw, src_ch)


async def serve(host: str, port: int, sink: Sink, ready: Any = print) -> None:
    """Listen until cancelled; ``ready(line)`` gets "sink listening on HOST:PORT"."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SinkConnection(sink), host, port)
    bound = server.sockets[0].getsockname()[1]
    ready(f"sink listening on {host}:{bound}")
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench sink", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5673, help="0 = ephemeral (printed)")
    p.add_argument("--fault", choices=("drop", "duplicate", "nack"),
                   help="misbehave once on purpose: drop, duplicate, or drop and nack a message")
    p.add_argument("--fault-at", type=int, default=10, help="which published message (1-based)")
    p.add_argument("--block-at", type=int, default=0,
                   help="send connection.blocked after this many publishes (0 = never)")
    p.add_argument("--block-for", type=float, default=1.0, help="seconds until unblocked")
    p.add_argument("--no-batch", action="store_true", help="forward frame by frame only")
    ns = p.parse_args(argv)
    sink = Sink(ns.fault, ns.fault_at, ns.block_at, ns.block_for)
    sink.batching = not ns.no_batch
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    runner(serve(ns.host, ns.port, sink,
                 ready=lambda line: print(line, flush=True)))
    return 0

