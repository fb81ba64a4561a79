"""Permissions as RabbitMQ's access-control table (rabbitmq.com/access-control.html), tags,
password hashes from RabbitMQ exports, driven through the `broker.users` façade of a running
embedded broker and checked with pika and aio-pika.

Needs its own broker (users are made through the façade), so it is skipped when
BROKER_TEST_URI points at another broker.
"""

from __future__ import annotations

import asyncio
import uuid

import aio_pika
import aio_pika.exceptions
import aiormq.exceptions
import pika
import pika.exceptions
import pytest
from helpers import soft_error, start_embedded, wait_for

from broker.passwords import MD5, SHA256, SHA512, decode_hash

pytestmark = pytest.mark.usefixtures("embedded_only")


ALL = (".*", ".*", ".*")


@pytest.fixture(scope="module")
def sec(embedded_only_module):
    b = start_embedded()
    yield b
    b.stop()


def users(sec):
    return sec.broker.users


@pytest.fixture
def make_user(sec):
    """make_user(configure, write, read, vhost="/", tags=()) -> (name, password)."""
    made: list[str] = []

    def _make(configure=".*", write=".*", read=".*", vhost="/", tags=()):
        name = f"u-{uuid.uuid4().hex[:8]}"
        password = "pw-" + name
        sec.call(lambda: users(sec).add_user(name, password, tags=tags))
        if configure is not None:
            sec.call(lambda: users(sec).set_permissions(name, vhost, configure, write, read))
        made.append(name)
        return name, password

    yield _make
    for name in made:
        sec.call(lambda n=name: users(sec).delete_user(n))


def login(sec, user: str, password: str, vhost: str = "/") -> pika.BlockingConnection:
    params = pika.ConnectionParameters(
        "127.0.0.1", sec.port, vhost, pika.PlainCredentials(user, password))
    return pika.BlockingConnection(params)


@pytest.fixture
def admin(sec):
    conn = pika.BlockingConnection(pika.URLParameters(sec.url))
    yield conn.channel()
    conn.close()


def refused(kind: str, name: str, user: str, vhost: str = "/") -> tuple[int, str]:
    return 403, f"ACCESS_REFUSED - access to {kind} '{name}' in vhost '{vhost}' refused for user '{user}'"


def test_declare_needs_configure(sec, make_user, admin):
    user, pw = make_user(configure="^mine-", write=".*", read=".*")
    conn = login(sec, user, pw)
    ch = conn.channel()
    ch.queue_declare("mine-q", auto_delete=True)
    ch.exchange_declare("mine-x", "fanout", auto_delete=True)
    assert soft_error(ch.queue_declare, "other-q") == refused("queue", "other-q", user)
    ch = conn.channel()
    assert soft_error(ch.exchange_declare, "other-x", "direct") == refused(
        "exchange", "other-x", user)
    ch = conn.channel()
    # passive declares need no permission (rabbit_channel queue.declare passive=true)
    admin.queue_declare("other-q2", auto_delete=False)
    assert ch.queue_declare("other-q2", passive=True).method.queue == "other-q2"
    assert soft_error(ch.queue_delete, "other-q2") == refused("queue", "other-q2", user)
    ch = conn.channel()
    ch.queue_delete("mine-q")
    ch.exchange_delete("mine-x")
    conn.close()
    admin.queue_delete("other-q2")


def test_server_named_queues_are_checked_under_their_amq_gen_name(sec, make_user):
    user, pw = make_user(configure=r"^amq\.gen-", write="", read="")
    conn = login(sec, user, pw)
    ch = conn.channel()
    name = ch.queue_declare("", exclusive=True).method.queue
    assert name.startswith("amq.gen-")
    assert soft_error(ch.queue_declare, "named") == refused("queue", "named", user)
    conn.close()


def test_publish_needs_write_on_the_exchange_default_is_amq_default(sec, make_user, admin):
    user, pw = make_user(configure=".*", write="^amq\\.fanout$", read=".*")
    conn = login(sec, user, pw)
    ch = conn.channel()
    ch.confirm_delivery()  # publishes wait for the broker: a refusal raises right here
    ch.basic_publish("amq.fanout", "", b"ok")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_publish("", "anything", b"x")
    assert (info.value.reply_code, info.value.reply_text) == refused(
        "exchange", "amq.default", user)
    conn.close()


