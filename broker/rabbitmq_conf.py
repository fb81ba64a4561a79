# Owns: reading RabbitMQ's new-style configuration file (rabbitmq.conf, the Cuttlefish
# `key = value` format) into BrokerConfig field values, with the warnings for RabbitMQ keys
# this broker does not act on.
# Talked to by: broker/config.py `load_config`, for a `--config` / `BROKER_CONFIG` /
# `RABBITMQ_CONFIG_FILE` path that ends in `.conf`.
# Must never: accept a key RabbitMQ 3.10.8 would not (that is an error naming the key and
# its line), or silently drop one it would (that is a warning).
"""rabbitmq.conf (rabbitmq.com/configure.html#config-file-formats).

One setting per line, `key = value`; lines starting with `#` are comments; the value is the
rest of the line, trimmed (no quoting). The keys this broker acts on are RabbitMQ's names
(table `_KEYS` below: listeners, TLS, default user and vhost, loopback users, auth
mechanisms, limits, memory and disk alarms, the management and Prometheus listeners, log
level, storage sizes) plus this broker's own settings under their `BrokerConfig` names
(`confirm_on = ack-lite`, `data_dir = /var/lib/broker`). Any other key RabbitMQ 3.10.8's
schemas define (broker/conf_schema_keys.py: clustering, LDAP, MQTT, ...) is a warning
naming the key and the line; anything else is an error as in RabbitMQ ("Conf file attempted
to set unknown variable"), also naming the line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from broker.conf_schema_keys import KEYS as SCHEMA_KEYS
from broker.units import parse_information_unit


class ConfError(ValueError):
    """A rabbitmq.conf line this broker cannot take (the message names file, line, key)."""


def _pattern(key: str) -> re.Pattern[str]:
    return re.compile("^" + r"\.".join(
        "[^.]+" if part.startswith("$") else re.escape(part) for part in key.split(".")) + "$")


_SCHEMA = [_pattern(key) for _plugin, key in SCHEMA_KEYS]


def known_to_rabbitmq(key: str) -> bool:
    """Whether RabbitMQ 3.10.8's schemas define `key` (placeholders match one segment)."""
    return any(p.match(key) for p in _SCHEMA)


def _bool(text: str) -> bool:
    low = text.lower()
    if low not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return low == "true"


def _host_port(text: str) -> tuple[str | None, int]:
    """A listener: "5672", "127.0.0.1:5672", "[::1]:5672" or "::1:5672" (rabbit.schema
    listeners: the port follows the last colon)."""
    if ":" not in text:
        return None, int(text)
    host, _sep, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def _bytesize(text: str) -> int:
    """Cuttlefish's bytesize: an integer, or one with KB, MB or GB in any case, powers of
    1024 (cuttlefish_bytesize; queue_index_embed_msgs_below = 4kb is 4096)."""
    m = re.fullmatch(r"(\d+)([kKmMgG][bB])?", text)
    if m is None:
        raise ValueError(f"not a bytesize: {text!r} (an integer, or with KB, MB or GB)")
    unit = (m.group(2) or "").upper()
    return int(m.group(1)) * {"": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}[unit]


_LOG_LEVELS = {"debug": "debug", "info": "info", "notice": "info", "warning": "warning",
               "warn": "warning", "error": "error", "critical": "error", "alert": "error",
               "emergency": "error", "none": "error"}

Setter = Callable[[dict[str, Any], str], None]


def _field(name: str, convert: Callable[[str], Any] = str) -> Setter:
    def set_(values: dict[str, Any], text: str) -> None:
        values[name] = convert(text)
    return set_


def _ms_to_s(text: str) -> float:
    return int(text) / 1000.0


def _int_or_infinity(text: str) -> int:
    return -1 if text == "infinity" else int(text)


def _log_level(values: dict[str, Any], text: str) -> None:
    if text.lower() not in _LOG_LEVELS:
        raise ValueError(f"not a log level: {text!r}")
    values["log_level"] = _LOG_LEVELS[text.lower()]


def _size(text: str) -> int:
    return parse_information_unit(text)


