"""The data plane of one worker process (issue 47, docs/multicore.md "Links between
workers"): the records that carry messages between our queues and other workers' channels.

Owns: the dispatch of "q" records (broker/workers/remote.py) to our queue processes (a
publish, a settlement, a consumer's channel going down, FLOW) and of "ch" records to our
channels (deliveries, confirms, credit, cancels); telling the workers whose queues deliver
to one of our channels that its socket stopped taking writes, and that it drained (FLOW,
`_paused`); telling one of our channels that queues of a dead worker crashed.
Talks to: the runtime (broker/workers/runtime.py), which registers the two record kinds,
holds back "q" records until the broker is up, and asks `queues_crashed` when a worker
dies; our queue processes and channels, through their mailboxes and façades only.
Must never: reorder the records of one link, or drop a delivery: one that reaches a closed
channel goes back to its queue (requeued), as RabbitMQ's queue takes back a dead channel's
unacked messages.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from broker.queue_delivery import RUN
from broker.queue_process import ACK, DISCARD, PUBLISHES, REQUEUE
from broker.workers import remote
from broker.workers.global_qos import GlobalQos
from broker.workers.mesh import Mesh
from broker.workers.refs import ChannelRef
from broker.workers.remote import RemoteChannel, RemoteQueue


class DataPlane:
    """The records for our queues and channels. `vhost(name)` is one of our vhosts (None if
    none), `local_channel(ref)` one of our open channels (None once closed),
    `remote_channel(ref)` the proxy of another worker's channel (made on first use), and
    `proxies` maps (vhost, queue) to the RemoteQueue our channels hold for a queue of
    another worker."""

    def __init__(self, mesh: Mesh, vhost: Callable[[str], Any],
                 local_channel: Callable[[ChannelRef], Any],
                 remote_channel: Callable[[ChannelRef | None], RemoteChannel | None],
                 remote_channels: dict[ChannelRef, RemoteChannel],
                 proxies: dict[tuple[str, str], RemoteQueue], global_qos: GlobalQos) -> None:
        self.mesh = mesh
        self._vhost = vhost
        self._local_channel = local_channel
        self._remote_channel = remote_channel
        self.remote_channels = remote_channels  # the runtime's: ref -> proxy
        self.proxies = proxies  # the runtime's: (vhost, queue) -> proxy
        self.global_qos = global_qos
        # our channels whose paused socket the queues of these workers were told of
        self._paused: dict[ChannelRef, set[int]] = {}

    # -- records for our queues --------------------------------------------------------------
    def on_queue_record(self, peer: int, record: tuple) -> None:
        """("q", vhost, queue, kind, channel ref, payload) from worker `peer`."""
        _, vhost, name, kind, ref, payload = record
        if kind == remote.FLOW:  # about the channel, whichever queue of ours it consumes
            rc = self.remote_channels.get(ref)
            if rc is not None:
                rc.paused = not payload
                if payload:  # the consumer's socket drained: our queues try again
                    for q in rc.queues:
                        q.cast((RUN,))
            return
        v = self._vhost(vhost)
        queue = v.queues.get(name) if v is not None else None
        channel = self._remote_channel(ref)
        if queue is None or isinstance(queue, RemoteQueue):
            # deleted (or never ours): what needed an answer gets the one a deleted
            # queue gives (a publisher's confirm is released, as rabbit_confirms does)
            if kind == PUBLISHES and payload[1] and channel is not None:
                channel.cast(("confirm", _Gone(vhost, name), payload[1]))
            return
        if kind == PUBLISHES:
            if channel is not None:
                channel.queues.add(queue)
            queue.cast((PUBLISHES, channel, payload[0], payload[1]))
        elif kind in (ACK, REQUEUE, DISCARD):
            if channel is not None:
                channel.settled(queue, [tag for tag, _ctag in payload])
            queue.cast((kind, channel, payload))
        elif kind == RUN:
            queue.cast((RUN,))
        elif kind == remote.CHANNEL_DOWN:
            if channel is not None:
                channel.outstanding.pop(queue, None)
                channel.queues.discard(queue)
            queue.call(queue.channel_down, channel, payload)
        elif kind == remote.REMOVE_CONSUMER:
            queue.call(queue.remove_consumer, channel, payload)
        elif kind == remote.TOUCH:
            queue.touch()

    # -- records for our channels ------------------------------------------------------------
    def on_channel_record(self, peer: int, record: tuple) -> None:
        """("ch", channel ref, op, vhost, queue, payload) from worker `peer`, whose queue
        it names."""
        _, ref, op, vhost, qname, payload = record
        ch = self._local_channel(ref)
        proxy = self.proxies.get((vhost, qname))
        if op == remote.CANCELLED and ch is not None and proxy is None:
            # the queue's vhost was deleted here first (its deletion's definitions record
            # overtook the queue's cancel): the consumer is still told, as in one process
            queue = ch.consumers.get(payload)
            if queue is not None:
                ch.consumer_cancelled(queue, payload)
            return
        if ch is None or proxy is None:
            if op == remote.DELIVER:
                # the channel closed while these deliveries travelled: back to the queue
                back = [(d[3], d[0]) for d in payload if d[3] is not None]
                if back:
                    self.mesh.send(peer, ("q", vhost, qname, REQUEUE, ref, back))
            return
        if op == remote.DELIVER:
            deliver = ch.deliver
            for ctag, message, redelivered, ack_tag in payload:
                deliver(proxy, ctag, message, redelivered, ack_tag)
            if ch.limiter.reserved:  # credit of our channel-wide limit, used
                self.global_qos.delivered(ch, peer, sum(d[3] is not None for d in payload))
            if ch.writer.paused:
                self._pause_deliveries(ch, peer, ref, vhost, qname)
        elif op == remote.CONFIRM:
            ch.cast(("confirm", proxy, payload))
        elif op == remote.REJECT:
            ch.cast(("reject", proxy, payload))
        elif op == remote.CREDIT:
            ch.grant_credit(proxy, payload)
        elif op == remote.HOLD:
            ch.hold_publishes(proxy)
        elif op == remote.RELEASE:
            ch.release_publishes(proxy)
        elif op == remote.CANCELLED:
            ch.consumer_cancelled(proxy, payload)
        elif op == remote.QUEUE_GONE:
            ch.cast(("queue_gone", proxy))

    def _pause_deliveries(self, ch: Any, peer: int, ref: ChannelRef, vhost: str,
                          qname: str) -> None:
        """Our channel `ch`'s socket stopped taking writes while worker `peer`'s queues
        deliver to it: that worker holds its deliveries to `ch` until the writer resumes
        (the local path's `can_deliver` does the same with the paused writer). What was
        already on its way still arrives: the overshoot is one loop turn's deliveries."""
        told = self._paused.setdefault(ref, set())
        if peer in told:
            return
        if not told:
            ch.writer.add_resume_callback(lambda: self._resume_deliveries(ref))
        told.add(peer)
        self.mesh.send(peer, ("q", vhost, qname, remote.FLOW, ref, False))

    def _resume_deliveries(self, ref: ChannelRef) -> None:
        for peer in sorted(self._paused.pop(ref, ())):
            self.mesh.send(peer, ("q", "", "", remote.FLOW, ref, True))

    def connection_gone(self, serial: int | None) -> None:
        """Our connection `serial` closed: its paused channels' workers were told (they
        forget its channels themselves)."""
        for ref in [r for r in self._paused if r.serial == serial]:
            del self._paused[ref]

    # -- a worker died ---------------------------------------------------------------------
    @staticmethod
    def queues_crashed(ch: Any, down: set[RemoteQueue]) -> None:
        """Tell our channel `ch` that the queues `down` crashed (RabbitMQ's channel on a
        queue process's abnormal exit): their consumers cancelled, their old delivery tags
        forgotten, unconfirmed publishes nacked, credit towards them reset."""
        if not down:
            return
        for tag, queue in list(ch.consumers.items()):
            if queue in down:
                ch.consumer_cancelled(queue, tag)
        for dtag, (queue, ack_tag, ctag) in list(ch.unacked.items()):
            if queue in down and ack_tag is not None:
                ch.unacked[dtag] = (queue, None, ctag)  # the restarted queue has it back
        if ch.confirm is not None:
            for queue in down:
                ch.confirm.queue_crashed(queue)
        for queue in down:
            if ch.credit.peer_down(queue):
                ch.resume()
        ch.cast(("reject", next(iter(down)), []))  # a batch: its nacks go out after it


class _Gone:
    """A queue that is gone by the time a publish reached its worker, as the publisher's
    channel is told of it (its confirm tracker releases the message for that queue)."""

    def __init__(self, vhost: str, name: str) -> None:
        self.vhost = SimpleNamespace(name=vhost)
        self.name = name
