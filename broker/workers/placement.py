"""Where each queue's process lives in a multi-worker broker (issue 47, docs/multicore.md
"Queue placement").

Owns: `Placement`: the table (vhost, queue) -> worker index every worker holds alike; the
owner's choice for a new queue (a stream in the owner, an exclusive queue on its
connection's worker, else as the queue's locator says: `locator` reads it from the declare
arguments, the policy and the configuration as RabbitMQ does); the placements
chosen since the last change record (`take_fresh`: a change carries them, so the other
workers take the owner's choice); `queue_workers.json`, the owner's durable record of where
each durable queue's files are. Talks to: broker/workers/runtime.py. Must never: decide
anything in a worker other than the owner.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from broker import replication_hook

OWNER = 0  # the metadata owner: the worker a queue not listed in the file lives in
# what each name means here: on the declaring connection's worker, on the worker with the
# fewest queues (ties to the declaring connection's), on a random live worker. A quorum
# queue's `balanced` and its 3.10 aliases `random` and `least-leaders` all mean balanced
# (rabbit_queue_location:leader_locator0/1)
CLIENT_LOCAL, LEAST_QUEUES, RANDOM = "client-local", "least-queues", "random"
_MEANS = {"client-local": CLIENT_LOCAL, "min-masters": LEAST_QUEUES, "random": RANDOM}
_LEADER_MEANS = {"client-local": CLIENT_LOCAL, "balanced": LEAST_QUEUES,
                 "random": LEAST_QUEUES, "least-leaders": LEAST_QUEUES}


def locator(queue_type: str, arguments: Mapping[str, Any], policy: Mapping[str, Any],
            master_config: str = "", leader_config: str = "") -> str:
    """How a new queue picks its worker: CLIENT_LOCAL, LEAST_QUEUES (the default) or RANDOM.

    A classic queue: the `x-queue-master-locator` argument, else the `queue-master-locator`
    policy key (`policy`: the definition in force), else `master_config`
    (`queue_master_locator`), the first one that names a known locator (an unknown name is
    passed over, as rabbit_queue_master_location_misc:get_location/1 does). A quorum queue:
    the `queue-leader-locator` policy key, else the `x-queue-leader-locator` argument (the
    policy wins: rabbit_queue_type_util:args_policy_lookup with the policy's value), else
    `leader_config` (`queue_leader_locator`). None given: LEAST_QUEUES, RabbitMQ's
    `min-masters` among this broker's workers (RabbitMQ's own default, client-local, would
    put every queue a setup script declares on one worker: docs/multicore.md)."""
    if queue_type == "quorum":
        means = _LEADER_MEANS
        tried = (policy.get("queue-leader-locator"), arguments.get("x-queue-leader-locator"),
                 leader_config)
    else:
        means = _MEANS
        tried = (arguments.get("x-queue-master-locator"), policy.get("queue-master-locator"),
                 master_config)
    for name in tried:
        if isinstance(name, str) and name in means:
            return means[name]
    return LEAST_QUEUES


class Placement:
    """The table and the owner's choices (see the module docstring)."""

    def __init__(self) -> None:
        self.placed: dict[tuple[str, str], int] = {}  # (vhost, queue) -> worker
        self._fresh: dict[tuple[str, str], int] = {}  # the owner: chosen since take_fresh
        self._file: str | None = None  # the owner's queue_workers.json

    def choose(self, key: tuple[str, str], fixed: int | None, origin: int,
               live: Iterable[int], how: str = LEAST_QUEUES) -> int:
        """The owner places new queue `key`: on `fixed` when given (a stream's worker, an
        exclusive queue's connection's), else as `how` (from `locator`) says: CLIENT_LOCAL
        on `origin` (the declaring connection's worker) while it is live, RANDOM on any
        worker of `live`, LEAST_QUEUES on the worker of `live` with the fewest queues, ties
        to `origin`, then the lowest index."""
        live = set(live)
        if fixed is not None:
            worker = fixed
        elif how == CLIENT_LOCAL and origin in live:
            worker = origin
        elif how == RANDOM:
            worker = random.choice(sorted(live))
        else:
            counts = dict.fromkeys(live, 0)
            for w in self.placed.values():
                if w in counts:
                    counts[w] += 1
            worker = min(counts, key=lambda w: (counts[w], w != origin, w))
        self.placed[key] = worker
        self._fresh[key] = worker
        return worker

    def take_fresh(self) -> dict[tuple[str, str], int]:
        """The placements chosen since the last call."""
        fresh, self._fresh = self._fresh, {}
        return fresh

    def load(self, data_dir: str, count: int) -> None:
        """The owner, before recovery: where each durable queue's files are (a queue not
        listed was declared by a single-process broker: worker 0, whose directory is the
        single-process layout; one of a worker this start does not run goes to worker 0,
        which spec.check_placements refused beforehand unless it is empty)."""
        self._file = os.path.join(data_dir, "queue_workers.json")
        try:
            with open(self._file, encoding="utf-8") as f:
                rows = json.load(f)
        except FileNotFoundError:
            return
        for vhost, name, worker in rows:
            self.placed[(vhost, name)] = worker if worker < count else OWNER

    def save(self, durable: Callable[[str, str], bool]) -> None:
        """Write where every queue `durable(vhost, name)` says to keep lives (atomically:
        a temporary file renamed). Nothing before `load`."""
        if self._file is None:
            return
        rows = [[vhost, name, worker] for (vhost, name), worker in self.placed.items()
                if durable(vhost, name)]
        data = json.dumps(rows).encode()
        tmp = self._file + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._file)
        replication_hook.replaced(self._file, data)  # a cluster's followers keep it too
