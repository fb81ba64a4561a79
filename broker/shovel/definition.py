# Owns: a dynamic shovel's runtime parameter value: its validation (RabbitMQ's rules and
# texts) and the parsed ShovelDef a link runs from.
# Talked to by: broker/shovel/supervisor.py (set_parameter), broker/management/parameters.py.
# Must never: connect anywhere or touch the broker's state.
"""Dynamic shovel definitions (rabbitmq.com/shovel-dynamic.html; rabbitmq_shovel's
rabbit_shovel_parameters.erl in RabbitMQ 3.10.8 is the reference for keys, defaults and
validation texts).

`src-protocol` / `dest-protocol` (`amqp091` default, or `amqp10`) choose each end's keys.

AMQP 0-9-1 keys: `src-uri` and `dest-uri` (a URI or a list: tried in order),
`src-queue` or `src-exchange` (+ `src-exchange-key`, default ""), `src-prefetch-count`
(default 1000), `src-delete-after` (`never` default, `queue-length`, or a count ≥ 0),
`dest-queue` or `dest-exchange` (+ `dest-exchange-key`; default: the message's own routing
key), `dest-add-forward-headers`, `dest-add-timestamp-header`, `dest-publish-properties`,
`ack-mode` (`on-confirm` default, `on-publish`, `no-ack`), `reconnect-delay` (seconds,
default 5). The pre-3.7 names `prefetch-count`, `delete-after`, `add-forward-headers`,
`add-timestamp-header`, `publish-properties` are read too. A URI without a host
(`amqp://`, `amqp:///vhost`) is this broker: the link logs in over loopback as the
configured `default_user` (RabbitMQ uses an internal direct connection there).

AMQP 1.0 keys (rabbit_amqp10_shovel; run by broker/shovel/amqp10.py): a source has `src-uri`,
`src-address` (required), `src-prefetch-count` (link credit, default 1000) and
`src-delete-after`; a destination `dest-uri`, `dest-address` (required),
`dest-add-forward-headers`, `dest-add-timestamp-header` and three objects of string values:
`dest-application-properties`, `dest-message-annotations` and `dest-properties` (AMQP 1.0
message properties by their field names: message_id, to, subject, ...). `ack-mode` and
`reconnect-delay` are common. Keys of the other protocol are "Unrecognised terms", as in
RabbitMQ (an amqp10 source has no `src-queue`, an amqp10 destination no
`dest-publish-properties`).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any

ACK_MODES = ("on-confirm", "on-publish", "no-ack")
DEFAULT_RECONNECT_DELAY = 5.0  # s (rabbit_shovel.hrl ?DEFAULT_RECONNECT_DELAY)
DEFAULT_PREFETCH = 1000
_PROPERTY_KEYS: dict[str, type | tuple[type, ...]] = {"content_type": str, "content_encoding": str, "delivery_mode": (int, float),
                  "priority": (int, float), "correlation_id": str, "reply_to": str,
                  "expiration": str, "message_id": str, "timestamp": (int, float),
                  "type": str, "user_id": str, "app_id": str, "cluster_id": str}
PROTOCOLS = ("amqp10", "amqp091")
_COMMON = {"src-protocol", "dest-protocol", "ack-mode", "reconnect-delay"}
_SRC_091 = {"src-uri", "src-queue", "src-exchange", "src-exchange-key", "src-prefetch-count",
            "prefetch-count", "src-delete-after", "delete-after", "src-queue-args",
            "src-consumer-args"}
_DEST_091 = {"dest-uri", "dest-queue", "dest-exchange", "dest-exchange-key",
             "dest-queue-args", "dest-add-forward-headers", "add-forward-headers",
             "dest-add-timestamp-header", "add-timestamp-header", "dest-publish-properties",
             "publish-properties"}
_SRC_10 = {"src-uri", "src-address", "src-prefetch-count", "src-delete-after"}
_DEST_10 = {"dest-uri", "dest-address", "dest-add-forward-headers",
            "dest-add-timestamp-header", "dest-application-properties",
            "dest-message-annotations", "dest-properties"}
_AMQP10_MAPS = ("dest-application-properties", "dest-message-annotations", "dest-properties")


@dataclass(frozen=True)
class ShovelDef:
    """A parsed dynamic shovel (see the module docstring for each field's key)."""

    vhost: str
    name: str
    src_uris: tuple[str, ...]
    dest_uris: tuple[str, ...]
    src_queue: str | None = None
    src_exchange: str | None = None
    src_exchange_key: str = ""
    src_queue_args: dict[str, Any] = field(default_factory=dict)
    prefetch: int = DEFAULT_PREFETCH
    delete_after: str | int = "never"
    dest_queue: str | None = None
    dest_exchange: str | None = None
    dest_exchange_key: str | None = None
    dest_queue_args: dict[str, Any] = field(default_factory=dict)
    add_forward_headers: bool = False
    add_timestamp_header: bool = False
    publish_properties: dict[str, Any] = field(default_factory=dict)
    ack_mode: str = "on-confirm"
    reconnect_delay: float = DEFAULT_RECONNECT_DELAY
    src_protocol: str = "amqp091"  # amqp091 | amqp10
    dest_protocol: str = "amqp091"
    src_address: str | None = None  # amqp10 source: the node to receive from
    dest_address: str | None = None  # amqp10 destination: the node to send to
    # amqp10 destination: set on every message sent (rabbit_amqp10_shovel new_message)
    dest_application_properties: dict[str, str] = field(default_factory=dict)
    dest_message_annotations: dict[str, str] = field(default_factory=dict)
    dest_properties: dict[str, str] = field(default_factory=dict)
    static: bool = False  # from the configuration file (broker/shovel/static.py)
    src_declarations: tuple[Any, ...] = ()  # pamqp methods run on connect (static shovels)
    dest_declarations: tuple[Any, ...] = ()


def _uris(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    return None


def _uri_ok(uri: str) -> bool:
    """amqp_uri:parse's test: an amqp:// or amqps:// URI (an amqps URI is refused later,
    when a link connects, by an end that has no TLS)."""
    u = urllib.parse.urlparse(uri)
    return u.scheme in ("amqp", "amqps")


def protocols(value: dict[str, Any]) -> tuple[str, str]:
    """(src-protocol, dest-protocol), each `amqp091` when absent (rabbit_shovel_parameters
    protocols/1)."""
    return value.get("src-protocol", "amqp091"), value.get("dest-protocol", "amqp091")


def validate(value: Any) -> list[str]:
    """RabbitMQ's validation of a `shovel` parameter value: the errors (empty when valid),
    each a line of the 400 "Validation failed" reason."""
    if not isinstance(value, dict):
        return [f"{value!r} is not a valid shovel definition"]
    errs: list[str] = []
    for key in ("src-protocol", "dest-protocol"):
        if key in value and value[key] not in PROTOCOLS:
            errs.append(f"{key} should be one of {', '.join(PROTOCOLS)}, actually was "
                        f"{value[key]!r}")
    if errs:
        return errs
    src_proto, dest_proto = protocols(value)
    for key in ("src-uri", "dest-uri"):
        if key not in value:
            errs.append(f"Key \"{key}\" not found in {key.split('-')[0]} definition")
            continue
        uris = _uris(value[key])
        if uris is None:
            errs.append(f"{key} should be a string or a list of strings, actually was "
                        f"{value[key]!r}")
        else:
            errs.extend(f'"{u}" not a valid URI' for u in uris if not _uri_ok(u))
    if src_proto == "amqp091":
        errs.extend(_validate_amqp091_src(value))
    else:
        errs.extend(_validate_amqp10_src(value))
    if dest_proto == "amqp091":
        errs.extend(_validate_amqp091_dest(value))
    else:
        errs.extend(_validate_amqp10_dest(value))
    errs.extend(_number_errors(value, ("src-prefetch-count", "reconnect-delay")))
    errs.extend(_delete_after_errors(value, "src-delete-after"))
    mode = value.get("ack-mode", "on-confirm")
    if mode not in ACK_MODES:
        errs.append(f"ack-mode should be one of {', '.join(ACK_MODES)}, actually was {mode!r}")
    for key in ("dest-add-forward-headers", "dest-add-timestamp-header"):
        if key in value and not isinstance(value[key], bool):
            errs.append(f"{key} should be boolean, actually was {value[key]!r}")
    known = _COMMON | (_SRC_091 if src_proto == "amqp091" else _SRC_10) | (
        _DEST_091 if dest_proto == "amqp091" else _DEST_10)
    unknown = sorted(set(value) - known)
    if unknown:
        errs.append(f"Unrecognised terms {unknown} in parameters")
    return errs


def _delete_after_ok(v: Any) -> bool:
    return v in ("never", "queue-length") or (
        isinstance(v, int) and not isinstance(v, bool) and v >= 0)


def _binary_errors(value: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
    """rabbit_parameter_validation:binary's text for each of `keys` set to a non-string."""
    return [f"{key} should be binary, actually was {value[key]!r}" for key in keys
            if key in value and not isinstance(value[key], str)]


def _number_errors(value: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
    """rabbit_parameter_validation:number's text for each of `keys` set to a non-number."""
    return [f"{key} should be a number, actually was {value[key]!r}" for key in keys
            if value.get(key) is not None and (isinstance(value[key], bool)
                                               or not isinstance(value[key], (int, float)))]


def _delete_after_errors(value: dict[str, Any], key: str) -> list[str]:
    """rabbit_shovel_parameters' text for a `key` (src-delete-after or the pre-3.7
    delete-after) that is not a count, "never" or "queue-length"."""
    v = value.get(key)
    if v is None or _delete_after_ok(v):
        return []
    return [f'{key} should be a number greater than or equal to 0, "never" or '
            f'"queue-length", actually was {v!r}']


def _validate_amqp091_src(value: dict[str, Any]) -> list[str]:
    errs: list[str] = []
    has_q, has_x = "src-queue" in value, "src-exchange" in value
    if not has_q and not has_x:
        errs.append("Must specify 'src-exchange' or 'src-queue'")
    elif has_q and has_x:
        errs.append("Cannot specify 'src-exchange' and 'src-queue'")
    errs.extend(_binary_errors(value, ("src-queue", "src-exchange", "src-exchange-key")))
    errs.extend(_number_errors(value, ("prefetch-count",)))
    errs.extend(_delete_after_errors(value, "delete-after"))
    delete_after = value.get("src-delete-after", value.get("delete-after"))
    if (isinstance(delete_after, int) and not isinstance(delete_after, bool)
            and value.get("ack-mode") == "no-ack"):
        errs.append("Cannot specify 'no-ack' and numerical 'delete-after'")
    return errs


def _validate_amqp091_dest(value: dict[str, Any]) -> list[str]:
    errs: list[str] = []
    if "dest-queue" in value and "dest-exchange" in value:
        errs.append("Cannot specify 'dest-exchange' and 'dest-queue'")
    errs.extend(_binary_errors(value, ("dest-queue", "dest-exchange", "dest-exchange-key")))
    for key in ("add-forward-headers", "add-timestamp-header"):
        if key in value and not isinstance(value[key], bool):
            errs.append(f"{key} should be boolean, actually was {value[key]!r}")
    for key in ("dest-publish-properties", "publish-properties"):
        props = value.get(key)
        if props is None:
            continue
        if not isinstance(props, dict):
            errs.append(f"{key} should be an object, actually was {props!r}")
            continue
        for k, v in props.items():
            want = _PROPERTY_KEYS.get(k)
            if want is None:
                errs.append(f"Unrecognised terms [{k!r}] in {key}")
            elif isinstance(v, bool) or not isinstance(v, want):
                errs.append(f"{k} should be {'binary' if want is str else 'a number'}, "
                            f"actually was {v!r}")
    return errs


def _validate_amqp10_src(value: dict[str, Any]) -> list[str]:
    """rabbit_shovel_parameters amqp10_src_validation: src-address is mandatory."""
    if "src-address" not in value:
        return ['Key "src-address" not found in src definition']
    return _binary_errors(value, ("src-address",))


def _validate_amqp10_dest(value: dict[str, Any]) -> list[str]:
    """rabbit_shovel_parameters amqp10_dest_validation: dest-address is mandatory; the three
    maps hold string values only (validate_amqp10_map)."""
    errs: list[str] = []
    if "dest-address" not in value:
        errs.append('Key "dest-address" not found in dest definition')
    errs.extend(_binary_errors(value, ("dest-address",)))
    for key in _AMQP10_MAPS:
        m = value.get(key)
        if m is None:
            continue
        if not isinstance(m, dict):
            errs.append(f"{key} should be an object, actually was {m!r}")
            continue
        errs.extend(f"{k} should be binary, actually was {v!r}"
                    for k, v in m.items() if not isinstance(v, str))
    return errs


def parse(vhost: str, name: str, value: dict[str, Any]) -> ShovelDef:
    """The ShovelDef of a value `validate` accepted (pre-3.7 names read as fallbacks)."""
    def pick(new: str, old: str, default: Any) -> Any:
        return value.get(new, value.get(old, default))

    props = pick("dest-publish-properties", "publish-properties", {}) or {}
    src_protocol, dest_protocol = protocols(value)
    return ShovelDef(
        src_protocol=src_protocol, dest_protocol=dest_protocol,
        src_address=value.get("src-address"), dest_address=value.get("dest-address"),
        dest_application_properties=dict(value.get("dest-application-properties") or {}),
        dest_message_annotations=dict(value.get("dest-message-annotations") or {}),
        dest_properties=dict(value.get("dest-properties") or {}),
        vhost=vhost, name=name,
        src_uris=tuple(_uris(value["src-uri"]) or ()),
        dest_uris=tuple(_uris(value["dest-uri"]) or ()),
        src_queue=value.get("src-queue"), src_exchange=value.get("src-exchange"),
        src_exchange_key=value.get("src-exchange-key", ""),
        src_queue_args=dict(value.get("src-queue-args") or {}),
        prefetch=int(pick("src-prefetch-count", "prefetch-count", DEFAULT_PREFETCH)),
        delete_after=pick("src-delete-after", "delete-after", "never"),
        dest_queue=value.get("dest-queue"), dest_exchange=value.get("dest-exchange"),
        dest_exchange_key=value.get("dest-exchange-key"),
        dest_queue_args=dict(value.get("dest-queue-args") or {}),
        add_forward_headers=bool(pick("dest-add-forward-headers", "add-forward-headers",
                                      False)),
        add_timestamp_header=bool(pick("dest-add-timestamp-header", "add-timestamp-header",
                                       False)),
        publish_properties=dict(props),
        ack_mode=value.get("ack-mode", "on-confirm"),
        reconnect_delay=float(value.get("reconnect-delay", DEFAULT_RECONNECT_DELAY)),
    )
