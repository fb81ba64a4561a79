"""rabbitmq.conf, RabbitMQ's new-style configuration format (issue 23 item 5): the keys this
broker acts on under RabbitMQ's names, warnings for RabbitMQ keys it does not act on, errors
naming the key and line for anything else, RABBITMQ_CONFIG_FILE and RABBITMQ_NODENAME."""

from __future__ import annotations

import pytest

from broker.config import load_config

SAMPLE = """\
# an operator's rabbitmq.conf, as RabbitMQ 3.10 reads it
listeners.tcp.default = 0.0.0.0:5699
listeners.ssl.default = 5671
ssl_options.cacertfile = /etc/rabbitmq/ca.pem
ssl_options.certfile   = /etc/rabbitmq/server.pem
ssl_options.keyfile    = /etc/rabbitmq/server.key
ssl_options.verify     = verify_peer
ssl_options.fail_if_no_peer_cert = true
default_user = alice
default_pass = pa#ss=word
default_vhost = shop
loopback_users.guest = false
auth_mechanisms.1 = PLAIN
auth_mechanisms.2 = EXTERNAL
management.tcp.port = 15699
prometheus.tcp.port = 15698
vm_memory_high_watermark.relative = 0.6
vm_memory_high_watermark_paging_ratio = 0.75
disk_free_limit.absolute = 2GB
log.console.level = warning
heartbeat = 30
channel_max = 100
handshake_timeout = 5000
queue_index_embed_msgs_below = 2kb
collect_statistics_interval = 10000

# RabbitMQ settings for features this broker does not have
cluster_formation.peer_discovery_backend = classic_config
log.file.level = debug
"""


