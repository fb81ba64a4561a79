# Owns: static shovels as the configuration file gives them: their validation and the
# ShovelDef each runs from.
# Talked to by: broker/config.py (load_config validates the `shovels` table),
# broker/shovel/supervisor.py (starts one link per static shovel at boot).
# Must never: connect anywhere or touch the broker's state.
"""Static shovels (rabbitmq.com/shovel-static.html; rabbit_shovel_config.erl in RabbitMQ
3.10.8 is the reference for keys, defaults and meaning).

RabbitMQ reads them from advanced.config (`{rabbitmq_shovel, [{shovels, [...]}]}`); this
broker from its TOML configuration file, with the same names:

    [shovels.my_shovel]
    ack_mode = "on_confirm"              # on_confirm (default) | on_publish | no_ack
    reconnect_delay = 5                  # seconds (default 5)
    [shovels.my_shovel.source]
    uris = ["amqp://fred:secret@host1/my_vhost"]    # tried in order
    declarations = [["exchange.declare", {exchange = "my_fanout", type = "fanout", durable = true}],
                    "queue.declare",                 # a server-named queue ...
                    ["queue.bind", {exchange = "my_fanout", queue = ""}]]  # ... bound
    queue = ""                           # "": the last queue the declarations declared
    prefetch_count = 10                  # default 1000
    delete_after = "never"               # never (default) | queue_length | a count
    [shovels.my_shovel.destination]
    uris = ["amqp://"]                   # amqp:// without a host: this broker
    declarations = []
    publish_fields = {exchange = "my_direct", routing_key = "from_shovel"}
    publish_properties = {delivery_mode = 2}
    add_forward_headers = true
    add_timestamp_header = false

An end with `protocol = "amqp10"` speaks AMQP 1.0 (rabbit_amqp10_shovel:parse, through
python-qpid-proton: the `amqp10` extra): a source has `uris`, `source_address`,
`prefetch_count` and `delete_after` (no declarations, no queue); a destination has `uris`,
`target_address`, and the tables `properties`, `application_properties` and
`message_annotations` set on every message sent, beside `add_forward_headers` and
`add_timestamp_header` (see docs/scaling-out.md for how messages convert).

A declaration is a method name or `[name, {fields}]` with AMQP's field names
(`exchange.declare`: exchange, type, passive, durable, auto_delete, internal, arguments;
`queue.declare`: queue, passive, durable, exclusive, auto_delete, arguments; `queue.bind`
and `exchange.bind`: queue / destination, exchange / source, routing_key, arguments); they
run in order on every (re)connection. Without `publish_fields` a message keeps its exchange
and routing key. Static shovels show in /api/shovels with type `static` and cannot be
deleted through the API; only a new configuration removes them.
"""

from __future__ import annotations

from typing import Any

from pamqp import commands

from broker.protocol.encoding import build_method
from broker.shovel.definition import ShovelDef

_METHODS = {
    "exchange.declare": (commands.Exchange.Declare,
                         {"exchange", "type", "passive", "durable", "auto_delete", "internal",
                          "arguments"}),
    "queue.declare": (commands.Queue.Declare,
                      {"queue", "passive", "durable", "exclusive", "auto_delete",
                       "arguments"}),
    "queue.bind": (commands.Queue.Bind, {"queue", "exchange", "routing_key", "arguments"}),
    "exchange.bind": (commands.Exchange.Bind,
                      {"destination", "source", "routing_key", "arguments"}),
}
_ACK_MODES = {"on_confirm": "on-confirm", "on_publish": "on-publish", "no_ack": "no-ack"}
_SOURCE_KEYS = {"protocol", "uris", "declarations", "queue", "prefetch_count", "delete_after",
                "consumer_args"}
_DEST_KEYS = {"protocol", "uris", "declarations", "publish_properties", "publish_fields",
              "add_forward_headers", "add_timestamp_header"}
# an AMQP 1.0 end's keys (rabbit_amqp10_shovel:parse in RabbitMQ 3.10.8)
_SOURCE_KEYS_10 = {"protocol", "uris", "source_address", "prefetch_count", "delete_after",
                   "consumer_args"}
_DEST_KEYS_10 = {"protocol", "uris", "target_address", "properties",
                 "application_properties", "message_annotations", "add_forward_headers",
                 "add_timestamp_header"}
_PROTOCOLS = ("amqp091", "amqp10")
_TOP_KEYS = {"source", "destination", "ack_mode", "reconnect_delay"}


def _declarations(where: str, items: Any) -> tuple[Any, ...]:
    if not isinstance(items, list):
        raise ValueError(f"{where}.declarations: a list expected")
    out = []
    for item in items:
        name, fields = (item, {}) if isinstance(item, str) else (
            (item[0], item[1]) if isinstance(item, list) and len(item) == 2
            and isinstance(item[1], dict) else (None, None))
        if name not in _METHODS or fields is None:
            raise ValueError(f"{where}.declarations: {item!r} is not a method name or "
                             f"[method, {{fields}}] of {sorted(_METHODS)}")
        cls, allowed = _METHODS[name]
        unknown = sorted(set(fields) - allowed)
        if unknown:
            raise ValueError(f"{where}.declarations: {name} has no field(s) {unknown}")
        args = {("exchange_type" if k == "type" else k): v for k, v in fields.items()}
        out.append(build_method(cls, **args))
    return tuple(out)


