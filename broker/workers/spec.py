"""What a worker process is told when the node process starts it (issue 47).

Owns: `WorkerSpec`, pickled by the node process into a pipe the worker inherits (its file
descriptor is the worker's only argument), and `worker_config`, the configuration a worker
runs with. Talks to: broker/workers/node.py (writes it) and broker/workers/worker.py (reads
it). Must never: hold code beyond deriving those values.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field

from broker.config import BrokerConfig


@dataclass(frozen=True)
class WorkerSpec:
    """Worker `index` of `count`: its configuration, and the file descriptors it inherits:
    `handoff_fd` (accepted connections from the node, broker/workers/handoff.py),
    `control_fd` (its link to the node process) and `peer_fds` (worker index -> its link to
    that worker; one ordered link per pair, broker/workers/link.py)."""

    index: int
    count: int
    config: BrokerConfig
    handoff_fd: int
    control_fd: int
    peer_fds: dict[int, int] = field(default_factory=dict)

    @property
    def is_metadata_owner(self) -> bool:
        """Worker 0 keeps the definitions database and decides every definition change
        (docs/multicore.md "Definitions in one agreed order")."""
        return self.index == 0


def worker_data_dir(config: BrokerConfig, index: int) -> str:
    """Where worker `index` keeps its queues' indexes and message stores: worker 0 the
    single-process layout itself (so going from 1 to N workers keeps every queue), the others
    `<data_dir>/worker-<i>`."""
    return config.data_dir if index == 0 else os.path.join(config.data_dir, f"worker-{index}")


def worker_config(config: BrokerConfig, index: int, port: int,
                  stream: tuple[str, str] = ("", "")) -> BrokerConfig:
    """The node's configuration as worker `index` runs it: its own data directory, the port
    the node accepts on (for server properties and the management API's listeners), and
    the management and Prometheus servers, loading a definitions file and the stream
    protocol in worker 0 only; `stream` is where the node listens for the stream protocol
    (plain, TLS: "host:port", "" when off), which worker 0 serves without binding."""
    changes: dict = {"data_dir": worker_data_dir(config, index), "port": port, "workers": 1,
                     "stream_listeners_tcp_default": stream[0],
                     "stream_listeners_ssl_default": stream[1]}
    if index != 0:  # definitions to load reach the others through worker 0's snapshot
        changes.update(management_tcp_port=0, prometheus_tcp_port=0, load_definitions="",
                       stream_listeners_tcp_default="", stream_listeners_ssl_default="")
    return dataclasses.replace(config, **changes)


def check_placements(config: BrokerConfig) -> None:
    """ValueError when durable queues of this data directory live in a worker that
    `config.workers` does not start (their index and messages are in that worker's
    directory: starting with fewer workers would lose them from view)."""
    path = os.path.join(config.data_dir, "queue_workers.json")
    try:
        with open(path, encoding="utf-8") as f:
            rows = json.load(f)
    except FileNotFoundError:
        return
    needed = max((row[2] for row in rows), default=0) + 1
    if needed > config.workers:
        raise ValueError(f"durable queues in {config.data_dir} live in worker {needed - 1}'s "
                         f"directory: start with workers = {needed} or more (it was "
                         f"{config.workers})")
