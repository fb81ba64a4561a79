"""JSON objects of the HTTP API with RabbitMQ 3.10's field names (rabbitmq.com/management.html
and the reference at /api/index.html): queues, exchanges, bindings, connections, channels,
consumers, vhosts, users, permissions, policies.

Pure functions of the broker's live objects plus a `RateSampler` for `*_details.rate`; no
I/O, nothing changed. Fields RabbitMQ has that mean nothing here (Erlang reductions, garbage
collection) are left out; fields tools read (messages*, consumers, state, node, ...) are all
present.
"""

from __future__ import annotations

import datetime
import hashlib
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from broker.connection_names import connection_name
from broker.management.rates import RateSampler, with_details
from broker.passwords import encode_hash
from broker.stats import QUEUE_FIELDS, MessageStats
from broker.tls import distinguished_name

if TYPE_CHECKING:
    from broker.channel import ChannelProcess
    from broker.consumers import Consumer
    from broker.exchange import Exchange
    from broker.facades import ChannelFacade, ConnectionFacade
    from broker.queue_process import QueueProcess
    from broker.reader import Reader
    from broker.started import StartedBroker
    from broker.vhost import VHost

PROTOCOL = "AMQP 0-9-1"


def node_name(broker: StartedBroker) -> str:
    """`rabbit@<short hostname>` unless `node_name` is configured (RabbitMQ's default)."""
    return broker.node_name()


def message_stats(sampler: RateSampler, key: Any, stats: MessageStats) -> dict[str, Any]:
    """`message_stats` with counts and `_details.rate` for every counter."""
    return with_details(sampler, key, stats.as_dict())


def queue_key(vhost: str, name: str) -> tuple:
    return ("queue", vhost, name)


def queue_lengths(queue: QueueProcess) -> dict[str, int]:
    """messages, messages_ready, messages_unacknowledged of a queue process (a stream
    counts what its log holds: broker/stream/queue.py lengths)."""
    own = getattr(queue, "lengths", None)
    if own is not None:
        return own()
    bq = queue.bq
    ready = bq.len()
    unacked = bq.depth() - ready
    return {"messages": ready + unacked, "messages_ready": ready,
            "messages_unacknowledged": unacked}


def queue(broker: StartedBroker, sampler: RateSampler, q: QueueProcess, policy: dict | None = None) -> dict:
    """A queue as GET /api/queues/{vhost}/{name} returns it."""
    vhost = q.vhost.name
    key = queue_key(vhost, q.name)
    stats = q.bq.stats()
    lengths = queue_lengths(q)
    active = q.consumers.active() if q.consumers.single_active else None
    ram_bytes = _ram_bytes(stats, lengths["messages"])
    out: dict[str, Any] = {
        "name": q.name,
        "vhost": vhost,
        "durable": q.durable,
        "auto_delete": q.auto_delete,
        "exclusive": q.exclusive_owner is not None,
        "arguments": q.arguments,
        "node": node_name(broker),
        "type": q.queue_type,
        "state": q.flow_state() if hasattr(q, "flow_state") else "running",
        "consumers": len(q.consumers),
        "consumer_capacity": 1.0 if len(q.consumers) else 0.0,
        "consumer_utilisation": 1.0 if len(q.consumers) else 0.0,
        "exclusive_consumer_tag": next(
            (c.tag for c in q.consumers if c.exclusive), None),
        "single_active_consumer_tag": active.tag if active is not None else None,
        "policy": policy["name"] if policy else None,
        "operator_policy": None,
        "effective_policy_definition": policy["definition"] if policy else {},
        "head_message_timestamp": None,
        # beyond RabbitMQ: seconds the next message to deliver has waited (consumer lag;
        # the oldest message in a FIFO queue), None when empty or unknown
        "oldest_message_age": _round(head_message_age(q)),
        "memory": _memory_estimate(stats, lengths["messages"]),
        "message_bytes": stats.get("bytes", 0),
        "message_bytes_ready": q.bq.ready_bytes(),
        "message_bytes_unacknowledged": stats.get("bytes", 0) - q.bq.ready_bytes(),
        "message_bytes_persistent": 0,
        "messages_persistent": stats.get("persistent", 0),
        "messages_ram": stats.get("ram_msgs", lengths["messages"]),
        "messages_ready_ram": stats.get("ram_msgs", lengths["messages"]),
        "messages_unacknowledged_ram": stats.get("ram_ack_count", 0),
        "messages_paged_out": stats.get("delta", 0),
        "backing_queue_status": {
            "mode": "lazy" if q.arguments.get("x-queue-mode") == "lazy" else "default",
            **{k: stats[k] for k in ("q1", "q2", "delta", "q3", "q4", "len",
                                     "target_ram_count") if k in stats},
        },
        "message_stats": with_details(sampler, key, q.message_stats.as_dict(QUEUE_FIELDS)),
        **with_details(sampler, key, lengths),
        # RAM-resident and paged-out bytes, estimated from the RAM share of the messages
        # (the backing queue counts messages in RAM, not their bytes)
        "message_bytes_ram": ram_bytes,
        "message_bytes_paged_out": max(0, stats.get("bytes", 0) - ram_bytes),
        "recoverable_slaves": None,  # no mirrors: RabbitMQ shows null for a classic queue
    }
    if "dedup_entries" in stats:  # x-message-deduplication (broker/dedup/queue.py)
        out["messages_deduplicated"] = stats["dedup_duplicates"]
        out["backing_queue_status"]["cache_info"] = {"entries": stats["dedup_entries"]}
    if q.exclusive_owner is not None:
        out["owner_pid_details"] = connection_details(q.exclusive_owner)
    if q.queue_type == "quorum":
        # rabbit_quorum_queue's info keys: its Raft group's leader and members; one node
        # here, the leader and only member (a replicated cluster is issue 35's)
        node = node_name(broker)
        out.update(leader=node, members=[node], online=[node])
    return out


