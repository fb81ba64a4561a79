"""Micro-benchmark of exchange routing: µs per `broker.exchange.route()` call.

Run: `python bench/micro/routing.py` from the repository root. Cases: direct (1 queue per
key, 100 keys), fanout to 10 queues, topic with 1000 bindings (cache hit and cache disabled),
headers with 100 bindings, and a direct exchange with an e2e binding and an AE (slow path).
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from broker.exchange import Exchange, route  # noqa: E402
from broker.exchange.topic import TopicRouting  # noqa: E402


def build() -> dict[str, Exchange]:
    xs: dict[str, Exchange] = {}
    d = xs["direct"] = Exchange("direct", "direct")
    for i in range(100):
        d.routing.add_binding(f"q{i}", f"key{i}", {})
    f = xs["fanout"] = Exchange("fanout", "fanout")
    for i in range(10):
        f.routing.add_binding(f"f{i}", "", {})
    t = xs["topic"] = Exchange("topic", "topic")
    nt = xs["topic-nocache"] = Exchange("topic-nocache", "topic", routing=TopicRouting(0))
    for i in range(1000):
        for x in (t, nt):
            x.routing.add_binding(f"t{i}", f"stock.{i % 50}.{'*' if i % 3 else '#'}.x{i}", {})
            if i % 100 == 0:
                x.routing.add_binding(f"t{i}", f"stock.#.x{i}", {})
    h = xs["headers"] = Exchange("headers", "headers")
    for i in range(100):
        h.routing.add_binding(f"h{i}", "", {"x-match": "all", "region": f"r{i % 10}", "n": i})
    s = xs["direct-e2e-ae"] = Exchange(
        "direct-e2e-ae", "direct", arguments={"alternate-exchange": "fanout"}
    )
    s.routing.add_binding(("exchange", "direct"), "key1", {})
    s.routing.add_binding("qs", "key1", {})
    return xs


CASES = [
    ("direct", "key7", None),
    ("fanout", "", None),
    ("topic", "stock.7.a.x7", None),
    ("topic-nocache", "stock.7.a.x7", None),
    ("headers", "", {"region": "r3", "n": 13, "other": "v"}),
    ("direct-e2e-ae", "key1", None),
    ("direct-e2e-ae", "unrouted", None),
]


def main() -> None:
    xs = build()
    for name, key, headers in CASES:
        n = (
            200_000
            if name.startswith(("direct", "fanout", "topic")) and name != "topic-nocache"
            else 20_000
        )
        best = min(
            timeit.repeat(
                lambda name=name, key=key, headers=headers: route(xs, name, key, headers),
                number=n,
                repeat=5,
            )
        )
        result = route(xs, name, key, headers)
        print(f"{name:16} {key!r:16} {best / n * 1e6:8.3f} µs/route  ({len(result)} queues)")
    d = xs["direct"].routing
    best = min(timeit.repeat(lambda: d.route("key7", None), number=200_000, repeat=5))
    print(
        f"{'direct table':16} {'key7':16} {best / 200_000 * 1e6:8.3f} µs/route  (route() of the table alone)"
    )
    best = min(timeit.repeat(lambda: xs.get("direct"), number=200_000, repeat=5))
    print(f"{'dict lookup':16} {'':16} {best / 200_000 * 1e6:8.3f} µs (baseline)")


if __name__ == "__main__":
    main()
