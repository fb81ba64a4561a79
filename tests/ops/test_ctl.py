"""brokerctl: rabbitmqctl's commands over the HTTP API, run as a real subprocess
(`python -m broker.ctl`) against the running broker. Also passes against RabbitMQ 3.10.8
with the management plugin (the commands only use the HTTP API)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pika
import pytest

from tests.polling import wait_for


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def ctl(api_base):
    def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "broker.ctl", "--api", api_base, *args],
                              capture_output=True, text=True, timeout=60)
        if ok:
            assert proc.returncode == 0, proc.stderr
        return proc
    return run


def test_list_queues_columns_like_rabbitmqctl(ctl, ch):
    q = uniq("ctlq")
    ch.queue_declare(q, exclusive=True)
    for _ in range(3):
        ch.basic_publish("", q, b"x")
    out = wait_for(lambda: (lambda out: out if f"{q}\t3\t3\t0\t0" in out else None)(
        ctl("list_queues", "name", "messages", "messages_ready", "messages_unacknowledged",
            "consumers").stdout.splitlines()), timeout=15)
    assert out[0] == "Listing queues for vhost / ..."
    assert out[1] == "name\tmessages\tmessages_ready\tmessages_unacknowledged\tconsumers"
    assert f"{q}\t3\t3\t0\t0" in out
    quiet = ctl("-q", "list_queues").stdout.splitlines()
    assert quiet[0] == "name\tmessages" and f"{q}\t3" in quiet
    silent = ctl("-s", "list_queues").stdout.splitlines()
    assert f"{q}\t3" in silent and "name\tmessages" not in silent
    rows = json.loads(ctl("--formatter", "json", "list_queues", "name", "messages").stdout)
    assert {"name": q, "messages": 3} in rows


def test_lists_of_other_objects(ctl, ch):
    x, q = uniq("ctlx"), uniq("ctlq")
    ch.exchange_declare(x, "topic", auto_delete=True)
    ch.queue_declare(q, exclusive=True)
    ch.queue_bind(q, x, "k.#")
    ch.basic_consume(q, lambda *a: None, consumer_tag="ctl-consumer")
    assert f"{x}\ttopic" in ctl("-q", "list_exchanges").stdout.splitlines()
    bindings = ctl("-q", "list_bindings").stdout.splitlines()
    assert bindings[0] == ("source_name\tsource_kind\tdestination_name\tdestination_kind"
                           "\trouting_key\targuments")
    assert f"{x}\texchange\t{q}\tqueue\tk.#\t{{}}" in bindings
    assert wait_for(lambda: any(line.startswith("guest\t127.0.0.1\t") for line in
                                ctl("-q", "list_connections").stdout.splitlines()[1:]),
                    timeout=15)
    assert wait_for(lambda: any("\tguest\t" in line for line in
                                ctl("-q", "list_channels").stdout.splitlines()), timeout=15)
    consumers = wait_for(lambda: (lambda out: out if "ctl-consumer" in out else None)(
        ctl("-q", "list_consumers").stdout), timeout=15)
    assert f"{q}\t" in consumers and "ctl-consumer" in consumers
    assert "guest\t[administrator]" in ctl("-q", "list_users").stdout.splitlines()
    assert "/" in ctl("-q", "list_vhosts").stdout.splitlines()
    assert "guest\t.*\t.*\t.*" in ctl("-q", "list_permissions").stdout.splitlines()


def test_users_vhosts_permissions_round_trip(ctl, broker):
    user, vhost = uniq("ctlu"), uniq("ctlv")
    ctl("add_user", user, "pw1")
    ctl("set_user_tags", user, "monitoring", "management")
    assert f"{user}\t[monitoring, management]" in ctl("-q", "list_users").stdout.splitlines()
    ctl("add_vhost", vhost)
    ctl("-p", vhost, "set_permissions", user, ".*", ".*", ".*")
    ctl("change_password", user, "pw2")
    url = broker.url.replace("guest:guest", f"{user}:pw2").rsplit("/", 1)[0] + "/" + vhost
    pika.BlockingConnection(pika.URLParameters(url)).close()
    assert f"{user}\t.*\t.*\t.*" in ctl("-q", "-p", vhost, "list_permissions").stdout
    ctl("-p", vhost, "clear_permissions", user)
    ctl("delete_vhost", vhost)
    ctl("delete_user", user)
    gone = ctl("delete_user", user, ok=False)
    assert gone.returncode == 70 and "Error" in gone.stderr


def test_policies(ctl, ch):
    name = uniq("ctlp")
    q = f"{name}-q"
    ctl("set_policy", "--apply-to", "queues", "--priority", "3", name, f"^{name}",
        '{"max-length": 1}')
    line = next(s for s in ctl("-q", "list_policies").stdout.splitlines() if name in s)
    assert line.startswith(f"/\t{name}\t^{name}\tqueues\t")
    assert line.endswith("\t3")
    ch.queue_declare(q, exclusive=True)
    for _ in range(3):
        ch.basic_publish("", q, b"x")
    assert ch.queue_declare(q, passive=True).method.message_count == 1
    ctl("clear_policy", name)
    bad = ctl("set_policy", name, "^x", "{not json", ok=False)
    assert bad.returncode == 64


def test_purge_and_delete_queue(ctl, ch):
    q = uniq("ctlq")
    ch.queue_declare(q)
    for _ in range(2):
        ch.basic_publish("", q, b"x")
    ctl("purge_queue", q)
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    out = ctl("delete_queue", q).stdout
    assert "Queue was successfully deleted with 0 ready messages" in out


def test_close_connection(ctl, broker):
    name = uniq("ctlc")
    params = pika.URLParameters(broker.url)
    params.client_properties = {"connection_name": name}
    conn = pika.BlockingConnection(params)
    def find():
        rows = json.loads(ctl("--formatter", "json", "list_connections", "name",
                              "client_properties").stdout)
        return next((r["name"] for r in rows
                     if (r["client_properties"] or {}).get("connection_name") == name), None)

    target = wait_for(find, timeout=15)
    ctl("close_connection", target, "go away")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        for _ in range(100):
            conn.process_data_events(0.05)
    assert info.value.reply_text == "CONNECTION_FORCED - go away"


def test_status_and_definitions(ctl, tmp_path, ch):
    out = ctl("status").stdout
    assert out.startswith("Status of node rabbit@")
    status = json.loads(ctl("--formatter", "json", "status").stdout)
    assert status["alarms"] == [] and status["memory"]["used"] > 0
    q = uniq("ctldef")
    ch.queue_declare(q, durable=True)
    path = tmp_path / "defs.json"
    ctl("export_definitions", str(path))
    data = json.loads(path.read_text())
    assert any(x["name"] == q for x in data["queues"])
    ch.queue_delete(q)
    ctl("import_definitions", str(path))
    ch.queue_declare(q, passive=True)
    ch.queue_delete(q)


def test_usage_and_unreachable_exit_codes():
    bad = subprocess.run([sys.executable, "-m", "broker.ctl", "no_such_command"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 64
    down = subprocess.run([sys.executable, "-m", "broker.ctl", "--api",
                           "http://127.0.0.1:9", "list_queues"],
                          capture_output=True, text=True, timeout=60)
    assert down.returncode == 69 and "unable to reach" in down.stderr


def test_add_and_delete_super_stream_like_rabbitmq_streams(ctl, api):
    """brokerctl add_super_stream NAME --partitions N | --binding-keys K,… (rabbitmq-streams
    add_super_stream): a durable direct exchange with x-super-stream, a stream per
    partition bound with its key and x-stream-partition-order; delete_super_stream removes
    them. Only the HTTP API is used, so it works against RabbitMQ too."""
    name = uniq("ss")
    out = ctl("add_super_stream", name, "--partitions", "3", "--max-age", "24h").stdout
    assert f"Adding a super stream {name}" in out
    x = api.get(f"/api/exchanges/%2F/{name}").json()
    assert (x["type"], x["durable"], x["arguments"]) == ("direct", True, {"x-super-stream": True})
    bindings = api.get(f"/api/exchanges/%2F/{name}/bindings/source").json()
    assert sorted((b["destination"], b["routing_key"], b["arguments"]["x-stream-partition-order"])
                  for b in bindings) == [(f"{name}-{i}", str(i), i) for i in range(3)]
    q = api.get(f"/api/queues/%2F/{name}-1").json()
    assert q["arguments"]["x-queue-type"] == "stream" and q["arguments"]["x-max-age"] == "24h"
    assert ctl("delete_super_stream", name).returncode == 0
    assert api.get(f"/api/exchanges/%2F/{name}").status_code == 404
    assert api.get(f"/api/queues/%2F/{name}-0").status_code == 404
    keyed = uniq("ss")
    ctl("add_super_stream", keyed, "--binding-keys", "amer,emea")
    assert api.get(f"/api/queues/%2F/{keyed}-emea").status_code == 200
    ctl("delete_super_stream", keyed)
    bad = ctl("add_super_stream", uniq("ss"), "--partitions", "2", "--binding-keys", "a",
              ok=False)
    assert bad.returncode == 64 and "either --partitions or --binding-keys" in bad.stderr
