"""Broker configuration: one frozen object holding every tunable.

Owns: `BrokerConfig` (RabbitMQ's key names and defaults, see rabbitmq.com/configure.html and
`deps/rabbit/Makefile` PROJECT_ENV) and `load_config`, which merges the three sources with the
precedence CLI > environment (`BROKER_<KEY>`, upper case; then RabbitMQ's RABBITMQ_NODENAME,
RABBITMQ_NODE_PORT, RABBITMQ_NODE_IP_ADDRESS) > configuration file (`--config` /
`BROKER_CONFIG` / `RABBITMQ_CONFIG_FILE`: RabbitMQ's rabbitmq.conf format when the name ends
in `.conf`, broker/rabbitmq_conf.py; else TOML) > defaults. Nothing else in the broker reads
the environment or argv.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from broker import rabbitmq_conf
from broker.units import parse_information_unit

__all__ = ["BrokerConfig", "load_config", "parse_information_unit"]


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Every tunable of the broker; field names follow RabbitMQ's configuration keys.

    Units: sizes in bytes, times in seconds unless the name says `_ms`.
    """

    host: str = "127.0.0.1"  # listener address (RabbitMQ: listeners.tcp)
    port: int = 5672  # listener port; 0 = ephemeral (tests)
    data_dir: str = "./data"  # where durable state lives (RabbitMQ: RABBITMQ_MNESIA_DIR)
    log_level: str = "info"  # root level for the broker.* loggers
    config: str | None = None  # path of the TOML file this config was read from

    # connection.tune (AMQP 0-9-1 §1.4.2.6); the client may lower them
    frame_max: int = 131072
    channel_max: int = 2047
    heartbeat: int = 60
    max_message_size: int = 134217728  # bodies above → 406 on the channel (RabbitMQ ≥ 3.8)
    handshake_timeout: float = 10.0  # seconds a client has to finish the handshake

    # users and vhosts (rabbitmq.com/access-control.html)
    default_user: str = "guest"
    default_pass: str = "guest"
    default_vhost: str = "/"
    loopback_users: tuple[str, ...] = ("guest",)  # may only connect from loopback

    # security (rabbitmq.com/access-control.html, ssl.html, networking.html); dotted RabbitMQ
    # keys map to underscores: ssl_options.certfile → ssl_options_certfile
    auth_mechanisms: tuple[str, ...] = ("PLAIN", "AMQPLAIN")  # add EXTERNAL for x509 login
    connection_max: int = -1  # broker-wide cap on open connections; -1 / "infinity" = none
    listeners_tcp: str = ""  # "none" turns the plain AMQP listener off (listeners.tcp = none)
    listeners_ssl_default: str = ""  # amqps listener "PORT" or "HOST:PORT" ("" = off; 0 = any)
    ssl_options_certfile: str = ""  # server certificate chain (PEM)
    ssl_options_keyfile: str = ""  # server private key (PEM)
    ssl_options_cacertfile: str = ""  # CAs that sign client certificates (PEM)
    ssl_options_verify: str = "verify_none"  # verify_peer: ask for and check client certs
    ssl_options_fail_if_no_peer_cert: bool = False  # with verify_peer: a cert is required
    ssl_cert_login_from: str = "distinguished_name"  # EXTERNAL user name: or common_name,
    # subject_alternative_name (rabbitmq_auth_mechanism_ssl)
    ssl_cert_login_san_type: str = "dns"  # dns, ip, email, uri (subject_alternative_name)
    ssl_cert_login_san_index: int = 0  # which SAN of that type, from 0

    # server properties; kombu applies RabbitMQ's qos semantics only when product = RabbitMQ
    product: str = "pybroker-amqp"

    # credit flow (credit_flow_default_credit): {InitialCredit, MoreCreditAfter}
    credit_flow_initial: int = 400
    credit_flow_more_after: int = 200
    # queue -> message store hop (msg_store_credit_disc_bound): {InitialCredit, MoreCreditAfter}
    msg_store_credit_disc_bound_initial: int = 4000
    msg_store_credit_disc_bound_more_after: int = 800

    # publisher confirms: persist (RabbitMQ), ack, ack-lite (docs/architecture.md §6)
    confirm_on: str = "persist"
    # quorum queues' at-least-once dead-lettering: ms a dead letter waits for its targets'
    # confirms before it is published again (RabbitMQ's rabbit app env of this name)
    dead_letter_worker_publisher_confirm_timeout: int = 180000

    # storage (issue 4)
    queue_index_embed_msgs_below: int = 4096
    queue_index_max_journal_entries: int = 32768
    msg_store_file_size_limit: int = 16777216
    fsync: bool = True  # fsync before confirming persistent messages
    # processes the broker's work runs in (issue 47, docs/multicore.md): 1 is one process;
    # N > 1 a node process that accepts and supervises, and N workers that each serve
    # connections and own queues; "auto" (load_config) = the cores this process may run on
    workers: int = 1
    # `python -m broker` only: freeze what exists once the broker is up, collect the rest
    # fully when cheap or every 5 min, the frozen too every hour (broker/gc_pacing.py)
    gc_pacing: bool = True
    # static shovels from the configuration file's [shovels.NAME] tables
    # (broker/shovel/static.py; RabbitMQ: advanced.config's rabbitmq_shovel shovels)
    shovels: tuple[Any, ...] = ()

    # resource alarms (rabbitmq.com/memory.html, disk-alarms.html, alarms.html); sizes take
    # RabbitMQ's units ("512MB", "1GiB", "800M"): broker/config.py parse_information_unit
    vm_memory_high_watermark: float = 0.4  # fraction of RAM (alias ...watermark.relative)
    vm_memory_high_watermark_absolute: int = 0  # bytes; 0 = use the relative watermark
    vm_memory_high_watermark_paging_ratio: float = 0.5  # queues page above this x watermark
    total_memory_available_override_value: int = 0  # bytes taken as RAM; 0 = detect
    disk_free_limit: int = 50_000_000  # bytes free on the data dir's fs (alias .absolute)
    disk_free_limit_relative: float = 0.0  # fraction of RAM; 0 = use disk_free_limit
    memory_monitor_interval: int = 1000  # ms between memory/disk checks (vm_memory_monitor)

    # operations (rabbitmq.com/management.html, prometheus.html): the HTTP API and UI, and
    # the Prometheus endpoint; port 0 turns each off, -1 picks a free port (tests)
    management_tcp_port: int = 15672
    management_tcp_ip: str = "127.0.0.1"
    prometheus_tcp_port: int = 15692
    prometheus_tcp_ip: str = "127.0.0.1"
    node_name: str = ""  # "" = rabbit@<short hostname>, as RabbitMQ names its node
    collect_statistics_interval: int = 5000  # ms between samples of counters into rates
    load_definitions: str = ""  # a definitions JSON file imported at boot (definitions.html)

    # the RabbitMQ Stream protocol (rabbitmq.com/stream.html, issue 37; rabbitmq.conf
    # stream.*): its listener is off until the protocol is complete ("" = off; "5552" or
    # "HOST:PORT" turns it on)
    stream_listeners_tcp_default: str = ""
    stream_listeners_ssl_default: str = ""  # the TLS listener ("5551"; ssl_options.* apply)
    stream_advertised_host: str = ""  # what metadata and open answer ("" = the bound host)
    stream_advertised_port: int = 0  # (0 = the bound port)
    stream_frame_max: int = 1_048_576  # bytes the server proposes in tune
    stream_heartbeat: int = 60  # seconds the server proposes in tune
    stream_initial_credits: int = 50_000

    # high availability (docs/high-availability.md; rabbitmq.conf `clustering.enabled = true`,
    # TOML `[clustering] enabled = true`): etcd elects the leader and keeps the in-sync
    # replica set, the leader streams its durable writes to followers on clustering.port
    clustering_enabled: bool = False
    clustering_etcd_endpoints: str = "127.0.0.1:2379"  # host:port[,host:port...]
    clustering_etcd_prefix: str = "pybroker"  # every key the cluster keeps lives under it
    clustering_etcd_username: str = ""  # etcd user (with clustering.etcd_password)
    clustering_etcd_password: str = ""
    clustering_etcd_tls_cacertfile: str = ""  # TLS to etcd: CA of its server certificates
    clustering_etcd_tls_certfile: str = ""  # client certificate (PEM), if etcd asks for one
    clustering_etcd_tls_keyfile: str = ""
    clustering_advertised_uri: str = ""  # tcp://host:port followers reach this member at
    clustering_bind: str = "127.0.0.1"  # address of the replication listener
    clustering_port: int = 5679  # the replication listener (members only)
    clustering_lease_ttl: int = 2  # s: a leader that cannot renew its lease this long stops
    # (2: etcd's shortest with its default 1 s election timeout; failover takes 2-3 s)
    clustering_min_insync_replicas: int = 1  # members (leader included) a confirm needs
    clustering_ack_timeout: int = 3000  # ms a follower may lag before it leaves the ISR
    clustering_follower_fsync: bool = True  # a follower acks after fdatasync (else: written)
    # TLS on the member port (replication and proxied clients), both ways verified against
    # the CA; the files default to ssl_options.* (broker/cluster/member_tls.py)
    clustering_tls: bool = False
    clustering_tls_certfile: str = ""
    clustering_tls_keyfile: str = ""
    clustering_tls_cacertfile: str = ""

    # writer: flush the outbound buffer early once it holds this many bytes
    writer_flush_threshold: int = 262144
    # reader: frames (a whole basic.publish counts one) a connection handles per loop turn
    # before what it read waits for the next turn (issue 49: fairness under a flood)
    reader_slice: int = 64
    # queues serve consumers before publishers while the event loop's thread uses at least
    # this share of the CPU (broker/consumer_bias.py); 0: always, above 1: never
    consumer_bias_load: float = 0.7
    # where a new queue's process goes among the workers when neither its arguments nor its
    # policy say (rabbitmq.conf names; "" or an unknown name: the worker with the fewest
    # queues, broker/workers/placement.py `locator`): client-local, min-masters or random
    # for classic queues; client-local or balanced for quorum queues
    queue_master_locator: str = ""
    queue_leader_locator: str = ""

    extra: Mapping[str, Any] = field(default_factory=dict)  # unknown TOML keys, kept for plugins
    # what reading the configuration warned about (rabbitmq.conf keys not acted on), logged
    # when the broker starts
    warnings: tuple[str, ...] = ()

    def resolved_node_name(self) -> str:
        """`node_name`, or `rabbit@<short hostname>` as RabbitMQ names its node."""
        return self.node_name or f"rabbit@{socket.gethostname().split('.')[0]}"


