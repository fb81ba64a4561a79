# bench/scenarios.py — the named scenarios, in one place.
#
# Owns: the presets `s1`, `s2`, `paper`, `fanout`, `backlog` as Scenario values.
# Talks to: bench.__main__ (run --scenario, compare --scenario), tests.
# Must never: hold anything but data; a preset is overridden by explicit CLI options.
"""Named scenarios (queue names are generated per run, so runs never see each other's data).

- ``s1``: 1 producer / 1 consumer, 16 B transient, no confirms, auto-ack.
- ``s2``: as s1 with confirms (window 200) and manual acks (prefetch 200, ack every 50).
- ``paper``: the paper's experiment per queue (seed 000): 2 producers × 2 channels and
  3 consumers × 3 channels, 1500 B persistent, confirms (window 200) and acks (prefetch 200),
  durable direct exchange; 1 queue by default (``--queue-pattern-to N`` for N queues).
- ``fanout``: 1 producer -> fanout exchange -> 10 queues × 1 consumer, 1 KB.
- ``backlog``: 200 000 × 1 KB persistent with no consumer (confirms, window 500), then drain.
"""

from __future__ import annotations

import uuid

from bench.options import Scenario


def named(name: str) -> Scenario:
    """The preset called ``name`` (KeyError lists the known names)."""
    run = uuid.uuid4().hex[:8]
    presets = {
        "s1": Scenario(name="s1", queue=f"bench-s1-{run}", exchange="", size=16,
                       auto_ack=True, time=10),
        "s2": Scenario(name="s2", queue=f"bench-s2-{run}", exchange="", size=16, confirm=200,
                       prefetch=200, multi_ack_every=50, time=10),
        "paper": Scenario(name="paper", queue_pattern=f"bench-paper-{run}-%d",
                          queue_pattern_from=1, queue_pattern_to=1,
                          exchange=f"bench-paper-{run}", exchange_type="direct",
                          exchange_durable=True, producers=2, producer_channel_count=2,
                          consumers=3, consumer_channel_count=3, size=1500,
                          flags=("persistent",), confirm=200, prefetch=200, time=10),
        "fanout": Scenario(name="fanout", exchange=f"bench-fanout-{run}", exchange_type="fanout",
                           producers=1, consumers=10, size=1024, time=10),
        "backlog": Scenario(name="backlog", queue=f"bench-backlog-{run}", exchange="",
                            size=1024, flags=("persistent",), confirm=500, pmessages=200_000,
                            time=0, consume_after_publish=True, prefetch=500,
                            multi_ack_every=100),
    }
    if name not in presets:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(presets)}")
    return presets[name]


NAMES = ("s1", "s2", "paper", "fanout", "backlog")
