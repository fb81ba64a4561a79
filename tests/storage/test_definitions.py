"""Durable definitions in SQLite: round trips, cascades, typed AMQP tables, schema version."""

from __future__ import annotations

import datetime
import decimal
import sqlite3

import pytest

from broker.definitions import (
    SCHEMA_VERSION,
    BindingDef,
    Definitions,
    DefinitionsError,
    ExchangeDef,
    PolicyDef,
    QueueDef,
    check_password,
    decode_table,
    encode_table,
    hash_password,
)

ARGS = {
    "x-max-length": 10,
    "x-message-ttl": 60000,
    "x-dead-letter-exchange": "dlx",
    "ratio": 0.25,
    "flag": True,
    "nothing": None,
    "raw": b"\x00\xff",
    "array": bytearray(b"ab"),
    "price": decimal.Decimal("12.50"),
    "when": datetime.datetime(2024, 5, 1, 12, 30, 0),
    "nested": {"list": [1, "two", b"3"], "$odd": "dollar key"},
}


def test_tagged_json_keeps_every_amqp_type():
    back = decode_table(encode_table(ARGS))
    assert back == ARGS
    assert type(back["raw"]) is bytes
    assert type(back["array"]) is bytearray
    assert type(back["price"]) is decimal.Decimal
    assert str(back["price"]) == "12.50"
    assert type(back["when"]) is datetime.datetime
    assert back["nested"]["$odd"] == "dollar key"
    assert encode_table({"b": 1, "a": 2}) == encode_table({"a": 2, "b": 1})


def test_sha256_password_hash_like_rabbitmq():
    h = hash_password("guest", salt=b"\x90\x8d\xe4\xa1")
    assert len(h) == 36
    assert h[:4] == b"\x90\x8d\xe4\xa1"
    assert check_password("guest", h)
    assert not check_password("Guest", h)
    assert hash_password("guest") != hash_password("guest")  # fresh salt


def test_round_trips_and_persistence(tmp_path):
    path = str(tmp_path / "defs.sqlite")
    d = Definitions(path)
    d.add_vhost("/", "default", ["prod"])
    d.add_user("guest", "guest", tags=["administrator"])
    d.set_permissions("guest", "/", ".*", ".*", ".*")
    d.add_exchange(ExchangeDef("/", "logs", "topic", arguments={"alternate-exchange": "ae"}))
    d.add_queue(QueueDef("/", "q1", arguments=ARGS))
    d.add_binding(BindingDef("/", "logs", "q1", "queue", "a.#", {"x-match": "all"}))
    d.add_binding(BindingDef("/", "logs", "q1", "queue", "a.#", {"x-match": "all"}))
    d.set_policy(PolicyDef("/", "ttl", "^q", {"message-ttl": 1000}, 5, "queues"))
    d.close()
    again = Definitions(path)
    assert [v.name for v in again.list_vhosts()] == ["/"]
    assert again.list_vhosts()[0].tags == ("prod",)
    assert again.check_user_password("guest", "guest")
    assert not again.check_user_password("guest", "nope")
    assert not again.check_user_password("nobody", "guest")
    assert again.list_users()[0].tags == ("administrator",)
    assert again.list_permissions()[0].configure == ".*"
    assert again.list_exchanges("/") == [
        ExchangeDef("/", "logs", "topic", arguments={"alternate-exchange": "ae"})
    ]
    assert again.list_queues() == [QueueDef("/", "q1", arguments=ARGS)]
    assert again.list_bindings("/") == [
        BindingDef("/", "logs", "q1", "queue", "a.#", {"x-match": "all"})
    ]
    assert again.list_policies()[0].definition == {"message-ttl": 1000}
    again.close()


def test_removals_cascade(tmp_path):
    d = Definitions(str(tmp_path / "defs.sqlite"))
    d.add_vhost("v")
    d.add_exchange(ExchangeDef("v", "x", "direct"))
    d.add_exchange(ExchangeDef("v", "y", "fanout"))
    d.add_queue(QueueDef("v", "q"))
    d.add_binding(BindingDef("v", "x", "q", "queue", "k"))
    d.add_binding(BindingDef("v", "y", "x", "exchange", ""))
    assert d.remove_queue("v", "q")
    assert [b.destination for b in d.list_bindings("v")] == ["x"]
    assert d.remove_exchange("v", "x")
    assert d.list_bindings("v") == []
    assert not d.remove_exchange("v", "x")
    d.add_queue(QueueDef("v", "q2"))
    assert d.remove_vhost("v")
    assert d.list_queues() == [] and d.list_exchanges() == []
    d.close()


