# bench/consumer.py — one consuming channel of a consumer connection, and the per-process tally.
#
# Owns: basic.qos / basic.consume for its channel, acking (each message, or multiple every -A),
# and recording each delivery into the process-wide Tally (count, bytes, end-to-end latency,
# per-producer count and checksum of seqs).
# Talks to: bench.amqp (Channel; deliveries arrive through Channel.on_deliver), bench.worker.
# Must never: decode message properties or copy bodies.
"""Consumer: PerfTest's consumer channel (-a, -q, -A)."""

from __future__ import annotations

from typing import Any

from pamqp import commands

from bench import batch, wire
from bench.amqp import Channel
from bench.histogram import TOP, Histogram


class Tally:
    """What one worker process consumed: ``consumed`` messages, ``consumed_bytes`` (body bytes),
    ``latency`` (µs, publish timestamp -> arrival), ``per_producer`` {producer_id: [count,
    sum of seqs]} for the exactly-once check."""

    def __init__(self) -> None:
        self.consumed = 0
        self.consumed_bytes = 0
        self.latency = Histogram()
        self.per_producer: dict[int, list[int]] = {}


class Consumer:
    """Consumes ``queue`` on ``ch``; ``ack_every`` <= 1 acks each message, N acks multiple."""

    def __init__(self, ch: Channel, queue: str, tally: Tally, *, auto_ack: bool,
                 prefetch: int, ack_every: int) -> None:
        self.ch = ch
        self.queue = queue
        self.tally = tally
        self.auto_ack = auto_ack
        self.prefetch = prefetch
        self.ack_every = ack_every
        self.pending = 0  # delivered but not yet acked (multi-ack mode)
        self.last_dtag = 0
        ch.on_deliver = self.on_deliver
        if batch.np is not None:
            ch.on_deliver_run = self.on_deliver_run

    async def setup(self) -> None:
        """basic.qos (when -q > 0 and not auto-ack)."""
        if self.prefetch and not self.auto_ack:
            await self.ch.rpc(commands.Basic.Qos(prefetch_count=self.prefetch),
                              commands.Basic.QosOk)

    async def consume(self) -> None:
        """basic.consume; deliveries start flowing into the Tally."""
        await self.ch.rpc(
            commands.Basic.Consume(queue=self.queue, no_ack=self.auto_ack),
            commands.Basic.ConsumeOk,
        )

    def on_deliver(self, dtag: int, ts: int, tag: int, size: int, now: int) -> None:
        """One delivery (hot path; the formula is Histogram's bucket(), inlined)."""
        t = self.tally
        t.consumed += 1
        t.consumed_bytes += size
        v = (now - ts) // 1000
        hist = t.latency
        if v < 256:
            hist.counts[v if v > 0 else 0] += 1
        else:
            if v > TOP:
                v = TOP
            s = v.bit_length() - 8
            hist.counts[(s << 7) + (v >> s)] += 1
            if v > hist.max_us:
                hist.max_us = v
        pid = tag >> wire.SEQ_BITS
        per = t.per_producer.get(pid)
        if per is None:
            per = t.per_producer[pid] = [0, 0]
        per[0] += 1
        per[1] += tag & wire.SEQ_MASK
        if not self.auto_ack:
            if self.ack_every <= 1:
                self.ch.conn.queue_frame(wire.ack_frame(self.ch.id, dtag, False))
            else:
                self.pending += 1
                self.last_dtag = dtag
                if self.pending >= self.ack_every:
                    self.pending = 0
                    self.ch.conn.queue_frame(wire.ack_frame(self.ch.id, dtag, True))

    def on_deliver_run(self, recs: Any, size: int, now: int) -> None:
        """Many deliveries at once (numpy records from bench.batch.decode_run): the same
        bookkeeping and acks as ``on_deliver`` for each, in a few array operations."""
        t = self.tally
        k = len(recs)
        t.consumed += k
        t.consumed_bytes += k * size
        idx, counts, vmax = batch.latency_buckets(now, recs["ts"])
        hist = t.latency
        for i, c in zip(idx.tolist(), counts.tolist(), strict=True):
            hist.counts[i] += c
        if vmax > hist.max_us:
            hist.max_us = vmax
        tags = recs["tag"]
        pids = tags >> wire.SEQ_BITS
        seqs = tags & wire.SEQ_MASK
        if pids[0] == pids[-1] and (pids == pids[0]).all():
            groups = [(int(pids[0]), k, int(seqs.sum()))]
        else:
            groups = [(int(p), int((pids == p).sum()), int(seqs[pids == p].sum()))
                      for p in batch.np.unique(pids)]
        for pid, n, total in groups:
            per = t.per_producer.get(pid)
            if per is None:
                per = t.per_producer[pid] = [0, 0]
            per[0] += n
            per[1] += total
        if self.auto_ack:
            return
        dtags = recs["dtag"]
        if self.ack_every <= 1:
            self.ch.conn.queue_frame(batch.ack_frames(self.ch.id, dtags, False))
            return
        first = self.ack_every - self.pending - 1  # index of the next delivery that acks
        if first < k:
            self.ch.conn.queue_frame(batch.ack_frames(self.ch.id, dtags[first::self.ack_every],
                                                      True))
        self.pending = (self.pending + k) % self.ack_every
        self.last_dtag = int(dtags[-1])

    def flush_acks(self) -> None:
        """Ack what a multi-ack consumer still holds (at the end of a run)."""
        if self.pending and not self.auto_ack:
            self.pending = 0
            self.ch.conn.write(wire.ack_frame(self.ch.id, self.last_dtag, True))