_FIELDS = {f.name: f for f in fields(BrokerConfig)}
# rabbitmq.conf keys that name an existing field another way (dots already mapped to "_")
_ALIASES = {
    "vm_memory_high_watermark_relative": "vm_memory_high_watermark",
    "disk_free_limit_absolute": "disk_free_limit",
}
# fields holding a byte count that may be written with a unit ("512MB")
_SIZE_KEYS = frozenset({"vm_memory_high_watermark_absolute", "disk_free_limit",
                        "total_memory_available_override_value"})
_CLI_KEYS = ("host", "port", "data_dir", "config", "log_level", "heartbeat", "frame_max",
             "channel_max", "confirm_on", "product", "workers")


def _coerce(name: str, value: Any) -> Any:
    """Convert a string (env/CLI) or TOML value to the field's type."""
    if name in _SIZE_KEYS:
        return parse_information_unit(value)
    if name == "workers":
        return _workers(value)
    default = _FIELDS[name].default
    if isinstance(value, str):
        if isinstance(default, bool):
            low = value.strip().lower()
            if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(f"{name}: expected a boolean, got {value!r}")
            return low in ("1", "true", "yes", "on")
        if isinstance(default, int):
            if value.strip().lower() == "infinity":  # rabbitmq.conf's "no limit"
                return -1
            return int(value)
        if isinstance(default, float):
            return float(value)
        if isinstance(default, tuple):
            return tuple(v.strip() for v in value.split(",") if v.strip())
        return value
    if isinstance(default, tuple) and isinstance(value, list):
        return tuple(value)
    if isinstance(default, float) and isinstance(value, int):
        return float(value)
    return value


