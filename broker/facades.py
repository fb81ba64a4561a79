"""What one process looks like to another: the façades between the broker's processes,
as `typing.Protocol`s (STYLE §10, ARCHITECTURE §1).

Owns: the contracts only. A queue process holds publishing channels as `ChannelFacade`s
(confirms, credit, cancel notifications, deliveries) and its vhost as a `QueueVHost`; a
channel gets a basic.publish from the reader as a `ContentCommand`. The
concrete classes (`ChannelProcess`, `VHost`) satisfy them structurally and never import
this module at runtime; neither does anything here import them at runtime (no import
circles, STYLE §9). Must never: hold code; every name here is for type checkers.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio

    from broker.alarms import Alarms, ResourceMonitor
    from broker.config import BrokerConfig
    from broker.confirms import LiteRef
    from broker.consumers import Consumer
    from broker.definitions import Definitions
    from broker.federation.supervisor import Federation
    from broker.message import Message
    from broker.protocol.framing import ContentHeader
    from broker.queue_process import QueueProcess
    from broker.reader import Reader
    from broker.shovel.supervisor import Shovels
    from broker.stats import AuthAttempts, Churn
    from broker.users import Users
    from broker.vhost import VHost


class ChannelFacade(Hashable, Protocol):
    """A channel as queue processes and confirm strategies see it (broker/channel.py's
    "façade for queue processes"). Hashable: queues key per-channel credit and owed
    confirms by it."""

    @property
    def conn(self) -> Reader: ...  # its connection (consumer listings name it)

    @property
    def number(self) -> int: ...  # channel number on the wire

    def cast(self, msg: Any) -> None:
        """Put `msg` in the channel's mailbox: ("confirm" | "reject", queue, [msg_seq_no]),
        or (QUEUE_GONE, queue) from an ack-lite queue being deleted."""

    def can_deliver(self, no_ack: bool) -> bool:
        """May a queue send one more delivery now (limiter, state, socket backpressure)?"""

    def deliver(self, queue: QueueProcess, consumer: Consumer, message: Message,
                redelivered: bool, ack_tag: int | LiteRef | None) -> None:
        """basic.deliver `message` to `consumer`; `ack_tag` None for a no-ack consumer."""

    def grant_credit(self, queue: QueueProcess, n: int) -> None:
        """`queue` handled `n` more of this channel's publishes (credit flow)."""

    def consumer_cancelled(self, queue: QueueProcess, tag: str) -> None:
        """`queue` went away under consumer `tag` (basic.cancel if the client asked)."""


class QueueVHost(Protocol):
    """The vhost as its queue processes see it: its name (for log lines and errors),
    routing dead-lettered copies, and deleting a queue (auto-delete, x-expires)."""

    @property
    def name(self) -> str: ...

    def route_keys(self, exchange_name: str, keys: list[str], headers: dict[str, Any] | None,
                   message: Message | None = None) -> list[QueueProcess]: ...

    def delete_queue_now(self, queue: QueueProcess) -> int: ...


class ContentCommand(Protocol):
    """A content method (basic.publish) as the reader hands it to its channel: the
    assembler's (or the decoder's) `Command`, whose header is always set for a content
    method (`Command.header` is None only for the others)."""

    @property
    def method(self) -> Any: ...  # the pamqp method (commands.Basic.Publish)

    @property
    def header(self) -> ContentHeader: ...

    @property
    def body(self) -> bytes | None: ...


class ServingBroker(Protocol):
    """The broker (broker.server.Broker) as the code that runs once its listeners accept
    connections sees it: the reader, admission, the shovel and federation supervisors.
    `Broker.start()` sets its loop, opens the definitions database and builds `users` and
    `resources` before it binds a listener, so here they are not None (`Broker` types them Optional because they
    are None until then); `Broker.serving()` hands out this view. `stop()` closes the
    definitions database last and sets it back to None: code that can run after that (a
    shovel's delete-after callback) still checks."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def vhosts(self) -> dict[str, VHost]: ...  # name -> vhost

    @property
    def connections(self) -> set[Reader]: ...  # live connections

    @property
    def port(self) -> int: ...  # the AMQP port (the bound one once listening)

    @property
    def definitions(self) -> Definitions: ...

    @property
    def users(self) -> Users: ...

    @property
    def resources(self) -> ResourceMonitor: ...  # memory/disk checks

    @property
    def churn(self) -> Churn: ...

    @property
    def alarms(self) -> Alarms: ...

    @property
    def auth_attempts(self) -> AuthAttempts: ...

    def check_user(self, username: str, password: str, peer: Any) -> bool: ...

    def loopback_allowed(self, username: str, peer: Any) -> bool: ...

    def node_name(self) -> str: ...

    def cluster_name(self) -> str: ...

    def server_properties(self) -> dict[str, Any]: ...

    def connection_gone(self, conn: Reader) -> None: ...


class StartedBroker(ServingBroker, Protocol):
    """The broker once `start()` has returned, as the management API, the Prometheus
    exporter and the runtime parameters see it: its shovels and federation (built after the
    listeners) are there too, and so are its bound ports and global parameters.
    `Broker.started()` hands out this view."""

    @property
    def shovels(self) -> Shovels: ...

    @property
    def federation(self) -> Federation: ...

    @property
    def ssl_port(self) -> int | None: ...  # the bound amqps port, if any

    @property
    def global_parameters(self) -> dict[str, Any]: ...  # name -> JSON value

    @property
    def trace_vhosts(self) -> set[str]: ...  # vhosts with the firehose on (broker/trace.py)

    def set_global_parameter(self, name: str, value: Any) -> None: ...

    def clear_global_parameter(self, name: str) -> bool: ...

    def add_vhost(self, name: str) -> VHost: ...

    def delete_vhost(self, name: str) -> None: ...

    def delete_user(self, name: str) -> bool: ...
