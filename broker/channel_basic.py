"""Handlers for basic.*, confirm.*, tx.* and channel.* methods (RabbitMQ `rabbit_channel`).

Owns: the semantics of those methods, as functions `handler(ch, cmd)` over a ChannelProcess.
Raises soft errors (403/404/406) for the channel loop to turn into channel.close, hard errors
(503/530/540) for the connection. Never touches sockets directly: output goes through the
channel's writer; never touches a queue's state except through the queue façade.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pamqp import commands

from broker import errors
from broker.access import READ, WRITE
from broker.channel_entities import queue_name
from broker.consumers import Consumer
from broker.declare_checks import check_consume_arguments
from broker.direct_reply_to import PREFIX as REPLY_PREFIX
from broker.direct_reply_to import PSEUDO_QUEUE as REPLY_TO
from broker.direct_reply_to import REGISTRY as REPLY_REGISTRY
from broker.message import Message
from broker.protocol.encoding import build_method, encode_content_raw
from broker.queue_process import ACK, DISCARD, PUBLISH, PUBLISHES, REQUEUE
from broker.sender_selected import extra_keys, names_keys, selected, without_bcc
from broker.ttl import parse_expiration
from broker.tx import TxState

if TYPE_CHECKING:
    from broker.channel import ChannelProcess
    from broker.facades import ContentCommand
    from broker.protocol.framing import Command
    from broker.queue_process import QueueProcess

B = commands.Basic


def _route(ch: ChannelProcess, method: Any,
           message: Message) -> tuple[Message, Sequence[QueueProcess]]:
    """Where one publish goes: the message as its queues get it (without BCC) and the
    queues."""
    if selected(message):  # sender-selected distribution: CC and BCC are routing keys too
        headers = message.headers
        assert headers is not None  # selected() found CC or BCC in them
        keys = [method.routing_key, *extra_keys(headers, method)]
        message = without_bcc(message)  # nobody sees BCC, headers exchanges included
        return message, ch.vhost.route_keys(method.exchange, keys, message.headers, message)
    return message, ch.vhost.routes.route_message(method.exchange, method.routing_key, message)


def _route_and_send(ch: ChannelProcess, method: Any, message: Message,
                    tap: bool = True) -> None:
    """Route one publish and cast it to its queues (or basic.return it when mandatory). A
    reply to a direct reply-to name goes straight to the requester's channel. The firehose
    (broker/trace.py) sees it first, unless `tap` is False (tx.commit: it saw it at
    basic.publish, as RabbitMQ's tap_in)."""
    if not method.exchange and method.routing_key.startswith(REPLY_PREFIX):
        _send_reply(ch, method, message, tap)
        return
    message, queues = _route(ch, method, message)
    trace = ch.trace
    if trace is not None and tap:
        trace.tap_in(ch, message, queues)
    confirm = ch.confirm
    seq = confirm.next_seq_no() if confirm is not None else None
    ch.message_stats.publish += 1
    if queues and method.mandatory and held_unroutable(ch, method, message, queues):
        queues = ()
    ch.vhost.routes.count_publish(method.exchange, 1, len(queues))
    if not queues:
        if method.mandatory:
            ch.message_stats.return_unroutable += 1
            _basic_return(ch, message, 312, "NO_ROUTE")
        else:
            ch.message_stats.drop_unroutable += 1
        if seq is not None:  # set only when confirm is
            confirm.track(seq, ())  # type: ignore[union-attr]
        return
    if seq is not None:  # set only when confirm is
        confirm.track(seq, queues)  # type: ignore[union-attr]
    msg = (PUBLISH, ch, message, seq)
    for queue in queues:
        queue.cast(msg)
        ch.spend_queue_credit(queue)


def publish_alike(ch: ChannelProcess, run: list, start: int, stop: int) -> int:
    """run[start:stop] are publishes with one method object (the decoder hands publishes
    with the same arguments the same one): the method is checked once, the run routed once
    while routing cannot depend on a message's properties (no exchange of the vhost with
    bindings reads headers or properties; else only publishes with one header object go
    together), each queue sent one PUBLISHES message. Each distinct header is checked
    (user_id, expiration) before anything is routed; the group ends before a header that
    fails (it is refused when it comes first, after the ones before it are published) or
    that needs per-message care (direct reply-to). Handles as many as every queue's credit
    allows (at least one); returns how many. Raises what `publish` raises for run[start]."""
    cmd = run[start]
    method = cmd.method
    header = cmd.header
    # with the firehose on every publish is traced one by one
    if ch.tx is not None or ch.trace is not None or header.hot[4] == REPLY_TO or (
            _selected_header(header)) or (method.mandatory and ch.vhost.routes.delaying()) or (
            ch.vhost.routes.deduplicating()) or (
            not method.exchange and method.routing_key.startswith(REPLY_PREFIX)):
        publish(ch, cmd)
        return 1
    publish(ch, cmd, alone=False)  # checks it; the Message is made below
    vhost = ch.vhost
    per_header = not vhost.routes_by_key_only()
    last = header
    for i in range(start + 1, stop):
        h = run[i].header
        if h is last:
            continue
        if h.hot is last.hot and not per_header and h.decoded is None:
            continue  # a template's publish (framing): the hot fields checked are the same
        if per_header or h.hot[4] == REPLY_TO or _selected_header(h):
            stop = i
            break
        try:
            _check_header(ch, method, h)
        except errors.AMQPError:
            stop = i  # refused when it comes first
            break
        last = h
    name = method.exchange
    routing_key = method.routing_key
    first = _message(name, routing_key, header, cmd.body)
    queues = vhost.routes.route_message(name, routing_key, first)
    n = stop - start
    credit = ch.credit
    for queue in queues:
        left = credit.credit_left(queue)
        if left < n:
            n = left if left > 1 else 1
    messages = [first]
    from_wire = Message.from_wire
    for i in range(start + 1, start + n):  # `_message`, inlined: once per publish
        c = run[i]
        h = c.header
        if h.decoded is None:
            messages.append(from_wire(name, routing_key, h.raw_properties, h.hot,
                                      c.body or b""))
        else:
            messages.append(Message(name, routing_key, h.decoded, c.body or b"",
                                    raw_properties=h.raw_properties))
    ch.message_stats.publish += n
    vhost.routes.count_publish(name, n, n * len(queues))
    confirm = ch.confirm
    seqs: range | None = None
    if confirm is not None:
        first_seq = confirm.next_seq_no()
        confirm.skip_seq_nos(n - 1)
        confirm.track_run(first_seq, n, queues)
        seqs = range(first_seq, first_seq + n)
    if not queues:
        if method.mandatory:
            ch.message_stats.return_unroutable += n
            for message in messages:
                _basic_return(ch, message, 312, "NO_ROUTE")
        else:
            ch.message_stats.drop_unroutable += n
        return n
    msg = (PUBLISHES, ch, messages, seqs)
    for queue in queues:
        queue.cast(msg)
        if credit.send(queue, n) and not ch.shutting_down:
            ch.suspend()
    return n


def held_unroutable(ch: ChannelProcess, method: Any, message: Message,
                    queues: Sequence[Any]) -> bool:
    """A mandatory publish that only delayed exchanges' holders took (broker/delayed/):
    True when none of the bindings that exist now would route it, so that it is returned
    (312 NO_ROUTE) now and not held, as a plain exchange would return it. The bindings at
    its due time decide where it goes then; a message they do not route is dropped or goes
    to the exchange's alternate exchange. RabbitMQ's plugin returns every delayed mandatory
    publish at once and still delivers it later (its README: "the mandatory flag is not
    supported"); this broker returns only what could not be routed now."""
    if not all(getattr(q, "is_delay_holder", False) for q in queues):
        return False
    headers = dict(message.headers or {})
    headers["x-delay"] = 0  # as routed now, without the delay
    return not ch.vhost.route_keys(method.exchange, [method.routing_key], headers, message)


def _selected_header(header: Any) -> bool:
    """The publish carries CC or BCC (only a header decoded at once can: the scan decodes
    such tables)."""
    decoded = header.decoded
    return decoded is not None and names_keys(decoded.headers)


def _message(name: str, routing_key: str, header: Any, body: bytes | None) -> Message:
    """The Message of one publish: its properties stay encoded unless decoded already."""
    if header.decoded is None:
        return Message.from_wire(name, routing_key, header.raw_properties, header.hot,
                                 body or b"")
    return Message(name, routing_key, header.decoded, body or b"",
                   raw_properties=header.raw_properties)


def _send_reply(ch: ChannelProcess, method: Any, message: Message, tap: bool) -> None:
    """Direct reply-to (rabbitmq.com/direct-reply-to.html): deliver to the requester's
    reply consumer; a gone requester drops the reply (basic.return NO_ROUTE if mandatory).
    A publisher in confirm mode is confirmed at once, as for any routed publish. Traced
    (when `tap`) as routed to no queue, as RabbitMQ routes reply-to names to none."""
    trace = ch.trace
    if trace is not None and tap:
        trace.tap_in(ch, message, ())
    target = REPLY_REGISTRY.channel_for(method.routing_key)
    ch.message_stats.publish += 1
    delivered = target is not None and target.deliver_reply(message)
    if not delivered and method.mandatory:
        _basic_return(ch, message, 312, "NO_ROUTE")
    confirm = ch.confirm
    if confirm is not None:
        confirm.track(confirm.next_seq_no(), ())


def _basic_return(ch: ChannelProcess, message: Message, code: int, text: str) -> None:
    ch.writer.send(encode_content_raw(
        ch.number, build_method(B.Return, reply_code=code, reply_text=text, exchange=message.exchange,
                                routing_key=message.routing_key),
        message.wire_properties(),
        message.body, ch.frame_max))


def publish(ch: ChannelProcess, cmd: ContentCommand, alone: bool = True) -> None:
    """basic.publish (§1.8.3.7): 540 for immediate (as RabbitMQ), 403 without write on the
    exchange (the default one is `amq.default`), 404 unknown exchange, 403 internal
    exchange, 403 outside the topic write permission, 406 for a `user_id` that is not the
    connection's user unless the user is tagged `impersonator`, 406 for an `expiration` that
    is not a non-negative integer string (rabbitmq.com/ttl.html). The checks of the method
    are skipped for the same method object as the last publish's (the decoder hands alike
    publishes one object) while neither the vhost's topology nor the permissions changed."""
    method = cmd.method
    name = method.exchange
    vhost = ch.vhost
    checked = ch.publish_checked
    if (checked[0] is not method or checked[1] != vhost.topology_version
            or checked[2] != ch.access.control.generation):
        _check_publish(ch, method)
        ch.publish_checked = (method, vhost.topology_version, ch.access.control.generation)
    header = cmd.header
    _check_header(ch, method, header)
    if not alone:  # publish_alike makes and routes the messages itself
        return
    if header.hot[4] == REPLY_TO:
        if ch.reply_consumer is None:  # rabbit_channel: no reply consumer on this channel
            raise errors.amqp_error(errors.PreconditionFailed,
                                    "fast reply consumer does not exist", method)
        props = copy.copy(header.properties)
        props.reply_to = ch.reply_consumer[1]  # re-encoded with the rewritten reply_to
        message = Message(name, method.routing_key, props, cmd.body or b"")
    else:  # the properties stay encoded (a headers table too) unless decoded already
        message = _message(name, method.routing_key, header, cmd.body)
        if selected(message):
            headers = message.headers
            assert headers is not None  # selected() found CC or BCC in them
            extra_keys(headers, method)  # 406 now for a CC/BCC that is no array
    if ch.tx is not None:
        ch.tx.publishes.append((method, message))
        trace = ch.trace
        if trace is not None:  # RabbitMQ traces a tx publish when it is published
            if not name and method.routing_key.startswith(REPLY_PREFIX):
                trace.tap_in(ch, message, ())
            else:
                trace.tap_in(ch, *_route(ch, method, message))
        return
    _route_and_send(ch, method, message)


def _check_header(ch: ChannelProcess, method: Any, header: Any) -> None:
    """The checks of a publish's properties: 406 for a `user_id` that is not the
    connection's user unless the user is tagged `impersonator`
    (rabbitmq.com/validated-user-id.html), 406 for an `expiration` that is not a
    non-negative integer string (rabbit_channel check_expiration_header)."""
    _mode, _priority, expiration, user_id, _reply_to = header.hot
    if (user_id is not None and user_id != ch.conn.username
            and not ch.access.has_tag("impersonator")):
        raise errors.amqp_error(
            errors.PreconditionFailed,
            f"user_id property set to '{user_id}' but authenticated user was "
            f"'{ch.conn.username}'", method)
    if expiration is not None:
        try:
            parse_expiration(expiration)
        except ValueError as exc:
            raise errors.amqp_error(
                errors.PreconditionFailed, f"invalid expiration '{expiration}': {exc}",
                method) from None


def _check_publish(ch: ChannelProcess, method: Any) -> None:
    """The checks of a basic.publish method (see `publish`); raises 540, 403 or 404."""
    if method.immediate:
        raise errors.amqp_error(errors.NotImplemented_, "immediate=true", method)
    name = method.exchange
    ch.access.check("exchange", name, WRITE, method)
    if name:
        exchange = ch.vhost.exchanges.get(name)
        if exchange is None:
            raise errors.amqp_error(
                errors.NotFound, f"no exchange '{name}' in vhost '{ch.vhost.name}'", method)
        if exchange.internal:
            raise errors.amqp_error(
                errors.AccessRefused,
                f"cannot publish to internal exchange '{name}' in vhost '{ch.vhost.name}'",
                method)
        if exchange.type == "topic":
            ch.access.check_topic(name, "topic", method.routing_key, WRITE, method)


def consume(ch: ChannelProcess, cmd: Command) -> None:
    """basic.consume (§1.8.3.3): read on the queue; server tags "amq.ctag-…", 530 on a reused tag, 403 for
    exclusive conflicts, x-priority, per-consumer prefetch from basic.qos global=false; 406
    for consumer arguments the queue's type does not take (`check_consume_arguments`)."""
    m = cmd.method
    prepared = prepare_consume(ch, m)
    if prepared is None:
        return
    queue, consumer = prepared
    queue.call(queue.add_consumer, consumer)  # 403 if exclusive conflicts; casts RUN
    consumed(ch, m, queue, consumer.tag)


def consumed(ch: ChannelProcess, m: Any, queue: Any, tag: str) -> None:
    """The queue took consumer `tag`: remember it, send consume-ok."""
    ch.consumers[tag] = queue
    if not m.nowait:
        ch.send_method(B.ConsumeOk(tag))


def prepare_consume(ch: ChannelProcess, m: Any) -> tuple[Any, Consumer] | None:
    """basic.consume's checks, and the consumer to add to the queue it names (None: a
    direct reply-to consumer, done)."""
    if m.queue == REPLY_TO:
        _consume_replies(ch, m)
        return None
    name = queue_name(ch, m.queue, m)
    ch.access.check("queue", name, READ, m)
    queue = ch.vhost.get_queue(name, ch.conn, m)
    tag = m.consumer_tag or ("amq.ctag-" + uuid.uuid4().hex[:22])
    if tag in ch.consumers or (ch.reply_consumer and ch.reply_consumer[0] == tag):
        raise errors.amqp_error(errors.NotAllowed, f"attempt to reuse consumer tag '{tag}'", m)
    args = m.arguments or {}
    what = f"queue '{name}' in vhost '{ch.vhost.name}'"
    if queue.queue_type == "quorum" and ch.limiter.prefetch_count:
        # rabbit_quorum_queue:consume refuses a channel whose limiter is active (global qos)
        raise errors.amqp_error(errors.NotImplemented_, f"{what} does not support global qos",
                                m)
    check_consume_arguments(queue.queue_type, args, what, m)
    priority = args.get("x-priority", 0)
    return queue, Consumer(tag, ch, m.no_ack, m.exclusive, priority,
                           ch.limiter.consumer_prefetch, args)


def _consume_replies(ch: ChannelProcess, m: Any) -> None:
    """basic.consume on amq.rabbitmq.reply-to: no-ack only (406 "reply consumer cannot
    acknowledge"), one per channel (406 "reply consumer already set"), as rabbit_channel;
    no queue and no read permission involved."""
    if not m.no_ack:
        raise errors.amqp_error(errors.PreconditionFailed,
                                "reply consumer cannot acknowledge", m)
    if ch.reply_consumer is not None:
        raise errors.amqp_error(errors.PreconditionFailed, "reply consumer already set", m)
    tag = m.consumer_tag or ("amq.ctag-" + uuid.uuid4().hex[:22])
    if tag in ch.consumers:
        raise errors.amqp_error(errors.NotAllowed, f"attempt to reuse consumer tag '{tag}'", m)
    ch.reply_consumer = (tag, REPLY_REGISTRY.register(ch))
    if not m.nowait:
        ch.send_method(B.ConsumeOk(tag))


def cancel(ch: ChannelProcess, cmd: Command) -> None:
    """basic.cancel (§1.8.3.5): an unknown tag still gets cancel-ok (RabbitMQ)."""
    m = cmd.method
    if ch.reply_consumer is not None and ch.reply_consumer[0] == m.consumer_tag:
        REPLY_REGISTRY.unregister(ch.reply_consumer[1])
        ch.reply_consumer = None
    queue = ch.consumers.pop(m.consumer_tag, None)
    if queue is not None and not queue.deleted:
        queue.call(queue.remove_consumer, ch, m.consumer_tag)
    if not m.nowait:
        ch.send_method(B.CancelOk(m.consumer_tag))


def get(ch: ChannelProcess, cmd: Command) -> None:
    """basic.get (§1.8.3.10): read on the queue; get-ok with message_count left, or
    get-empty."""
    m = cmd.method
    name = queue_name(ch, m.queue, m)
    ch.access.check("queue", name, READ, m)
    queue = ch.vhost.get_queue(name, ch.conn, m)
    result = queue.call(queue.basic_get, ch, m.no_ack)
    if result is None:
        get_empty(ch)
        return
    fetched, left = result
    get_ok(ch, m.no_ack, queue, fetched.message, fetched.redelivered, fetched.ack_tag, left)


def get_empty(ch: ChannelProcess) -> None:
    """basic.get-empty."""
    ch.message_stats.get_empty += 1
    ch.send_method(B.GetEmpty())


def get_ok(ch: ChannelProcess, no_ack: bool, queue: Any, msg: Message, redelivered: bool,
           ack_tag: Any, left: int) -> None:
    """basic.get-ok for `msg` got from `queue` (a local queue process, or a queue of
    another worker process: broker/workers/handlers.py), `left` ready messages after it."""
    tag = ch.next_delivery_tag
    ch.next_delivery_tag = tag + 1
    stats = ch.message_stats
    if not ch._stamping:
        ch.stamp_soon()
    if not no_ack:
        ch.unacked[tag] = (queue, ack_tag, None)
        ch.limiter.unacked += 1
        stats.get += 1
    else:
        stats.get_no_ack += 1
    if redelivered:
        stats.redeliver += 1
    trace = ch.trace
    if trace is not None:
        trace.tap_out(ch, queue.name, msg, redelivered)
    ch.writer.send(encode_content_raw(
        ch.number, build_method(B.GetOk, delivery_tag=tag, redelivered=redelivered,
                                 exchange=msg.exchange, routing_key=msg.routing_key,
                                 message_count=left),
        msg.wire_properties(), msg.body, ch.frame_max))


def _settle(ch: ChannelProcess, kind: int, delivery_tag: int, multiple: bool, method: Any) -> None:
    entries = ch.collect(delivery_tag, multiple, method)
    if ch.tx is not None:
        ch.tx.settles.append((kind, entries))
        return
    ch.settle(kind, entries)


def ack(ch: ChannelProcess, cmd: Command) -> None:
    """basic.ack (§1.8.3.13); 406 "unknown delivery tag N"."""
    m = cmd.method
    _settle(ch, ACK, m.delivery_tag, m.multiple, m)


def nack(ch: ChannelProcess, cmd: Command) -> None:
    """basic.nack (RabbitMQ extension): reject one or many, requeue or drop."""
    m = cmd.method
    _settle(ch, REQUEUE if m.requeue else DISCARD, m.delivery_tag, m.multiple, m)


def reject(ch: ChannelProcess, cmd: Command) -> None:
    """basic.reject (§1.8.3.14)."""
    m = cmd.method
    _settle(ch, REQUEUE if m.requeue else DISCARD, m.delivery_tag, False, m)


def recover(ch: ChannelProcess, cmd: Command) -> None:
    """basic.recover / recover-async: requeue every unacked delivery (RabbitMQ supports only
    requeue=true; requeue=false → 540 NOT_IMPLEMENTED)."""
    m = cmd.method
    if not m.requeue:
        raise errors.amqp_error(errors.NotImplemented_, "requeue=false", m)
    entries = dict(ch.unacked)
    ch.unacked.clear()
    ch.settle(REQUEUE, entries)
    if isinstance(m, B.Recover):
        ch.send_method(B.RecoverOk())


def qos(ch: ChannelProcess, cmd: Command) -> None:
    """basic.qos (§1.8.3.1, RabbitMQ's per-consumer/per-channel reading of `global`)."""
    m = cmd.method
    if m.prefetch_size:
        raise errors.amqp_error(errors.NotImplemented_, f"prefetch_size!=0 ({m.prefetch_size})", m)
    ch.limiter.qos(m.prefetch_count, m.global_)
    ch.send_method(B.QosOk())
    ch.poke_queues()


def confirm_select(ch: ChannelProcess, cmd: Command) -> None:
    """confirm.select (rabbitmq.com/confirms.html): 406 on a tx channel."""
    m = cmd.method
    if ch.tx is not None:
        raise errors.amqp_error(
            errors.PreconditionFailed, "cannot switch from tx to confirm mode", m)
    if ch.confirm is None:
        from broker.confirms import ConfirmTracker

        ch.confirm = ConfirmTracker()
    if not m.nowait:
        ch.send_method(commands.Confirm.SelectOk())


def tx_select(ch: ChannelProcess, cmd: Command) -> None:
    """tx.select (§1.9.2.1): 406 on a confirm channel."""
    if ch.confirm is not None:
        raise errors.amqp_error(
            errors.PreconditionFailed, "cannot switch from confirm to tx mode", cmd.method)
    if ch.tx is None:
        ch.tx = TxState()
    ch.send_method(commands.Tx.SelectOk())


def tx_commit(ch: ChannelProcess, cmd: Command) -> None:
    """tx.commit: apply buffered publishes and settlements in order; 406 if not tx."""
    tx = _need_tx(ch, cmd.method)
    publishes, settles = tx.publishes, tx.settles
    tx.publishes, tx.settles = [], []
    for method, message in publishes:
        _route_and_send(ch, method, message, tap=False)
    for kind, entries in settles:
        ch.settle(kind, entries)
    ch.send_method(commands.Tx.CommitOk())


def tx_rollback(ch: ChannelProcess, cmd: Command) -> None:
    """tx.rollback: drop buffered publishes; settled deliveries become unacked again."""
    tx = _need_tx(ch, cmd.method)
    for _kind, entries in tx.settles:
        ch.unacked.update(entries)
    ch.unacked = dict(sorted(ch.unacked.items()))
    tx.publishes, tx.settles = [], []
    ch.send_method(commands.Tx.RollbackOk())


def _need_tx(ch: ChannelProcess, method: Any) -> Any:
    if ch.tx is None:
        raise errors.amqp_error(errors.PreconditionFailed, "channel is not transactional",
                                method)
    return ch.tx


def channel_close(ch: ChannelProcess, cmd: Command) -> None:
    """channel.close from the client: release everything, reply close-ok."""
    ch.cleanup()
    ch.send_method(commands.Channel.CloseOk())
    ch.state = "closed"
    ch.conn.channel_closed(ch)


def channel_flow(ch: ChannelProcess, cmd: Command) -> None:
    """channel.flow: RabbitMQ accepts active=true and refuses active=false with 540."""
    m = cmd.method
    if not m.active:
        raise errors.amqp_error(errors.NotImplemented_, "active=false", m)
    ch.send_method(commands.Channel.FlowOk(active=True))


def channel_flow_ok(ch: ChannelProcess, cmd: Command) -> None:
    """channel.flow-ok: the answer to a server flow request; nothing to do."""


def channel_open(ch: ChannelProcess, cmd: Command) -> None:
    """channel.open (§1.5.2.1): open-ok; a second open on an open channel → 504 (hard)."""
    if ch.opened:
        raise errors.amqp_error(errors.ChannelError, "second 'channel.open' seen", cmd.method)
    ch.opened = True
    ch.send_method(commands.Channel.OpenOk())


BASIC_HANDLERS: dict[type, Callable[[ChannelProcess, Any], None]] = {
    B.Publish: publish,
    B.Consume: consume,
    B.Cancel: cancel,
    B.Get: get,
    B.Ack: ack,
    B.Nack: nack,
    B.Reject: reject,
    B.Recover: recover,
    B.RecoverAsync: recover,
    B.Qos: qos,
    commands.Confirm.Select: confirm_select,
    commands.Tx.Select: tx_select,
    commands.Tx.Commit: tx_commit,
    commands.Tx.Rollback: tx_rollback,
    commands.Channel.Close: channel_close,
    commands.Channel.Flow: channel_flow,
    commands.Channel.FlowOk: channel_flow_ok,
    commands.Channel.Open: channel_open,
}