def test_bind_needs_write_on_queue_and_read_on_exchange(sec, make_user, admin):
    q = f"bq-{uuid.uuid4().hex[:6]}"
    admin.queue_declare(q, auto_delete=False)
    admin.exchange_declare("bx-src", "direct")
    # write on the queue but no read on the exchange
    user, pw = make_user(configure="", write=f"^{q}$", read="^nothing$")
    conn = login(sec, user, pw)
    ch = conn.channel()
    assert soft_error(ch.queue_bind, q, "bx-src", "k") == refused("exchange", "bx-src", user)
    conn.close()
    # read on the exchange but no write on the queue
    user2, pw2 = make_user(configure="", write="^nothing$", read="^bx-src$")
    conn = login(sec, user2, pw2)
    ch = conn.channel()
    assert soft_error(ch.queue_bind, q, "bx-src", "k") == refused("queue", q, user2)
    ch = conn.channel()
    assert soft_error(ch.queue_unbind, q, "bx-src", "k") == refused("queue", q, user2)
    conn.close()
    user3, pw3 = make_user(configure="", write=f"^{q}$", read="^bx-src$")
    conn = login(sec, user3, pw3)
    ch = conn.channel()
    ch.queue_bind(q, "bx-src", "k")
    ch.queue_unbind(q, "bx-src", "k")
    conn.close()
    admin.queue_delete(q)
    admin.exchange_delete("bx-src")


def test_exchange_to_exchange_binding_write_destination_read_source(sec, make_user, admin):
    admin.exchange_declare("e2e-src", "fanout")
    admin.exchange_declare("e2e-dst", "fanout")
    user, pw = make_user(configure="", write="^e2e-src$", read="^e2e-src$")
    conn = login(sec, user, pw)
    ch = conn.channel()
    assert soft_error(ch.exchange_bind, "e2e-dst", "e2e-src") == refused(
        "exchange", "e2e-dst", user)
    conn.close()
    user2, pw2 = make_user(configure="", write="^e2e-dst$", read="^e2e-dst$")
    conn = login(sec, user2, pw2)
    ch = conn.channel()
    assert soft_error(ch.exchange_bind, "e2e-dst", "e2e-src") == refused(
        "exchange", "e2e-src", user2)
    conn.close()
    user3, pw3 = make_user(configure="", write="^e2e-dst$", read="^e2e-src$")
    conn = login(sec, user3, pw3)
    conn.channel().exchange_bind("e2e-dst", "e2e-src")
    conn.close()
    admin.exchange_delete("e2e-src")
    admin.exchange_delete("e2e-dst")


def test_consume_get_purge_need_read(sec, make_user, admin):
    q = f"rq-{uuid.uuid4().hex[:6]}"
    admin.queue_declare(q, auto_delete=False)
    admin.basic_publish("", q, b"m")
    user, pw = make_user(configure=".*", write=".*", read="^nothing$")
    conn = login(sec, user, pw)
    for call in (lambda ch: ch.basic_get(q),
                 lambda ch: ch.basic_consume(q, lambda *a: None),
                 lambda ch: ch.queue_purge(q)):
        ch = conn.channel()
        assert soft_error(call, ch) == refused("queue", q, user)
    conn.close()
    admin.queue_delete(q)


def test_alternate_and_dead_letter_exchanges_need_write_on_them(sec, make_user):
    user, pw = make_user(configure=".*", write="^mine", read=".*")
    conn = login(sec, user, pw)
    ch = conn.channel()
    assert soft_error(ch.exchange_declare, "ae-user", "direct",
                      arguments={"alternate-exchange": "amq.fanout"}) == refused(
        "exchange", "amq.fanout", user)
    ch = conn.channel()
    assert soft_error(ch.queue_declare, "dlx-user",
                      arguments={"x-dead-letter-exchange": "amq.direct"}) == refused(
        "exchange", "amq.direct", user)
    ch = conn.channel()
    ch.queue_declare("dlx-user2", exclusive=True,
                     arguments={"x-dead-letter-exchange": "mine-dlx"})
    conn.close()


def test_topic_permissions_on_publish_and_bind(sec, make_user, admin):
    user, pw = make_user()
    sec.call(lambda: users(sec).set_topic_permissions(
        user, "/", "amq.topic", "^{username}\\.", "^public\\."))
    conn = login(sec, user, pw)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("amq.topic", f"{user}.x", b"ok")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_publish("amq.topic", "other.x", b"no")
    assert (info.value.reply_code, info.value.reply_text) == (
        403, f"ACCESS_REFUSED - access to topic 'other.x' in exchange 'amq.topic' in vhost "
             f"'/' refused for user '{user}'")
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, "amq.topic", "public.#")
    code, text = soft_error(ch.queue_bind, q, "amq.topic", "secret.#")
    assert code == 403 and "access to topic 'secret.#' in exchange 'amq.topic'" in text
    # other exchanges (and non-topic ones) are not restricted
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("amq.direct", "other.x", b"ok")
    sec.call(lambda: users(sec).clear_topic_permissions(user, "/"))
    ch.basic_publish("amq.topic", "other.x", b"ok now")
    conn.close()


