"""Typed keys under which the aiohttp application holds the broker and the rate sampler,
and the accessors every API module uses."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from broker.management.rates import RateSampler

BROKER = web.AppKey("broker", object)  # the running broker.server.Broker
SAMPLER = web.AppKey("sampler", RateSampler)  # rates for *_details


def broker(request: web.Request) -> Any:
    """The Broker serving this request."""
    return request.app[BROKER]


def sampler(request: web.Request) -> RateSampler:
    return request.app[SAMPLER]