MSG_OVERHEAD = 200  # bytes of bookkeeping per message held in RAM (MsgStatus + Message)


def _ram_bytes(stats: dict, messages: int) -> int:
    """Body bytes of the queue's messages held in RAM, estimated as their RAM-resident
    share of all its bytes."""
    if not messages:
        return 0
    return int(stats.get("bytes", 0) * min(1.0, stats.get("ram_msgs", messages) / messages))


def _memory_estimate(stats: dict, messages: int) -> int:
    """Bytes of RAM the queue's messages use, estimated: the RAM-resident share of their
    body bytes plus a fixed overhead each (RabbitMQ reports its Erlang process memory;
    there is no per-queue heap here to measure)."""
    if not messages:
        return 0
    return _ram_bytes(stats, messages) + stats.get("ram_msgs", messages) * MSG_OVERHEAD


def head_message_age(q: QueueProcess) -> float | None:
    """Seconds the next message to deliver of queue process `q` has waited (consumer lag):
    from when the queue took it, or from its `timestamp` property when it was read back
    from disk (the index does not keep the enqueue time); None when the queue is empty or
    neither is known."""
    reported = getattr(q, "head_age", False)
    if reported is not False:  # a queue of another worker process: its owner's figure
        return reported
    bq = q.bq
    props = bq.peek_props()
    if props is None:
        return None
    now = time.time()
    if props.enqueued_at is not None:
        return max(0.0, now - props.enqueued_at)
    head = bq.peek(0, 1)
    stamp = head[0][0].properties.timestamp if head else None
    if stamp is None:
        return None
    return max(0.0, now - stamp.replace(tzinfo=stamp.tzinfo or datetime.UTC).timestamp())


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def exchange_key(vhost: str, name: str) -> tuple:
    return ("exchange", vhost, name)


def exchange(x: Exchange, vhost: str, user: str = "",
             sampler: RateSampler | None = None) -> dict:
    """An exchange as GET /api/exchanges/{vhost}/{name} returns it (`policy` only while one
    applies, `message_stats` once something was published to it, as RabbitMQ 3.10.8 shows
    them)."""
    out: dict[str, Any] = {
        "name": x.name, "vhost": vhost, "type": x.type or "direct", "durable": x.durable,
        "auto_delete": x.auto_delete, "internal": x.internal, "arguments": x.arguments,
        "user_who_performed_action": user}
    if x.publish_in and sampler is not None:
        out["message_stats"] = with_details(sampler, exchange_key(vhost, x.name), {
            "publish_in": x.publish_in, "publish_out": x.publish_out})
    policy = getattr(x, "policy", None)
    if policy is not None:
        out["policy"] = policy.name
    holder = getattr(x.routing, "holder", None)
    if holder is not None:  # an x-delayed-message exchange (broker/delayed/)
        out.update(delayed_fields(holder.stats()))
    cache = getattr(x.routing, "cache", None)
    if cache is not None:  # an x-message-deduplication exchange (broker/dedup/)
        # the plugin's `cache_info` (entries and the size limit), and beyond it the count
        # of publishes dropped as duplicates
        out["cache_info"] = {"entries": len(cache), "size": cache.size}
        out["messages_deduplicated"] = x.routing.duplicates()  # type: ignore[attr-defined]
    return out


