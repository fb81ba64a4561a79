"""GET /api/overview under churn: its message_stats totals never fall and no rate is
negative while vhosts, connections and channels that carried messages come and go (issue 46
point 7: rabbit-hole's overview test once read `deliver_details.rate` = -0.2 here). RabbitMQ
3.10.8 keeps a closed channel's and a deleted vhost's counts in the overview's totals
(rabbit_mgmt_db sums per-vhost samples that outlive the objects)."""

from __future__ import annotations

import threading
import time
import uuid
from urllib.parse import quote

import pika
import pytest

from tests.ops.conftest import EXTERNAL


def _churn(api, broker, stop: threading.Event, errors: list[BaseException]) -> None:
    """Until `stop`: a fresh vhost, a connection publishing, consuming and getting a few
    messages there on two channels (closed one by one), then the vhost deleted with its
    connection still open."""
    try:
        while not stop.is_set():
            vhost = f"churn-{uuid.uuid4().hex[:8]}"
            assert api.put(f"/api/vhosts/{vhost}").status_code in (201, 204)
            api.put(f"/api/permissions/{vhost}/guest",
                    json={"configure": ".*", "write": ".*", "read": ".*"})
            params = pika.URLParameters(broker.url.rsplit("/", 1)[0] + "/" + quote(vhost, safe=""))
            conn = pika.BlockingConnection(params)
            ch = conn.channel()
            ch.queue_declare("q")
            for i in range(5):
                ch.basic_publish("", "q", b"m%d" % i)
            got = 0
            for method, _, _ in ch.consume("q", inactivity_timeout=2):
                if method is None:
                    break
                ch.basic_ack(method.delivery_tag)
                got += 1
                if got == 4:
                    break
            ch.cancel()
            ch2 = conn.channel()
            ch2.basic_get("q", auto_ack=True)
            ch.close()  # one channel closed by the client, the other goes with the vhost
            assert api.delete(f"/api/vhosts/{vhost}").status_code == 204
            try:
                conn.close()
            except pika.exceptions.AMQPError:
                pass  # the broker closed it: 320 CONNECTION_FORCED
    except BaseException as exc:  # noqa: BLE001  (reported by the test)
        errors.append(exc)


@pytest.mark.skipif(EXTERNAL, reason="reads rates every 0.2 s, the test broker's interval")
def test_overview_totals_never_fall_and_rates_are_never_negative(api, broker):
    stop, errors = threading.Event(), []
    worker = threading.Thread(target=_churn, args=(api, broker, stop, errors))
    worker.start()
    last: dict[str, int] = {}
    negatives: list[tuple[str, float]] = []
    falls: list[tuple[str, int, int]] = []
    try:
        deadline = time.monotonic() + 6.0  # 30 samples at the test broker's 0.2 s
        while time.monotonic() < deadline and not errors:
            stats = api.get("/api/overview").json()["message_stats"]
            for name, value in stats.items():
                if name.endswith("_details"):
                    if value["rate"] < 0:
                        negatives.append((name, value["rate"]))
                elif name in last and value < last[name]:
                    falls.append((name, last[name], value))
                else:
                    last[name] = value
            time.sleep(0.05)
    finally:
        stop.set()
        worker.join(30)
    assert not errors, errors
    assert last.get("deliver", 0) >= 4 and last.get("get_no_ack", 0) >= 1, last
    assert not falls, falls
    assert not negatives, negatives