def _uris(where: str, value: Any) -> tuple[str, ...]:
    uris = [value] if isinstance(value, str) else value
    if not isinstance(uris, list) or not uris or not all(
            isinstance(u, str) and u.startswith(("amqp://", "amqps://")) for u in uris):
        raise ValueError(f"{where}.uris: one or more amqp:// URIs expected, got {value!r}")
    return tuple(uris)


def parse(name: str, table: Any) -> ShovelDef:
    """The ShovelDef of static shovel `name`; ValueError says what is wrong."""
    where = f"shovels.{name}"
    if not isinstance(table, dict):
        raise ValueError(f"{where}: a table expected")
    unknown = sorted(set(table) - _TOP_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}")
    src, dest = table.get("source"), table.get("destination")
    if not isinstance(src, dict) or not isinstance(dest, dict):
        raise ValueError(f"{where}: both [source] and [destination] are required")
    src_protocol = src.get("protocol", "amqp091")
    dest_protocol = dest.get("protocol", "amqp091")
    for part, protocol, keys, label in (
            (src, src_protocol, (_SOURCE_KEYS, _SOURCE_KEYS_10), "source"),
            (dest, dest_protocol, (_DEST_KEYS, _DEST_KEYS_10), "destination")):
        if protocol not in _PROTOCOLS:
            raise ValueError(f"{where}.{label}.protocol: amqp091 or amqp10 expected")
        extra = sorted(set(part) - keys[protocol == "amqp10"])
        if extra:
            raise ValueError(f"{where}.{label}: unknown key(s) {extra} for {protocol}")
    if src_protocol == "amqp10":
        if not isinstance(src.get("source_address"), str):
            raise ValueError(f"{where}.source.source_address: an AMQP 1.0 address is required")
    elif "queue" not in src or not isinstance(src["queue"], str):
        raise ValueError(f"{where}.source.queue: a queue name (\"\" for the last declared) "
                         "is required")
    if dest_protocol == "amqp10" and not isinstance(dest.get("target_address"), str):
        raise ValueError(f"{where}.destination.target_address: an AMQP 1.0 address is "
                         "required")
    maps = {}
    for key in ("properties", "application_properties", "message_annotations"):
        value = dest.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise ValueError(f"{where}.destination.{key}: a table of strings expected")
        maps[key] = dict(value)
    mode = table.get("ack_mode", "on_confirm")
    if mode not in _ACK_MODES:
        raise ValueError(f"{where}.ack_mode: one of {', '.join(_ACK_MODES)} expected")
    delete_after = src.get("delete_after", "never")
    if delete_after == "queue_length":
        delete_after = "queue-length"
    elif delete_after != "never" and not (isinstance(delete_after, int) and delete_after >= 0):
        raise ValueError(f"{where}.source.delete_after: never, queue_length or a count")
    fields = dest.get("publish_fields", {})
    if not isinstance(fields, dict) or set(fields) - {"exchange", "routing_key"}:
        raise ValueError(f"{where}.destination.publish_fields: exchange and routing_key only")
    props = dest.get("publish_properties", {})
    if not isinstance(props, dict):
        raise ValueError(f"{where}.destination.publish_properties: a table expected")
    return ShovelDef(
        vhost="/", name=name, static=True,
        src_uris=_uris(f"{where}.source", src.get("uris")),
        dest_uris=_uris(f"{where}.destination", dest.get("uris")),
        src_queue=src.get("queue"), src_protocol=src_protocol,
        src_address=src.get("source_address"), dest_protocol=dest_protocol,
        dest_address=dest.get("target_address"),
        dest_properties=maps["properties"],
        dest_application_properties=maps["application_properties"],
        dest_message_annotations=maps["message_annotations"],
        src_declarations=_declarations(f"{where}.source", src.get("declarations", [])),
        dest_declarations=_declarations(f"{where}.destination",
                                        dest.get("declarations", [])),
        prefetch=int(src.get("prefetch_count", 1000)), delete_after=delete_after,
        dest_exchange=fields.get("exchange"), dest_exchange_key=fields.get("routing_key"),
        add_forward_headers=bool(dest.get("add_forward_headers", False)),
        add_timestamp_header=bool(dest.get("add_timestamp_header", False)),
        publish_properties=dict(props), ack_mode=_ACK_MODES[mode],
        reconnect_delay=float(table.get("reconnect_delay", 5)))


def parse_all(shovels: Any) -> tuple[ShovelDef, ...]:
    """Every static shovel of the configuration's `shovels` table; ValueError on the
    first that is wrong."""
    if not isinstance(shovels, dict):
        raise ValueError("shovels: a table of shovels expected")
    return tuple(parse(name, table) for name, table in shovels.items())