def _conf(tmp_path, text: str, name: str = "rabbitmq.conf"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_an_operators_file_is_read_under_rabbitmqs_names(tmp_path):
    cfg = load_config(["--config", str(_conf(tmp_path, SAMPLE))], environ={})
    assert (cfg.host, cfg.port, cfg.listeners_ssl_default) == ("0.0.0.0", 5699, "5671")
    assert cfg.ssl_options_verify == "verify_peer" and cfg.ssl_options_fail_if_no_peer_cert
    assert cfg.ssl_options_certfile == "/etc/rabbitmq/server.pem"
    assert (cfg.default_user, cfg.default_pass, cfg.default_vhost) == (
        "alice", "pa#ss=word", "shop")  # the value is the rest of the line, as written
    assert cfg.loopback_users == ()
    assert cfg.auth_mechanisms == ("PLAIN", "EXTERNAL")
    assert (cfg.management_tcp_port, cfg.prometheus_tcp_port) == (15699, 15698)
    assert cfg.vm_memory_high_watermark == 0.6
    assert cfg.vm_memory_high_watermark_paging_ratio == 0.75
    assert cfg.disk_free_limit == 2_000_000_000  # GB: powers of 1000, as RabbitMQ
    assert cfg.log_level == "warning"
    assert (cfg.heartbeat, cfg.channel_max, cfg.handshake_timeout) == (30, 100, 5.0)
    assert cfg.queue_index_embed_msgs_below == 2048  # cuttlefish bytesize: powers of 1024
    assert cfg.collect_statistics_interval == 10000
    assert [w.split(": ", 1)[0].rsplit(":", 1)[1] for w in cfg.warnings] == ["28", "29"]
    assert "cluster_formation.peer_discovery_backend" in cfg.warnings[0]


def test_an_unknown_key_is_an_error_naming_it_and_its_line(tmp_path):
    path = _conf(tmp_path, "heartbeat = 10\n\n# fine\nheartbeet = 10\n")
    with pytest.raises(ValueError, match=r"rabbitmq.conf:4: Conf file attempted to set "
                                         r"unknown variable: heartbeet"):
        load_config(["--config", str(path)], environ={})


@pytest.mark.parametrize("line", ["heartbeat = soon", "ssl_options.fail_if_no_peer_cert = yes",
                                  "disk_free_limit.absolute = lots", "just some words"])
def test_a_bad_value_or_line_names_the_line(tmp_path, line):
    path = _conf(tmp_path, f"# first\n{line}\n")
    with pytest.raises(ValueError, match=r"rabbitmq.conf:2: "):
        load_config(["--config", str(path)], environ={})


def test_this_brokers_own_settings_and_loopback_none(tmp_path):
    path = _conf(tmp_path, "confirm_on = ack-lite\nloopback_users = none\n"
                           "listeners.tcp.local_v6 = ::1:5700\n")
    cfg = load_config(["--config", str(path)], environ={})
    assert (cfg.confirm_on, cfg.loopback_users, cfg.host, cfg.port) == (
        "ack-lite", (), "::1", 5700)


def test_rabbitmq_environment_variables(tmp_path):
    base = _conf(tmp_path, "listeners.tcp.default = 5701\n")
    no_ext = str(base)[: -len(".conf")]  # RabbitMQ takes the path without its extension
    cfg = load_config([], environ={"RABBITMQ_CONFIG_FILE": no_ext,
                                   "RABBITMQ_NODENAME": "rabbit@box"})
    assert (cfg.port, cfg.node_name, cfg.config) == (5701, "rabbit@box", str(base))
    # BROKER_* and the command line still win over the file and RabbitMQ's variables
    cfg = load_config(["--port", "5702"], environ={"RABBITMQ_CONFIG_FILE": str(base),
                                                   "RABBITMQ_NODE_PORT": "5703"})
    assert cfg.port == 5702
    assert load_config([], environ={"RABBITMQ_CONFIG_FILE": str(base),
                                    "RABBITMQ_NODE_PORT": "5703"}).port == 5703


def test_toml_stays(tmp_path):
    path = _conf(tmp_path, 'heartbeat = 15\n[ssl_options]\nverify = "verify_peer"\n',
                 name="broker.toml")
    cfg = load_config(["--config", str(path)], environ={})
    assert (cfg.heartbeat, cfg.ssl_options_verify) == (15, "verify_peer")


def test_the_stream_protocols_settings_in_both_formats(tmp_path):
    """stream.* as rabbitmq_stream's schema names them (issue 37 item 1), and the same
    fields in TOML."""
    text = ("stream.listeners.tcp.default = 5552\nstream.listeners.ssl.default = 5551\n"
            "stream.advertised_host = broker.example\n"
            "stream.advertised_port = 15552\nstream.frame_max = 2097152\n"
            "stream.heartbeat = 30\nstream.initial_credits = 1000\n")
    cfg = load_config(["--config", str(_conf(tmp_path, text))], environ={})
    assert (cfg.stream_listeners_tcp_default, cfg.stream_listeners_ssl_default,
            cfg.stream_advertised_host, cfg.stream_advertised_port) == (
        "5552", "5551", "broker.example", 15552)
    assert (cfg.stream_frame_max, cfg.stream_heartbeat, cfg.stream_initial_credits) == (
        2097152, 30, 1000)
    assert not cfg.warnings
    toml = _conf(tmp_path, 'stream_listeners_tcp_default = "127.0.0.1:5552"\n'
                 "stream_heartbeat = 10\n", "broker.toml")
    cfg = load_config(["--config", str(toml)], environ={})
    assert (cfg.stream_listeners_tcp_default, cfg.stream_heartbeat) == ("127.0.0.1:5552", 10)


def test_the_queue_locators_are_taken_not_warned_about(tmp_path):
    """queue_master_locator and queue_leader_locator choose a new queue's worker
    (broker/workers/placement.py); before, they were RabbitMQ keys this broker ignored."""
    text = "queue_master_locator = client-local\nqueue_leader_locator = balanced\n"
    cfg = load_config(["--config", str(_conf(tmp_path, text))], environ={})
    assert (cfg.queue_master_locator, cfg.queue_leader_locator) == ("client-local",
                                                                     "balanced")
    assert not cfg.warnings
