# bench/ha/semantics.py — what a quorum queue refuses and how, asked of a live broker.
#
# Owns: a list of declare/consume/delete probes against x-queue-type=quorum, and the reply
# code and text each one got; x-delivery-limit and x-delivery-count observed on redelivery.
# Talks to: any AMQP 0-9-1 broker through pika (RabbitMQ 3.10.8 for docs/high-availability.md).
# Must never: leave queues behind (every probe deletes what it declared).
"""``python -m bench.ha.semantics [--uri URI] [--json FILE]``: quorum-queue replies, as JSON."""

from __future__ import annotations

import argparse
import json
import sys
import uuid

import pika
import pika.exceptions


def _probe(params: pika.URLParameters, name: str, fn) -> dict:
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    res: dict = {"probe": name}
    try:
        fn(ch)
        res["reply"] = "ok"
    except pika.exceptions.ChannelClosedByBroker as exc:
        res["reply"] = "channel.close"
        res["code"], res["text"] = exc.reply_code, exc.reply_text
    except pika.exceptions.ConnectionClosedByBroker as exc:
        res["reply"] = "connection.close"
        res["code"], res["text"] = exc.reply_code, exc.reply_text
    finally:
        if conn.is_open:
            conn.close()
    return res


def probes(uri: str) -> list[dict]:
    params = pika.URLParameters(uri)
    qq = {"x-queue-type": "quorum"}
    out = []

    def cleanup(q: str) -> None:
        c = pika.BlockingConnection(params)
        c.channel().queue_delete(q)
        c.close()

    def declare(suffix: str, **kw):
        q = f"ha-probe-{suffix}-{uuid.uuid4().hex[:6]}"
        args = dict(qq, **kw.pop("extra", {}))
        kw.setdefault("durable", True)  # pika's default is durable=False

        def fn(ch):
            ch.queue_declare(q, arguments=args, **kw)
        r = _probe(params, suffix, fn)
        r["queue"] = q
        cleanup(q)
        return r

    out.append(declare("durable"))
    out.append(declare("non-durable", durable=False))
    out.append(declare("exclusive", exclusive=True))
    out.append(declare("auto-delete", auto_delete=True))
    for arg, val in [("x-max-priority", 10), ("x-queue-mode", "lazy"), ("x-max-age", "1D"),
                     ("x-overflow", "reject-publish-dlx"), ("x-delivery-limit", 3),
                     ("x-quorum-initial-group-size", 3), ("x-single-active-consumer", True),
                     ("x-message-ttl", 1000), ("x-dead-letter-strategy", "at-least-once")]:
        out.append(declare(f"{arg}={val}", extra={arg: val}))

    out.append(_probe(params, "server-named (queue '')",
                      lambda ch: ch.queue_declare("", durable=True, arguments=qq)))

    # consume with global qos, queue.delete if-unused / if-empty
    q = f"ha-probe-ops-{uuid.uuid4().hex[:6]}"
    c = pika.BlockingConnection(params)
    c.channel().queue_declare(q, durable=True, arguments=qq)
    c.close()

    def global_qos(ch):
        ch.basic_qos(prefetch_count=10, global_qos=True)
        ch.basic_consume(q, lambda *a: None)

    out.append(_probe(params, "basic.consume after basic.qos global=true", global_qos))
    out.append(_probe(params, "queue.delete if-unused", lambda ch: ch.queue_delete(q, if_unused=True)))
    out.append(_probe(params, "queue.delete if-empty", lambda ch: ch.queue_delete(q, if_empty=True)))
    cleanup(q)
    out.append(delivery_limit(params))
    return out


def delivery_limit(params: pika.URLParameters, limit: int = 2) -> dict:
    """Publish one message to a queue with x-delivery-limit, reject-requeue it until it goes;
    record the x-delivery-count header of every delivery."""
    q = f"ha-probe-dl-{uuid.uuid4().hex[:6]}"
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.queue_declare(q, durable=True,
                     arguments={"x-queue-type": "quorum", "x-delivery-limit": limit})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"x", pika.BasicProperties(delivery_mode=2))
    seen = []
    for _ in range(limit + 3):
        m, props, _body = ch.basic_get(q)
        if m is None:
            break
        seen.append({"redelivered": m.redelivered,
                     "x-delivery-count": (props.headers or {}).get("x-delivery-count")})
        ch.basic_reject(m.delivery_tag, requeue=True)
    left = ch.queue_declare(q, passive=True).method.message_count
    ch.queue_delete(q)
    conn.close()
    return {"probe": f"x-delivery-limit={limit}: basic.get + basic.reject(requeue) until gone",
            "deliveries": seen, "messages_left": left}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ha.semantics")
    p.add_argument("--uri", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    p.add_argument("--json", default=None)
    ns = p.parse_args(argv)
    doc = {"uri": ns.uri, "probes": probes(ns.uri)}
    text = json.dumps(doc, indent=1)
    if ns.json:
        with open(ns.json, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