def test_vhost_access_at_connection_open(sec, make_user):
    sec.call(lambda: sec.broker.add_vhost("sec-vh"))
    user, pw = make_user(vhost="sec-vh")
    login(sec, user, pw, "sec-vh").close()
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        login(sec, user, pw, "/")
    assert f"(530) \"NOT_ALLOWED - access to vhost '/' refused for user '{user}'\"" in str(
        info.value)


def test_wrong_password_and_blank_password_are_refused(sec, make_user):
    user, pw = make_user()
    for bad in ("wrong", ""):
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            login(sec, user, bad)


def test_revoking_takes_effect_on_open_channels(sec, make_user, admin):
    q = f"rv-{uuid.uuid4().hex[:6]}"
    admin.queue_declare(q, auto_delete=False)
    user, pw = make_user()
    conn = login(sec, user, pw)
    ch = conn.channel()
    assert ch.basic_get(q) == (None, None, None)  # cached as allowed
    sec.call(lambda: users(sec).set_permissions(user, "/", ".*", ".*", "^nothing$"))
    assert soft_error(ch.basic_get, q) == refused("queue", q, user)
    ch = conn.channel()
    sec.call(lambda: users(sec).set_permissions(user, "/", *ALL))
    assert ch.basic_get(q) == (None, None, None)
    conn.close()
    admin.queue_delete(q)


def test_impersonator_tag_allows_another_user_id(sec, make_user, admin):
    plain, pw = make_user()
    imp, pw2 = make_user(tags=("impersonator",))
    q = admin.queue_declare("", exclusive=False, auto_delete=True).method.queue
    conn = login(sec, imp, pw2)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("", q, b"x", pika.BasicProperties(user_id="somebody-else"))
    conn.close()
    conn = login(sec, plain, pw)
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.basic_publish("", q, b"x", pika.BasicProperties(user_id="somebody-else"))
    assert info.value.reply_code == 406
    conn.close()
    admin.queue_delete(q)


@pytest.mark.parametrize("algorithm,password,encoded", [
    # a RabbitMQ 3.x export (SHA-256) and a pre-3.6 one (MD5, rabbitmq-discuss 2011-05)
    (SHA256, "1", "y4xPTRVfzXg68sz9ALqeQzARam3CwnGo53xS752cDV5+Utzh"),
    (MD5, "simon", "ytUIm8s3AnKsXQjptplKFytfVxI="),
])
def test_users_from_a_rabbitmq_definitions_file_log_in(sec, algorithm, password, encoded):
    name = f"imp-{uuid.uuid4().hex[:6]}"
    sec.call(lambda: users(sec).add_user(name, password_hash=decode_hash(encoded),
                                         hashing_algorithm=algorithm))
    sec.call(lambda: users(sec).set_permissions(name, "/", *ALL))
    login(sec, name, password).close()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        login(sec, name, password + "x")

    async def aio() -> None:  # the same user through aio-pika
        conn = await aio_pika.connect(host="127.0.0.1", port=sec.port, login=name,
                                      password=password)
        await conn.close()

    asyncio.run(asyncio.wait_for(aio(), 10))
    sec.call(lambda: users(sec).delete_user(name))


def test_sha512_users_and_tags_persist_across_restart(tmp_path):
    b = start_embedded(data_dir=str(tmp_path))
    try:
        b.call(lambda: b.broker.users.add_user("s512", "pw", hashing_algorithm=SHA512,
                                               tags=("monitoring", "policymaker")))
        b.call(lambda: b.broker.users.set_permissions("s512", "/", "^a", "^b", "^c"))
        b.call(lambda: b.broker.users.set_topic_permissions("s512", "/", "amq.topic", "x", "y"))
        b.call(lambda: b.broker.users.set_user_limits("s512", {"max-channels": 3}))
        b.call(lambda: b.broker.users.set_vhost_limits("/", {"max-queues": 100}))
    finally:
        b.stop()
    b = start_embedded(data_dir=str(tmp_path))
    try:
        u = b.call(lambda: b.broker.users.user("s512"))
        assert u.tags == ("monitoring", "policymaker") and u.hashing_algorithm == SHA512
        perms = b.call(lambda: b.broker.users.list_permissions())
        assert [(p.user, p.configure, p.write, p.read) for p in perms if p.user == "s512"] == [
            ("s512", "^a", "^b", "^c")]
        topic = b.call(lambda: b.broker.users.list_topic_permissions())
        assert [(t.exchange, t.write, t.read) for t in topic] == [("amq.topic", "x", "y")]
        assert b.call(lambda: b.broker.users.user_limits) == {"s512": {"max-channels": 3}}
        assert b.call(lambda: b.broker.users.limits_of_vhost("/")) == {"max-queues": 100}
        guest = b.call(lambda: b.broker.users.user("guest"))
        assert guest.tags == ("administrator",)  # RabbitMQ's default_user_tags
        params = pika.ConnectionParameters("127.0.0.1", b.port, "/",
                                           pika.PlainCredentials("s512", "pw"))
        pika.BlockingConnection(params).close()
    finally:
        b.stop()


