"""Dead-lettering: the message a queue republishes to its dead letter exchange.

Owns: `dead_letter_message` (the new message: x-death, x-first-death-*, routing keys,
expiration removed) and `is_cycle` (RabbitMQ's rule for dropping a message that would cycle).
Pure: the queue process routes and casts the result through its vhost. Source:
rabbitmq.com/dlx.html and rabbit_dead_letter.erl (RabbitMQ 3.10):
- the new message goes to `x-dead-letter-exchange` with `x-dead-letter-routing-key` if set
  (the CC header is then removed), else with its own routing keys (the published key and
  its CC keys; BCC keys are not kept by this broker after routing);
- `x-death` is an array of tables, newest first: `count`, `reason` (rejected, expired,
  maxlen), `queue`, `time`, `exchange`, `routing-keys`, and `original-expiration` when the
  message had a per-message TTL. An entry for the same queue and reason is counted up and
  moved to the front instead of added again;
- `x-first-death-reason`, `-queue`, `-exchange` are set once, on the first dead-lettering;
- the `expiration` property is removed (it is kept in `original-expiration`).
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

from broker.message import Message

REASONS = ("rejected", "expired", "maxlen")


def routing_keys(message: Message) -> list[str]:
    """The keys a message was published with: its routing key, then its CC header's."""
    keys = [message.routing_key]
    headers = message.properties.headers
    cc = headers.get("CC") if headers else None
    if isinstance(cc, list):
        keys.extend(k for k in cc if isinstance(k, str))
    return keys


def dead_letter_message(message: Message, reason: str, queue: str, dlx: str,
                        dlrk: str | None, now: datetime.datetime) -> tuple[Message, list[str]]:
    """(the dead-lettered copy of `message`, the routing keys to route it with). `reason` is
    one of REASONS; `queue` the queue it leaves; `dlx`/`dlrk` the queue's
    x-dead-letter-exchange and x-dead-letter-routing-key; `now` the time of death (UTC)."""
    props = message.properties
    old_keys = routing_keys(message)
    headers: dict[str, Any] = dict(props.headers or {})
    entry: dict[str, Any] = {
        "count": 1,
        "reason": reason,
        "queue": queue,
        "time": now.replace(microsecond=0),
        "exchange": message.exchange,
        "routing-keys": old_keys,
    }
    if props.expiration is not None:
        entry["original-expiration"] = props.expiration
    deaths = headers.get("x-death")
    deaths = [d for d in deaths if isinstance(d, dict)] if isinstance(deaths, list) else []
    for i, death in enumerate(deaths):
        if death.get("queue") == queue and death.get("reason") == reason:
            count = death.get("count")
            updated = dict(death, count=(count if isinstance(count, int) else 0) + 1)
            deaths = [updated] + deaths[:i] + deaths[i + 1:]
            break
    else:
        deaths = [entry] + deaths
    headers["x-death"] = deaths
    headers.setdefault("x-first-death-reason", reason)
    headers.setdefault("x-first-death-queue", queue)
    headers.setdefault("x-first-death-exchange", message.exchange)
    if dlrk is not None:
        keys = [dlrk]
        headers.pop("CC", None)
    else:
        keys = old_keys
    new_props = copy.copy(props)
    new_props.headers = headers
    new_props.expiration = None
    return Message(dlx, keys[0], new_props, message.body), keys


def is_cycle(queue: str, headers: dict[str, Any] | None) -> bool:
    """Would dead-lettering into `queue` close a cycle with no rejection in it? True means
    the message is dropped (rabbit_dead_letter is_cycle): take the x-death entries (newest
    first) up to and including the first one for `queue`; a cycle is "fully automatic" when
    none of them has reason rejected."""
    deaths = headers.get("x-death") if headers else None
    if not isinstance(deaths, list):
        return False
    path = []
    for death in deaths:
        if not isinstance(death, dict):
            return False
        path.append(death)
        if death.get("queue") == queue:
            return all(d.get("reason") != "rejected" for d in path)
    return False
