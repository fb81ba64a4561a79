"""The broker once `start()` has returned, as the management API and the Prometheus
exporter see it (STYLE §10, docs/architecture.md "Contracts").

Owns: the `StartedBroker` contract only: `ServingBroker[Reader]` plus the shovel and
federation supervisors (built after the listeners), the bound ports, global parameters and
the calls that delete what clients hold. It sits in the operations layer, above the reader
and the supervisors it names and below the management API that holds it;
`broker.server.Broker` implements it. Must never: hold code; import the management API or
the server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from broker.serving import ServingBroker

if TYPE_CHECKING:
    from broker.federation.supervisor import Federation
    from broker.loop_lag import LoopLagProbe
    from broker.message import Message
    from broker.reader import Reader  # noqa: F401  (named as a string in the base below)
    from broker.shovel.supervisor import Shovels
    from broker.stats import MessageStats
    from broker.stream_protocol.reader import StreamListener
    from broker.vhost import VHost


@runtime_checkable
class ReportedChannel(Protocol):
    """A channel of a connection that another worker process serves, as its worker last
    reported it (broker/workers/reports.py): its GET /api/channels JSON without rates, and
    its message counts (rates are computed from them here)."""

    json: dict[str, Any]
    message_stats: MessageStats


@runtime_checkable
class ReportedConnection(Protocol):
    """An AMQP connection that another worker process serves, as its worker last reported
    it (every collect_statistics_interval): its GET /api/connections JSON without rates,
    its byte counters and its open channels. `close(code, text)` asks its worker to send
    connection.close."""

    json: dict[str, Any]  # "name", "user", "vhost" ... as shapes.connection makes them
    recv_oct: int
    send_oct: int
    @property
    def channels(self) -> Mapping[int, ReportedChannel]: ...  # number -> channel

    def close(self, code: int, text: str) -> None: ...


class StartedBroker(ServingBroker["Reader"], Protocol):
    """The broker once `start()` has returned, as the management API, the Prometheus
    exporter and the runtime parameters see it: its shovels and federation (built after the
    listeners) are there too, and so are its bound ports and global parameters.
    `Broker.started()` hands out this view."""

    @property
    def shovels(self) -> Shovels: ...

    @property
    def federation(self) -> Federation: ...

    @property
    def loop_lag(self) -> LoopLagProbe: ...  # the event loop's lag and GC pauses

    @property
    def ssl_port(self) -> int | None: ...  # the bound amqps port, if any

    @property
    def stream(self) -> StreamListener | None: ...  # the stream protocol's listener, when on

    @property
    def stream_port(self) -> int | None: ...  # the stream protocol's port, when it listens

    @property
    def stream_ssl_port(self) -> int | None: ...  # its TLS port, when that listens

    @property
    def global_parameters(self) -> dict[str, Any]: ...  # name -> JSON value

    @property
    def trace_vhosts(self) -> set[str]: ...  # vhosts with the firehose on (broker/trace.py)

    @property
    def deleted_vhosts_stats(self) -> MessageStats: ...  # counts of deleted vhosts

    def vhost_message_stats(self, vhost: VHost) -> MessageStats: ...  # closed + open channels

    @property
    def remote_connections(self) -> Callable[[], list[ReportedConnection]] | None:
        """A multi-worker broker's worker 0: the connections the other workers serve."""

    @property
    def remote_unacked(self) -> Callable[[str, str], Awaitable[list[dict[str, Any]]]] | None:
        """... and the deliveries the other workers' channels hold unacked from a queue."""

    @property
    def remote_delayed(self) -> Callable[[str, str, int],
                                         Awaitable[list[tuple[int, Message]]]] | None:
        """... and what the other workers' holders of a delayed exchange hold."""

    @property
    def process_tree(self) -> int | None:
        """A worker process: the node process, whose tree is the broker (Prometheus's
        process figures sum it)."""

    @property
    def worker_views(self) -> Callable[[], list[dict[str, Any]]] | None:
        """... and every worker's own figures (broker/workers/reports.py worker_view)."""

    def set_global_parameter(self, name: str, value: Any) -> None: ...

    def clear_global_parameter(self, name: str) -> bool: ...

    def add_vhost(self, name: str) -> VHost: ...

    def delete_vhost(self, name: str) -> None: ...

    def delete_user(self, name: str) -> bool: ...
