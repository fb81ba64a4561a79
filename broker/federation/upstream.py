# Owns: the `federation-upstream` and `federation-upstream-set` runtime parameters (their
# validation, with RabbitMQ's texts) and which upstreams a policy gives an exchange or queue.
# Talked to by: broker/federation/supervisor.py, broker/policies.py (policy keys).
# Must never: connect anywhere or touch the broker's state.
"""Federation upstreams (rabbitmq.com/federation-reference.html; rabbit_federation_parameters
and rabbit_federation_upstream in RabbitMQ 3.10.8 are the reference).

A `federation-upstream` parameter value has `uri` (one URI or a list: the link picks one at
random each time it starts, as RabbitMQ's to_params) and optionally `exchange`, `queue`
(the upstream's name; default: the local one), `consumer-tag` (default
`federation-link-<upstream name>`), `prefetch-count` (1000), `reconnect-delay` (seconds,
5), `max-hops` (1), `expires` and `message-ttl` (ms, for the upstream queue of a federated
exchange), `trust-user-id` (false: the `user_id` property is cleared), `ack-mode`
(`on-confirm` | `on-publish` | `no-ack`), `ha-policy`, `bind-nowait`,
`resource-cleanup-mode` (`default` | `never`), `channel-use-mode` (`multiple` | `single`).
A `federation-upstream-set` value is a list of `{"upstream": name, ...}`, each element able
to override the upstream's keys (uri included). Policy keys: `federation-upstream` (one
upstream), `federation-upstream-set` (a set; `all` is every upstream of the vhost) or
`federation-upstream-pattern` (upstreams whose name matches the regular expression); at most
one of them.
"""

from __future__ import annotations

import random
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

UPSTREAM = "federation-upstream"
UPSTREAM_SET = "federation-upstream-set"
POLICY_KEYS = ("federation-upstream", "federation-upstream-set", "federation-upstream-pattern")
DEFAULT_PREFETCH = 1000  # ?DEF_PREFETCH
ACK_MODES = ("no-ack", "on-publish", "on-confirm")
INTERNAL_PURPOSE_ARG = "x-internal-purpose"  # federation's own queues and exchanges carry it

_NUMBER = ("prefetch-count", "reconnect-delay", "max-hops", "expires", "message-ttl")
_BINARY = ("exchange", "queue", "consumer-tag", "ha-policy")
_BOOLEAN = ("trust-user-id", "bind-nowait")
_ENUM = {"ack-mode": ACK_MODES, "resource-cleanup-mode": ("default", "never"),
         "channel-use-mode": ("multiple", "single")}


@dataclass(frozen=True)
class Upstream:
    """One upstream as a link uses it (rabbit_federation.hrl #upstream{})."""

    name: str  # the federation-upstream parameter's name
    uris: tuple[str, ...]  # one is picked at random per link start
    exchange: str  # the upstream exchange's name (federated exchanges)
    queue: str  # the upstream queue's name (federated queues)
    consumer_tag: str  # the federated queue link's consumer tag upstream
    prefetch_count: int = DEFAULT_PREFETCH  # unacked deliveries the link takes upstream
    reconnect_delay: float = 5.0  # s between a failure and the next start
    max_hops: int = 1  # brokers a message (or binding) may pass through
    expires: int | None = None  # ms: x-expires of the upstream queue (exchanges)
    message_ttl: int | None = None  # ms: x-message-ttl of the upstream queue (exchanges)
    trust_user_id: bool = False  # keep user_id (else it is cleared)
    ack_mode: str = "on-confirm"  # when the upstream delivery is acked
    ha_policy: str | None = None  # x-ha-policy of the upstream queue (exchanges)
    bind_nowait: bool = False  # exchange.bind with nowait upstream
    resource_cleanup_mode: str = "default"  # "never": keep upstream queue/exchange on stop
    channel_use_mode: str = "multiple"  # "single": commands share the consuming channel

    def pick_uri(self) -> str:
        return random.choice(self.uris)


def _type_error(key: str, value: Any) -> str | None:
    """rabbit_parameter_validation's texts for one optional key."""
    if key in _NUMBER and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return f"{key} should be a number, actually was {_erl(value)}"
    if key in _BINARY and not isinstance(value, str):
        return f"{key} should be binary, actually was {_erl(value)}"
    if key in _BOOLEAN and not isinstance(value, bool):
        return f"{key} should be boolean, actually was {_erl(value)}"
    if key in _ENUM and value not in _ENUM[key]:
        return f"{key} should be one of {_enum(_ENUM[key])}, actually was {_erl(value)}"
    return None


def _erl(value: Any) -> str:
    if isinstance(value, str):
        return f'<<"{value}">>'
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _enum(values: tuple[str, ...]) -> str:
    return "[" + ",".join(f"'{v}'" if "-" in v else v for v in values) + "]"


def _uri_errors(value: Any) -> list[str]:
    uris = [value] if isinstance(value, str) else value
    if not isinstance(uris, list) or not uris or not all(isinstance(u, str) for u in uris):
        return [f"uri should be a list, actually was {_erl(value)}"]
    errs = []
    for uri in uris:
        scheme = urllib.parse.urlparse(uri).scheme
        if scheme not in ("amqp", "amqps"):
            errs.append(f'"{uri}" not a valid URI: {{unexpected_uri_scheme,"{scheme}"}}'
                        if scheme else f'"{uri}" not a valid URI: {{unable_to_parse_uri,'
                        f'no_scheme}}')
    return errs


