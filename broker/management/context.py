"""Typed keys under which the aiohttp application holds the broker and the rate sampler,
and the accessors every API module uses."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