def _workers(value: Any) -> int:
    """`workers`: a count of at least 1, or "auto": the cores this process may run on
    (`os.sched_getaffinity`, so a cgroup or taskset limit counts)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return len(os.sched_getaffinity(0))
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"workers must be a number or auto, not {value!r}") from None
    if n < 1:
        raise ValueError(f"workers must be at least 1, not {n}")
    return n


def _check_workers(values: Mapping[str, Any]) -> None:
    """What several worker processes cannot do yet (ValueError; docs/multicore.md)."""
    if values.get("workers", 1) <= 1:
        return
    if values.get("confirm_on") == "ack-lite":  # its channel-held refs do not cross workers
        raise ValueError("workers > 1 with confirm_on = ack-lite is not supported yet")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m broker", description="AMQP 0-9-1 broker")
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 5672)")
    p.add_argument("--data-dir", dest="data_dir", help="directory for durable state")
    p.add_argument("--config", help="configuration file: RabbitMQ's rabbitmq.conf format "
                   "when it ends in .conf, else TOML")
    p.add_argument("--log-level", dest="log_level",
                   choices=["debug", "info", "warning", "error"], help="log level")
    p.add_argument("--heartbeat", type=int, help="heartbeat the server proposes (s)")
    p.add_argument("--frame-max", dest="frame_max", type=int, help="largest frame (bytes)")
    p.add_argument("--channel-max", dest="channel_max", type=int, help="channels per connection")
    p.add_argument("--confirm-on", dest="confirm_on", choices=["persist", "ack", "ack-lite"],
                   help="when publishers get confirms")
    p.add_argument("--product", help="server property 'product' (e.g. RabbitMQ for kombu)")
    p.add_argument("--workers", help="processes to run the broker in: a number, or auto "
                   "(one per core this process may use); default 1")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any other configuration key")
    return p


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """TOML dotted keys (`ssl_options.certfile = "x"`, or an `[ssl_options]` table) become
    flat RabbitMQ-style keys ("ssl_options.certfile"), also under a key that is itself a
    field (`[disk_free_limit] relative = 1.5` is "disk_free_limit.relative")."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        full = f"{prefix}.{key}" if prefix else key
        name = full.replace(".", "_").replace("-", "_")
        if isinstance(value, dict) and name != "extra":
            out.update(_flatten(value, full))
        else:
            out[full] = value
    return out