def due_stamp(due_ms: int) -> str:
    """A due time (ms since the epoch) as "2026-11-29T02:03:58.120Z" (UTC)."""
    at = datetime.datetime.fromtimestamp(due_ms / 1000, datetime.UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def delayed_fields(stats: dict[str, Any]) -> dict[str, Any]:
    """A delayed exchange's fields: `messages_delayed` (waiting; the name RabbitMQ 3.13's
    rabbitmq-delayed-message-exchange reports), and beyond it the next due time
    (`messages_delayed_next_due`, "2026-11-29T02:03:58.120Z" UTC, null when none waits) and
    the counts of messages taken (`delayed_published`), routed when due (`delayed_routed`)
    and routed nowhere when due (`delayed_unroutable`)."""
    due = stats["next_due_ms"]
    stamp = None if due is None else due_stamp(due)
    return {"messages_delayed": stats["messages_delayed"], "messages_delayed_next_due": stamp,
            "delayed_published": stats["delayed_published"],
            "delayed_routed": stats["delayed_routed"],
            "delayed_unroutable": stats["delayed_unroutable"]}


def properties_key(routing_key: str, arguments: dict) -> str:
    """The `properties_key` that names a binding in URLs: the routing key alone ("~" for an
    empty one) without arguments, else routing key, "~" and a hash of the arguments (as
    RabbitMQ's rabbit_mgmt_format:pack_binding_props)."""
    if not arguments:
        return quote(routing_key, safe="") if routing_key else "~"
    digest = hashlib.sha1(repr(sorted(arguments.items())).encode()).hexdigest()[:12]
    return f"{quote(routing_key, safe='')}~{digest}"


def binding(vhost: str, source: str, destination: str, kind: str, routing_key: str,
            arguments: dict) -> dict:
    """A binding as GET /api/bindings returns it."""
    return {"source": source, "vhost": vhost, "destination": destination,
            "destination_type": kind, "routing_key": routing_key, "arguments": arguments,
            "properties_key": properties_key(routing_key, arguments)}


def bindings_of_vhost(vhost: VHost) -> list[dict]:
    """Every binding of a vhost, the default exchange's implicit ones first (one per queue,
    routing key = queue name), as RabbitMQ lists them."""
    name = vhost.name
    out = [binding(name, "", q, "queue", q, {}) for q in sorted(vhost.queues)]
    for xname in sorted(vhost.exchanges):
        if not xname:
            continue
        routing = vhost.exchanges[xname].routing
        for dest, key, args in routing.bindings():
            if isinstance(dest, tuple):
                out.append(binding(name, xname, dest[1], "exchange", key, dict(args)))
            else:
                qname = dest if isinstance(dest, str) else getattr(dest, "name", str(dest))
                out.append(binding(name, xname, qname, "queue", key, dict(args)))
    return out


def connection_details(conn: ConnectionFacade) -> dict:
    peer = conn.peer or ("", 0)
    return {"name": connection_name(conn), "peer_host": peer[0], "peer_port": peer[1]}


def connection(broker: StartedBroker, sampler: RateSampler, conn: Reader) -> dict:
    """A connection as GET /api/connections/{name} returns it."""
    hs = conn.handshake
    props = hs.client_properties if hs is not None else {}
    peer = conn.peer or ("", 0)
    sock = conn.transport.get_extra_info("sockname") if conn.transport else None
    key = ("connection", id(conn))
    out = {
        "name": connection_name(conn),
        "node": node_name(broker),
        "type": "network",
        "protocol": PROTOCOL,
        "state": conn.flow_state() if hasattr(conn, "flow_state") else "running",
        "user": conn.username,
        "user_who_performed_action": conn.username,
        "vhost": conn.vhost.name if conn.vhost is not None else None,
        "host": sock[0] if sock else None,
        "port": sock[1] if sock else None,
        "peer_host": peer[0],
        "peer_port": peer[1],
        "ssl": conn.tls,
        "auth_mechanism": hs.mechanism if hs is not None else "",
        "client_properties": props,
        "channels": len(conn.channels),
        "channel_max": conn.channel_max,
        "frame_max": conn.frame_max,
        "timeout": conn.heartbeat,
        "connected_at": conn.connected_at,
        **with_details(sampler, key, {"recv_oct": conn.recv_oct,
                                      "send_oct": conn.writer.bytes_sent if conn.writer else 0}),
        "recv_cnt": conn.recv_cnt,
        "send_cnt": conn.writer.writes if conn.writer else 0,
        "send_pend": 0,
        **tls_fields(conn),
    }
    if props.get("connection_name") is not None:  # RabbitMQ shows it only when given
        out["user_provided_name"] = props["connection_name"]
    return out


def tls_fields(conn: Reader) -> dict[str, Any]:
    """ssl_protocol, ssl_key_exchange, ssl_cipher, ssl_hash and peer_cert_subject /
    _issuer / _validity of a connection (rabbit_reader's ssl info items, with Erlang's
    names: "tlsv1.3", "aes_256_gcm", "sha384", "ecdhe_rsa" or "any" under TLS 1.3): null on
    a plain TCP connection, as RabbitMQ 3.10.8 shows them."""
    out: dict[str, Any] = dict.fromkeys(
        ("ssl_protocol", "ssl_key_exchange", "ssl_cipher", "ssl_hash", "peer_cert_subject",
         "peer_cert_issuer", "peer_cert_validity"))
    ssl_object = conn.transport.get_extra_info("ssl_object") if conn.transport else None
    if ssl_object is None:
        return out
    version = ssl_object.version() or ""
    out["ssl_protocol"] = version.lower() or None
    cipher = ssl_object.cipher()  # (OpenSSL name, protocol, secret bits)
    if cipher:
        out["ssl_key_exchange"], out["ssl_cipher"], out["ssl_hash"] = cipher_suite(cipher[0])
    cert = conn.peercert
    if cert:
        out["peer_cert_subject"] = distinguished_name(cert.get("subject", ()))
        out["peer_cert_issuer"] = distinguished_name(cert.get("issuer", ()))
        out["peer_cert_validity"] = (f"{_asn1_time(cert.get('notBefore'))} - "
                                     f"{_asn1_time(cert.get('notAfter'))}")
    return out


def cipher_suite(name: str) -> tuple[str, str, str]:
    """(key exchange, cipher, hash) of an OpenSSL cipher name, in Erlang ssl's terms:
    "TLS_AES_256_GCM_SHA384" -> ("any", "aes_256_gcm", "sha384"),
    "ECDHE-RSA-AES128-GCM-SHA256" -> ("ecdhe_rsa", "aes_128_gcm", "sha256")."""
    if name.startswith("TLS_"):  # TLS 1.3: the key exchange is not part of the suite
        parts = name[4:].lower().split("_")
        return "any", "_".join(parts[:-1]), parts[-1]
    parts = name.lower().split("-")
    hash_ = parts[-1] if parts[-1].startswith("sha") else "aead"
    body = parts[:-1] if hash_ != "aead" else parts
    kex = "_".join(p for p in body if p in ("ecdhe", "dhe", "rsa", "ecdsa", "psk"))
    rest = [p for p in body if p not in ("ecdhe", "dhe", "rsa", "ecdsa", "psk")]
    cipher = "_".join(rest).replace("aes256", "aes_256").replace("aes128", "aes_128")
    if cipher.startswith("aes") and not cipher.endswith(("gcm", "ccm")):
        cipher += "_cbc"  # OpenSSL leaves CBC unnamed
    return kex or "rsa", cipher, hash_


def _asn1_time(value: str | None) -> str:
    """"Nov 26 01:00:00 2026 GMT" (ssl.getpeercert) as "2026-11-26T01:00:00Z"."""
    if not value:
        return ""
    stamp = datetime.datetime.strptime(value, "%b %d %H:%M:%S %Y %Z")
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def channel_name(ch: ChannelFacade) -> str:
    return f"{connection_name(ch.conn)} ({ch.number})"


def channel(broker: StartedBroker, sampler: RateSampler, ch: ChannelProcess) -> dict:
    """A channel as GET /api/channels/{name} returns it."""
    conn = ch.conn
    lim = ch.limiter
    return {
        "name": channel_name(ch),
        "node": node_name(broker),
        "number": ch.number,
        "user": conn.username,
        "user_who_performed_action": conn.username,
        "vhost": ch.vhost.name,
        "connection_details": connection_details(conn),
        "state": ch.flow_state(),
        "confirm": ch.confirm is not None,
        "transactional": ch.tx is not None,
        "consumer_count": len(ch.consumers),
        "messages_unacknowledged": len(ch.unacked),
        "messages_unconfirmed": ch.confirm.unconfirmed if ch.confirm is not None else 0,
        "messages_uncommitted": len(ch.tx.publishes) if ch.tx is not None else 0,
        "acks_uncommitted": len(ch.tx.settles) if ch.tx is not None else 0,
        "prefetch_count": lim.consumer_prefetch,
        "global_prefetch_count": lim.prefetch_count,
        "message_stats": message_stats(sampler, ("channel", id(ch)), ch.message_stats),
    }


def consumer(broker: StartedBroker, q: QueueProcess, c: Consumer) -> dict:
    """A consumer as GET /api/consumers returns it."""
    ch = c.channel
    active = q.consumers.active() if q.consumers.single_active else c
    return {
        "consumer_tag": c.tag,
        "queue": {"name": q.name, "vhost": q.vhost.name},
        "channel_details": {
            "name": channel_name(ch), "number": ch.number, "user": ch.conn.username,
            "connection_name": connection_name(ch.conn), "node": node_name(broker),
            "peer_host": (ch.conn.peer or ("", 0))[0], "peer_port": (ch.conn.peer or ("", 0))[1],
        },
        "ack_required": not c.no_ack,
        "exclusive": c.exclusive,
        "prefetch_count": c.prefetch,
        "arguments": c.arguments,
        "active": active is c,
        "activity_status": "single_active" if q.consumers.single_active and active is c
        else ("waiting" if active is not c else "up"),
        "consumer_timeout": None,
    }


def vhost(broker: StartedBroker, sampler: RateSampler, v: VHost, description: str = "",
          tags: tuple = ()) -> dict:
    """A vhost as GET /api/vhosts/{name} returns it (message totals over its queues)."""
    totals = {"messages": 0, "messages_ready": 0, "messages_unacknowledged": 0}
    for q in v.queues.values():
        for k, n in queue_lengths(q).items():
            totals[k] += n
    key = ("vhost", v.name)
    return {
        "name": v.name,
        "description": description,
        "tags": list(tags),
        "metadata": {"description": description, "tags": list(tags)},
        "default_queue_type": "undefined",
        "tracing": v.trace is not None,  # the firehose (broker/trace.py)
        "cluster_state": {node_name(broker): "running"},
        "message_stats": message_stats(sampler, key, vhost_stats(broker, v)),
        **with_details(sampler, key, totals),
        **with_details(sampler, key, vhost_octets(broker, v)),
    }


def vhost_octets(broker: StartedBroker, v: VHost) -> dict[str, int]:
    """recv_oct / send_oct of a vhost: bytes its connections (closed ones included) read
    and wrote."""
    recv, sent = v.closed_octets
    for conn in broker.connections:
        if conn.vhost is v:
            recv += conn.recv_oct
            sent += conn.writer.bytes_sent if conn.writer else 0
    return {"recv_oct": recv, "send_oct": sent}


def vhost_stats(broker: StartedBroker, v: VHost) -> MessageStats:
    """Message counts of a vhost: its closed channels' totals plus its open channels."""
    out = broker.vhost_message_stats(v)
    for stats in getattr(v, "remote_stats", {}).values():  # other worker processes'
        out.add(stats)
    return out


def churn_counts(broker: StartedBroker) -> dict[str, int]:
    """The overview's churn_rates counters (rabbit_mgmt_format, connection_churn_rates in
    3.10.8): objects created, declared and closed since boot."""
    c = broker.churn
    queues = {"queue_created": 0, "queue_declared": 0, "queue_deleted": 0}
    for v in broker.vhosts.values():  # queue churn is counted per vhost
        queues["queue_created"] += v.churn.queues_created
        queues["queue_declared"] += v.churn.queues_declared
        queues["queue_deleted"] += v.churn.queues_deleted
    return {"channel_closed": c.channels_closed, "channel_created": c.channels_opened,
            "connection_closed": c.connections_closed,
            "connection_created": c.connections_opened, **queues}


def user(u: Any, limits: dict | None = None) -> dict:
    """A user as GET /api/users/{name} returns it (the hash is base64, as RabbitMQ) with
    its user limits."""
    return {"name": u.name, "password_hash": encode_hash(u.password_hash),
            "hashing_algorithm": u.hashing_algorithm, "tags": list(u.tags),
            "limits": dict(limits or {})}


def permission(p: Any) -> dict:
    return {"user": p.user, "vhost": p.vhost, "configure": p.configure, "write": p.write,
            "read": p.read}


def topic_permission(p: Any) -> dict:
    return {"user": p.user, "vhost": p.vhost, "exchange": p.exchange, "write": p.write,
            "read": p.read}


def policy(p: Any) -> dict:
    return {"vhost": p.vhost, "name": p.name, "pattern": p.pattern, "apply-to": p.apply_to,
            "definition": p.definition, "priority": p.priority}


def now_ms() -> int:
    return int(time.time() * 1000)
