# bench/publisher.py — one publishing channel of a producer connection.
#
# Owns: the publish loop (batches of pre-encoded messages, rate limit, message count, confirm
# window, connection.blocked pause, TCP back-pressure), publisher-confirm tracking
# (bench.confirms.Outstanding), nack counting and --resend of nacked / timed-out messages.
# Talks to: bench.amqp (Channel, Connection), bench.wire (PublishTemplate), bench.worker (which
# starts and stops it and reads its counters).
# Must never: wait without a bound, or touch another publisher's state.
"""Publisher: PerfTest's producer channel (-c, -r, -C, -z, -f, --confirm-timeout); with
--open-loop, every latency counts from the message's scheduled send time."""

from __future__ import annotations

import asyncio
import time
from collections import deque

from pamqp import commands

from bench import wire
from bench.amqp import Channel
from bench.confirms import Outstanding
from bench.histogram import TOP, Histogram
from bench.options import Scenario

POLL = 0.25  # s: longest a waiting publisher goes without re-checking stop/timeouts


class Publisher:
    """Publishes messages tagged ``producer_id << 40 | seq`` (seq from 0) on one channel.

    Counters (cumulative): ``published`` (frames sent, resends included), ``confirmed``,
    ``nacked``, ``returned``, ``resent``, ``timed_out``; ``confirm_hist`` holds confirm
    latencies (µs, send -> basic.ack). ``next_seq`` is the number of distinct messages sent,
    so the producer's checksum of sent seqs is ``next_seq * (next_seq - 1) / 2``.
    """

    def __init__(self, ch: Channel, producer_id: int, exchange: str, routing_key: str,
                 sc: Scenario) -> None:
        self.ch = ch
        self.producer_id = producer_id
        self.sc = sc
        self.template = wire.PublishTemplate(
            ch.id, exchange, routing_key, sc.size, persistent=sc.persistent,
            mandatory=sc.mandatory, frame_max=ch.conn.frame_max,
            priority=(producer_id % (sc.message_priorities + 1)
                      if sc.message_priorities else None),
            message_id=bool(sc.message_id),
            properties=sc.properties or "none",
            delay_ms=sc.delay_ms,
            dedup_header=sc.dedup_header,
        )
        self.window = sc.confirm
        self.next_seq = 0
        self.msg_seq_no = 1  # next publish's sequence number in confirm mode (from 1)
        self.outstanding = Outstanding()  # msg_seq_no ranges awaiting basic.ack/nack
        self.resend_q: deque[int] = deque()  # tags to republish
        self.window_open = asyncio.Event()
        self.window_open.set()
        self.confirm_hist = Histogram()
        self.published = 0
        self.confirmed = 0
        self.nacked = 0
        self.returned = 0
        self.resent = 0
        self.timed_out = 0
        self.stopping = False  # set by the worker: publish no new messages
        self.done = False
        ch.on_confirm = self.on_confirm
        ch.on_return = self.on_return

    async def setup(self) -> None:
        """confirm.select when -c > 0."""
        if self.window:
            await self.ch.rpc(commands.Confirm.Select(), commands.Confirm.SelectOk)

    def on_return(self, reply_code: int) -> None:
        self.returned += 1

    def on_confirm(self, dtag: int, multiple: bool, nack: bool, now: int) -> None:
        """basic.ack / basic.nack from the broker (hot path; per batch, not per message)."""
        hist = self.confirm_hist
        counts = hist.counts
        for tags, sent in self.outstanding.settle(dtag, multiple):
            n = len(tags)
            if nack:
                self.nacked += n
                if self.sc.resend:
                    self.resend_q.extend(tags)
                continue
            self.confirmed += n
            v = (now - sent) // 1000
            if v < 256:
                counts[v if v > 0 else 0] += n
            else:
                if v > TOP:
                    v = TOP
                s = v.bit_length() - 8
                counts[(s << 7) + (v >> s)] += n
            if v > hist.max_us:
                hist.max_us = v
        if len(self.outstanding) < self.window:
            self.window_open.set()

    def _expire(self) -> None:
        """Outstanding confirms older than --confirm-timeout: resend (with --resend) or drop."""
        old = self.outstanding.expire(time.monotonic_ns() - int(self.sc.confirm_timeout * 1e9))
        self.timed_out += len(old)
        if self.sc.resend:
            self.resend_q.extend(old)
        if old:
            self.window_open.set()

    async def run(self) -> None:
        """Publish until stopped (or -C reached), then wait (bounded) for outstanding confirms.

        Raises AMQPError when the connection or channel fails (e.g. 320 on broker restart).
        """
        conn = self.ch.conn
        tmpl = self.template
        sc = self.sc
        batch_max = tmpl.batch
        limit = sc.pmessages
        rate = sc.rate
        confirms = self.window > 0
        started_ns = time.monotonic_ns()
        started = started_ns / 1e9
        open_loop = bool(rate and sc.open_loop)
        step_ns = 1e9 / rate if rate else 0.0
        last_expire = started
        stop_deadline = 0.0
        first_tag = wire.make_tag(self.producer_id, 0)
        while True:
            if conn.error is not None:
                raise conn.error
            if self.ch.error is not None:
                raise self.ch.error
            new_allowed = not self.stopping and not (limit and self.next_seq >= limit)
            if not new_allowed:
                if not self.resend_q and not self.outstanding:
                    break
                now_s = time.monotonic()
                if not stop_deadline:
                    stop_deadline = now_s + sc.confirm_timeout + POLL
                elif now_s > stop_deadline:
                    break
            if confirms:
                now_s = time.monotonic()
                if now_s - last_expire > 1.0:
                    last_expire = now_s
                    self._expire()
            if conn.blocked:
                await _wait(conn.unblocked)
                continue
            if not conn.writable.is_set():
                await _wait(conn.writable)
                continue
            n = batch_max
            if confirms:
                room = self.window - len(self.outstanding)
                if room <= 0:
                    self.window_open.clear()
                    await _wait(self.window_open)
                    continue
                n = min(n, room)
            if self.resend_q:
                tags = [self.resend_q.popleft() for _ in range(min(n, len(self.resend_q)))]
                ts = time.monotonic_ns()
                data = tmpl.build_tags(tags, ts)
                self.resent += len(tags)
            elif new_allowed:
                if limit:
                    n = min(n, limit - self.next_seq)
                if rate:
                    allowed = int((time.monotonic() - started) * rate) + 1 - self.next_seq
                    if allowed <= 0:
                        await asyncio.sleep(min(POLL, -allowed / rate + 1 / rate))
                        continue
                    n = min(n, allowed)
                seq = self.next_seq
                if open_loop:  # stamped with when each was due; a batch spans <= 0.5 ms
                    n = min(n, max(1, int(rate * 0.0005)))
                    ts = started_ns + int(seq * step_ns)
                    data = tmpl.build(n, ts, first_tag + seq, int(step_ns))
                else:
                    ts = time.monotonic_ns()
                    data = tmpl.build(n, ts, first_tag + seq)
                tags = range(first_tag + seq, first_tag + seq + n)
                self.next_seq = seq + n
            else:
                # only confirms outstanding: wait for them (or the timeout scan)
                self.window_open.clear()
                await _wait(self.window_open)
                continue
            if confirms:
                self.outstanding.add(self.msg_seq_no, tags, ts)
                self.msg_seq_no += len(tags)
            conn.write(data)
            self.published += len(tags)
            await asyncio.sleep(0)  # let confirms and other channels in
        self.done = True


async def _wait(event: asyncio.Event) -> None:
    """Wait for ``event`` at most POLL seconds (callers loop and re-check their state)."""
    try:
        await asyncio.wait_for(event.wait(), POLL)
    except TimeoutError:
        pass