def _check_resources(values: Mapping[str, Any]) -> None:
    """Ranges of the resource settings (ValueError): watermark and ratios as fractions."""
    mark = values.get("vm_memory_high_watermark", 0.4)
    if not 0 <= mark <= 1:  # RabbitMQ's schema: a float in [0, 1] (0 disables publishing)
        raise ValueError(f"vm_memory_high_watermark must be in [0, 1], not {mark}")
    ratio = values.get("vm_memory_high_watermark_paging_ratio", 0.5)
    if not ratio > 0:  # above 1 queues never page (rabbitmq.com/memory.html allows it)
        raise ValueError(f"vm_memory_high_watermark_paging_ratio must be positive, not {ratio}")
    if values.get("disk_free_limit_relative", 0.0) < 0:
        raise ValueError("disk_free_limit.relative must not be negative")
    if values.get("memory_monitor_interval", 1000) <= 0:
        raise ValueError("memory_monitor_interval must be positive (ms)")


def load_config(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> BrokerConfig:
    """Build the config from defaults < TOML file < environment < CLI.

    The TOML file is `--config` or `BROKER_CONFIG`; keys are the field names (a `[broker]`
    table, or top level) or RabbitMQ's dotted keys (`ssl_options.certfile`, also as TOML
    tables); dots and dashes map to underscores, as in `--set ssl_options.verify=verify_peer`;
    `vm_memory_high_watermark.relative` and `disk_free_limit.absolute` are accepted as the
    names of `vm_memory_high_watermark` and `disk_free_limit`, and byte sizes take units
    (`--set vm_memory_high_watermark.absolute=512MB`). Raises `SystemExit` (argparse) on bad
    CLI flags and `ValueError` for unknown keys or values of the wrong type or range.
    """
    environ = os.environ if environ is None else environ
    args = _parser().parse_args(list(argv) if argv is not None else [])
    values: dict[str, Any] = {}
    extra: dict[str, Any] = {}

    warnings: list[str] = []
    path = args.config or environ.get("BROKER_CONFIG") or _rabbitmq_config_file(environ)
    if path and path.endswith(".conf"):  # RabbitMQ's rabbitmq.conf format
        with open(path, encoding="utf-8") as fh:
            conf_values, warnings = rabbitmq_conf.parse(fh.read(), path, _own_field)
        values.update(conf_values)
        values["config"] = path
    elif path:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
        root = dict(data.get("broker", data))
        if "shovels" in root:
            from broker.shovel.static import parse_all  # only when a file has shovels

            values["shovels"] = parse_all(root.pop("shovels"))
        table = _flatten(root)
        for key, value in table.items():
            key = key.replace(".", "_").replace("-", "_")
            key = _ALIASES.get(key, key)
            if key in _FIELDS and key != "extra":
                values[key] = _coerce(key, value)
            else:
                extra[key] = value
        values["config"] = path

    for env_key, name in _RABBITMQ_ENV.items():  # RabbitMQ's own variables, below BROKER_*
        if env_key in environ:
            values[name] = _coerce(name, environ[env_key])
    for name in _FIELDS:
        env_key = "BROKER_" + name.upper()
        if name not in ("extra", "warnings") and env_key in environ:
            values[name] = _coerce(name, environ[env_key])

    for name in _CLI_KEYS:
        value = getattr(args, name)
        if value is not None:
            values[name] = _coerce(name, value) if isinstance(value, str) else value
    for item in args.set:
        key, sep, value = item.partition("=")
        key = key.strip().replace(".", "_").replace("-", "_")
        key = _ALIASES.get(key, key)
        if not sep or key not in _FIELDS or key == "extra":
            raise ValueError(f"--set {item!r}: unknown key")
        values[key] = _coerce(key, value)

    if values.get("ssl_options_verify", "verify_none") not in ("verify_none", "verify_peer"):
        raise ValueError("ssl_options.verify must be verify_none or verify_peer")
    if values.get("confirm_on", "persist") not in ("persist", "ack", "ack-lite"):
        raise ValueError(f"confirm_on must be persist, ack or ack-lite, not {values['confirm_on']!r}")
    _check_resources(values)
    _check_workers(values)
    cfg = BrokerConfig(**values, warnings=tuple(warnings))
    return dataclasses.replace(cfg, extra=extra) if extra else cfg


# RabbitMQ's environment variables (rabbitmq.com/configure.html#supported-environment-variables)
_RABBITMQ_ENV = {"RABBITMQ_NODENAME": "node_name", "RABBITMQ_NODE_PORT": "port",
                 "RABBITMQ_NODE_IP_ADDRESS": "host"}


def _rabbitmq_config_file(environ: Mapping[str, str]) -> str | None:
    """RABBITMQ_CONFIG_FILE: a rabbitmq.conf path, its `.conf` extension optional as in
    RabbitMQ ("/etc/rabbitmq/rabbitmq" reads /etc/rabbitmq/rabbitmq.conf)."""
    path = environ.get("RABBITMQ_CONFIG_FILE")
    if not path:
        return None
    return path if os.path.splitext(path)[1] else path + ".conf"


def _own_field(name: str) -> Callable[[str], dict[str, Any]] | None:
    """For rabbitmq.conf: this broker's own setting `name` (a BrokerConfig field, or an
    alias), as a converter to {field: value}; None when it is none of them."""
    name = _ALIASES.get(name, name)
    if name not in _FIELDS or name in ("extra", "warnings", "config", "shovels"):
        return None
    return lambda text: {name: _coerce(name, text)}
