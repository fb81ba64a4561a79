"""Typed keys under which the aiohttp application holds the broker and the rate sampler,
and the accessors every API module uses."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.management.rates import RateSampler

if TYPE_CHECKING:
    from broker.started import StartedBroker

BROKER: web.AppKey[StartedBroker] = web.AppKey("broker")  # the running broker.server.Broker
SAMPLER = web.AppKey("sampler", RateSampler)  # rates for *_details


def broker(request: web.Request) -> StartedBroker:
    """The Broker serving this request."""
    return request.app[BROKER]


def sampler(request: web.Request) -> RateSampler:
    return request.app[SAMPLER]


def queue_worker_call(request: web.Request, vhost: str, queue: Any
                      ) -> Callable[[str, tuple], Awaitable[Any]] | None:
    """For a queue another worker process owns (broker/workers/): `await call(kind,
    payload)` asks that worker (purge, get_n, browse, delete; AMQP errors raised here as
    the queue raises them); None for a queue of this process."""
    hook = getattr(broker(request), "remote_queue_call", None)
    if hook is None or getattr(queue, "worker", None) is None:
        return None
    return lambda kind, payload: hook(vhost, kind, payload)