# RabbitMQ key (exact) -> how it sets BrokerConfig fields
_KEYS: dict[str, Setter] = {
    "default_user": _field("default_user"),
    "default_pass": _field("default_pass"),
    "default_vhost": _field("default_vhost"),
    "heartbeat": _field("heartbeat", int),
    "frame_max": _field("frame_max", int),
    "channel_max": _field("channel_max", int),
    "max_message_size": _field("max_message_size", int),
    "handshake_timeout": _field("handshake_timeout", _ms_to_s),  # ms in RabbitMQ
    "connection_max": _field("connection_max", _int_or_infinity),
    "collect_statistics_interval": _field("collect_statistics_interval", int),
    "queue_index_embed_msgs_below": _field("queue_index_embed_msgs_below", _bytesize),
    "queue_index_max_journal_entries": _field("queue_index_max_journal_entries", int),
    "msg_store_file_size_limit": _field("msg_store_file_size_limit", _bytesize),
    "load_definitions": _field("load_definitions"),
    "management.load_definitions": _field("load_definitions"),
    "ssl_options.certfile": _field("ssl_options_certfile"),
    "ssl_options.keyfile": _field("ssl_options_keyfile"),
    "ssl_options.cacertfile": _field("ssl_options_cacertfile"),
    "ssl_options.verify": _field("ssl_options_verify"),
    "ssl_options.fail_if_no_peer_cert": _field("ssl_options_fail_if_no_peer_cert", _bool),
    "ssl_cert_login_from": _field("ssl_cert_login_from"),
    "ssl_cert_login_san_type": _field("ssl_cert_login_san_type"),
    "ssl_cert_login_san_index": _field("ssl_cert_login_san_index", int),
    "management.tcp.port": _field("management_tcp_port", int),
    "management.tcp.ip": _field("management_tcp_ip"),
    "prometheus.tcp.port": _field("prometheus_tcp_port", int),
    "prometheus.tcp.ip": _field("prometheus_tcp_ip"),
    "vm_memory_high_watermark.relative": _field("vm_memory_high_watermark", float),
    "vm_memory_high_watermark.absolute": _field("vm_memory_high_watermark_absolute", _size),
    "vm_memory_high_watermark_paging_ratio": _field("vm_memory_high_watermark_paging_ratio",
                                                    float),
    "total_memory_available_override_value": _field("total_memory_available_override_value",
                                                    _size),
    "memory_monitor_interval": _field("memory_monitor_interval", int),
    "disk_free_limit.absolute": _field("disk_free_limit", _size),
    "disk_free_limit.relative": _field("disk_free_limit_relative", float),
    "log.console.level": _log_level,
    "stream.listeners.tcp.default": _field("stream_listeners_tcp_default"),
    "stream.listeners.ssl.default": _field("stream_listeners_ssl_default"),
    "stream.advertised_host": _field("stream_advertised_host"),
    "stream.advertised_port": _field("stream_advertised_port", int),
    "stream.frame_max": _field("stream_frame_max", int),
    "stream.heartbeat": _field("stream_heartbeat", int),
    "stream.initial_credits": _field("stream_initial_credits", int),
    "queue_master_locator": _field("queue_master_locator"),
    "queue_leader_locator": _field("queue_leader_locator"),
}


def parse(text: str, path: str, own_fields: Callable[[str], Any | None]) -> tuple[
        dict[str, Any], list[str]]:
    """The BrokerConfig values a rabbitmq.conf sets, and its warnings (each "PATH:LINE: ...").

    `own_fields(name)` converts a value for one of this broker's own field names (None when
    the name is not one). Raises ConfError naming the file, line and key: a line without
    `=`, an unknown key, or a value the key does not take."""
    values: dict[str, Any] = {}
    warnings: list[str] = []
    auth: list[str] = []
    loopback: dict[str, bool] = {}
    tcp_seen = ssl_seen = False
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        where = f"{path}:{lineno}"
        if not sep or not key:
            raise ConfError(f"{where}: expected KEY = VALUE, got {line!r}")
        try:
            if key in _KEYS:
                _KEYS[key](values, value)
            elif key in ("listeners.tcp", "listeners.ssl"):
                if value != "none":
                    raise ValueError("only `none` is taken here; give listeners.tcp.NAME")
                values["listeners_tcp" if key.endswith("tcp") else "listeners_ssl_default"] = (
                    "none" if key.endswith("tcp") else "")
            elif key.startswith("listeners.tcp."):
                if tcp_seen:
                    warnings.append(f"{where}: {key}: this broker has one AMQP listener; "
                                    "ignored")
                else:
                    host, port = _host_port(value)
                    values["port"] = port
                    if host is not None:
                        values["host"] = host
                    tcp_seen = True
            elif key.startswith("listeners.ssl."):
                if ssl_seen:
                    warnings.append(f"{where}: {key}: this broker has one AMQPS listener; "
                                    "ignored")
                else:
                    values["listeners_ssl_default"] = value
                    ssl_seen = True
            elif key == "loopback_users":
                if value != "none":
                    raise ValueError("only `none` is taken here; give loopback_users.USER")
                loopback = {}
                values["loopback_users"] = ()
            elif key.startswith("loopback_users."):
                loopback[key.split(".", 1)[1]] = _bool(value)
            elif key.startswith("auth_mechanisms."):
                auth.append(value)
            else:
                own = own_fields(key.replace(".", "_").replace("-", "_"))
                if own is not None:
                    values.update(own(value))
                elif known_to_rabbitmq(key):
                    warnings.append(f"{where}: {key} is a RabbitMQ setting this broker does "
                                    "not act on; ignored")
                else:
                    raise ConfError(f"{where}: Conf file attempted to set unknown variable: "
                                    f"{key}")
        except ConfError:
            raise
        except ValueError as exc:
            raise ConfError(f"{where}: {key} = {value}: {exc}") from None
    if auth:
        values["auth_mechanisms"] = tuple(auth)
    if loopback:
        users = dict.fromkeys(values.get("loopback_users", ("guest",)), True)
        users.update(loopback)
        values["loopback_users"] = tuple(u for u, on in users.items() if on)
    return values, warnings