def test_unknown_vhost_is_refused(tmp_path):
    d = Definitions(str(tmp_path / "defs.sqlite"))
    with pytest.raises(sqlite3.IntegrityError) as err:
        d.add_queue(QueueDef("missing", "q"))
    assert "FOREIGN KEY" in str(err.value)
    assert d.list_queues() == []
    d.close()


def test_schema_version_recorded_and_newer_files_refused(tmp_path):
    path = str(tmp_path / "defs.sqlite")
    d = Definitions(path)
    assert d.schema_version() == SCHEMA_VERSION
    d.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    db.commit()
    db.close()
    with pytest.raises(DefinitionsError) as err:
        Definitions(path)
    assert "newer" in str(err.value)


def test_wal_mode(tmp_path):
    path = str(tmp_path / "defs.sqlite")
    d = Definitions(path)
    assert d._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    d.close()


def test_v1_file_migrates_to_the_current_schema_keeping_users_and_permissions(tmp_path):
    """A definitions.db written before issue 13 (schema v1) opens as the current schema:
    users and permissions are kept, the topic permission, limit (v2), runtime parameter
    (v3) and global parameter (v4) tables are added."""
    from broker.definitions import _SCHEMA_V1

    path = str(tmp_path / "definitions.db")
    db = sqlite3.connect(path)
    db.executescript(_SCHEMA_V1)
    db.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    db.execute("INSERT INTO schema_version VALUES (1)")
    db.execute("INSERT INTO vhosts VALUES ('/', '', '[]')")
    db.execute("INSERT INTO users VALUES ('guest', ?, 'rabbit_password_hashing_sha256', '[]')",
               (hash_password("guest"),))
    db.execute("INSERT INTO permissions VALUES ('guest', '/', '.*', '.*', '.*')")
    db.commit()
    db.close()
    d = Definitions(path)
    assert d.schema_version() == SCHEMA_VERSION == 4
    d.set_global_parameter("cluster_name", "c1")
    assert d.list_global_parameters() == {"cluster_name": "c1"}
    assert d.clear_global_parameter("cluster_name") and not d.clear_global_parameter("x")
    assert d.check_user_password("guest", "guest")
    assert [p.user for p in d.list_permissions()] == ["guest"]
    d.set_topic_permissions("guest", "/", "amq.topic", "^a", "^b")
    d.set_limits("user", "guest", {"max-channels": 5})
    d.set_limits("vhost", "/", {"max-queues": 7})
    # updating a user or a vhost keeps what hangs off it (UPSERT, no cascade)
    d.add_user("guest", "new", tags=["administrator"])
    d.add_vhost("/", "described")
    assert d.check_user_password("guest", "new")
    assert [(t.exchange, t.write) for t in d.list_topic_permissions()] == [("amq.topic", "^a")]
    assert d.list_limits("user") == {"guest": {"max-channels": 5}}
    assert d.list_limits("vhost") == {"/": {"max-queues": 7}}
    assert [p.user for p in d.list_permissions()] == ["guest"]
    d.remove_user("guest")  # cascades to its permissions, topic permissions and limits
    assert d.list_permissions() == [] and d.list_topic_permissions() == []
    assert d.list_limits("user") == {}
    d.close()


def test_runtime_parameters_round_trip_and_go_with_their_vhost(tmp_path):
    from broker.definitions import ParameterDef

    d = Definitions(str(tmp_path / "definitions.db"))
    d.add_vhost("/")
    d.add_vhost("v2")
    value = {"src-uri": "amqp://", "src-queue": "a", "dest-uri": ["amqp://x", "amqp://y"],
             "src-prefetch-count": 10, "dest-add-forward-headers": True}
    d.set_parameter(ParameterDef("/", "shovel", "s1", value))
    d.set_parameter(ParameterDef("v2", "shovel", "s2", {"src-uri": "amqp://"}))
    d.set_parameter(ParameterDef("/", "shovel", "s1", {**value, "src-queue": "b"}))  # replace
    assert [(p.vhost, p.name, p.value["src-queue"]) for p in d.list_parameters("/")] == [
        ("/", "s1", "b")]
    assert d.clear_parameter("/", "shovel", "s1") and not d.clear_parameter("/", "shovel", "s1")
    d.remove_vhost("v2")  # cascades
    assert d.list_parameters() == []
    d.close()