def _keys_errors(value: Mapping[str, Any], name: str, mandatory: str) -> list[str]:
    errs = []
    if mandatory not in value:
        errs.append(f'Key "{mandatory}" not found in {name}')
    known = {mandatory, *_NUMBER, *_BINARY, *_BOOLEAN, *_ENUM}
    for key, v in value.items():
        if key == mandatory:
            if key == "uri":
                errs.extend(_uri_errors(v))
            elif not isinstance(v, str):
                errs.append(f"{key} should be binary, actually was {_erl(v)}")
        elif key in known:
            err = _type_error(key, v)
            if err:
                errs.append(err)
    unknown = sorted(k for k in value if k not in known)
    if unknown:
        errs.append(f"Unrecognised terms {unknown!r} in {name}")
    return errs


def validate(component: str, name: str, value: Any) -> list[str]:
    """Validate a federation-upstream or federation-upstream-set value; the errors (empty
    when valid), each a line of the 400 "Validation failed" reason."""
    if component == UPSTREAM:
        if not isinstance(value, dict):
            return [f"{_erl(value)} is not a valid federation upstream"]
        return _keys_errors(value, name, "uri")
    if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
        return [f"{_erl(value)} is not a valid federation upstream set"]
    errs: list[str] = []
    for element in value:
        errs.extend(_keys_errors(element, name, "upstream"))
    return errs


def validate_policy(definition: Mapping[str, Any]) -> str | None:
    """rabbit_federation_parameters:validate_policy: the error text, or None."""
    given = [k for k in POLICY_KEYS if k in definition]
    if len(given) >= 2:
        return ("cannot specify federation-upstream, federation-upstream-set or "
                "federation-upstream-pattern together")
    for key in given:
        value = definition[key]
        kind = {"federation-upstream": "upstream", "federation-upstream-set": "upstream set",
                "federation-upstream-pattern": "upstream pattern"}[key]
        if not isinstance(value, str):
            return f"{_erl(value)} is not a valid federation {kind} name"
        if key == "federation-upstream-pattern":
            try:
                re.compile(value)
            except re.error as exc:
                return (f"could not compile pattern {value} to a regular expression. "
                        f"Error: {exc}")
    return None


def federates(definition: Mapping[str, Any] | None) -> bool:
    """Does a policy with this definition federate what it applies to?"""
    return definition is not None and any(k in definition for k in POLICY_KEYS)


def for_policy(definition: Mapping[str, Any] | None, local_name: str,
               lookup: Callable[[str, str], Any],
               upstream_names: Callable[[], list[str]]) -> list[Upstream]:
    """The upstreams a policy gives the exchange or queue `local_name`
    (rabbit_federation_upstream:for). `lookup(component, name)` is the stored parameter
    value or None; `upstream_names()` the vhost's federation-upstream names. Elements that
    name a missing upstream are left out, as RabbitMQ does."""
    if not federates(definition):
        return []
    assert definition is not None
    if "federation-upstream" in definition:
        elements: list[dict[str, Any]] = [{"upstream": definition["federation-upstream"]}]
    elif "federation-upstream-set" in definition:
        set_name = definition["federation-upstream-set"]
        if set_name == "all":
            elements = [{"upstream": n} for n in upstream_names()]
        else:
            value = lookup(UPSTREAM_SET, set_name)
            elements = [e for e in value if isinstance(e, dict)] if isinstance(
                value, list) else []
    else:
        pattern = re.compile(str(definition["federation-upstream-pattern"]))
        elements = [{"upstream": n} for n in upstream_names() if pattern.search(n)]
    out = []
    for element in elements:
        name = element.get("upstream")
        value = lookup(UPSTREAM, name) if isinstance(name, str) else None
        if isinstance(value, dict):
            out.append(_upstream(name, {**value, **element}, local_name))  # type: ignore[arg-type]
    return out


def _upstream(name: str, v: dict[str, Any], local_name: str) -> Upstream:
    uri = v.get("uri")
    uris = tuple([uri] if isinstance(uri, str) else uri or ())

    def num(key: str, default: Any) -> Any:
        value = v.get(key)
        return default if value is None else value

    return Upstream(
        name=name, uris=uris, exchange=v.get("exchange") or local_name,
        queue=v.get("queue") or local_name,
        consumer_tag=v.get("consumer-tag") or f"federation-link-{name}",
        prefetch_count=int(num("prefetch-count", DEFAULT_PREFETCH)),
        reconnect_delay=float(num("reconnect-delay", 5)),
        max_hops=int(num("max-hops", 1)),
        expires=None if v.get("expires") is None else int(v["expires"]),
        message_ttl=None if v.get("message-ttl") is None else int(v["message-ttl"]),
        trust_user_id=bool(v.get("trust-user-id", False)),
        ack_mode=v.get("ack-mode", "on-confirm"), ha_policy=v.get("ha-policy"),
        bind_nowait=bool(v.get("bind-nowait", False)),
        resource_cleanup_mode=v.get("resource-cleanup-mode", "default"),
        channel_use_mode=v.get("channel-use-mode", "multiple"))


def safe_uri(uri: str) -> str:
    """The URI as status and headers show it (amqp_uri:remove_credentials): scheme, host,
    port and path; user, password and query left out."""
    u = urllib.parse.urlparse(uri)
    host = u.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{u.port}" if u.port is not None else ""
    return f"{u.scheme}://{host}{port}{u.path}"