def test_facade_errors(sec):
    from broker.users import NoSuchUser, NoSuchVhost

    u = users(sec)
    with pytest.raises(NoSuchUser):
        sec.call(lambda: u.set_permissions("nobody", "/", *ALL))
    sec.call(lambda: u.add_user("fe-user", "pw"))
    with pytest.raises(NoSuchVhost):
        sec.call(lambda: u.set_permissions("fe-user", "no-such-vhost", *ALL))
    with pytest.raises(ValueError):
        sec.call(lambda: u.set_permissions("fe-user", "/", "(", ".*", ".*"))
    with pytest.raises(ValueError):
        sec.call(lambda: u.set_user_limits("fe-user", {"max-queues": 1}))
    assert sec.call(lambda: u.delete_user("fe-user")) is True
    assert sec.call(lambda: u.delete_user("fe-user")) is False


def test_aio_pika_permission_refusals(sec, make_user):
    user, pw = make_user(configure="^aio-", write="^amq\\.direct$", read="^aio-")

    async def main() -> None:
        conn = await aio_pika.connect(host="127.0.0.1", port=sec.port, login=user,
                                      password=pw)
        async with conn:
            ch = await conn.channel()
            q = await ch.declare_queue("aio-q", auto_delete=True)
            with pytest.raises(aiormq.exceptions.ChannelAccessRefused) as info:
                await ch.declare_queue("not-mine")
            assert f"access to queue 'not-mine' in vhost '/' refused for user '{user}'" in str(
                info.value)
            ch = await conn.channel()
            x = await ch.get_exchange("amq.direct")
            await x.publish(aio_pika.Message(b"ok"), routing_key="k")
            ch2 = await conn.channel(publisher_confirms=True)
            with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
                await ch2.default_exchange.publish(aio_pika.Message(b"no"), routing_key="aio-q")
            ch3 = await conn.channel()
            q = await ch3.declare_queue("aio-q", passive=True)
            await q.delete()
        wrong = aio_pika.connect(host="127.0.0.1", port=sec.port, login=user, password="bad")
        with pytest.raises(aio_pika.exceptions.ProbableAuthenticationError):
            await wrong

    asyncio.run(asyncio.wait_for(main(), 20))


def test_a_burst_of_failed_logins_costs_the_clients_not_the_broker(sec, make_user):
    """50 concurrent wrong-password logins (aio-pika) all get refused while a good connection
    keeps doing round trips, and the broker forgets every refused connection."""
    user, pw = make_user()
    before = sec.call(lambda: len(sec.broker.connections))

    async def bad() -> None:
        with pytest.raises(aio_pika.exceptions.ProbableAuthenticationError):
            await aio_pika.connect(host="127.0.0.1", port=sec.port, login=user,
                                   password="wrong")

    async def main() -> None:
        good = await aio_pika.connect(host="127.0.0.1", port=sec.port, login=user,
                                      password=pw)
        async with good:
            ch = await good.channel()
            burst = asyncio.gather(*(bad() for _ in range(50)))
            for _ in range(20):  # round trips interleaved with the burst
                await ch.declare_queue(exclusive=True)
            await burst

    asyncio.run(asyncio.wait_for(main(), 30))
    wait_for(lambda: sec.call(lambda: len(sec.broker.connections)) == before, timeout=10)


def test_revoking_write_stops_a_stream_of_alike_publishes(sec, make_user, admin):
    """The channel skips the checks of a publish alike to the last one (issue 15) only
    while permissions and topology stay as they were: revoking write, then deleting the
    exchange, are seen by the very next publish."""
    x = f"rvx-{uuid.uuid4().hex[:6]}"
    admin.exchange_declare(x, "fanout")
    user, pw = make_user()
    conn = login(sec, user, pw)
    ch = conn.channel()
    ch.confirm_delivery()
    for _ in range(3):
        ch.basic_publish(x, "k", b"m")
    sec.call(lambda: users(sec).set_permissions(user, "/", ".*", "^nothing$", ".*"))
    assert soft_error(ch.basic_publish, x, "k", b"m") == refused("exchange", x, user)
    sec.call(lambda: users(sec).set_permissions(user, "/", *ALL))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish(x, "k", b"m")
    admin.exchange_delete(x)
    assert soft_error(ch.basic_publish, x, "k", b"m") == (
        404, f"NOT_FOUND - no exchange '{x}' in vhost '/'")
    conn.close()
