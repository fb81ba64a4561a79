"""The broker as the code that runs once its listeners accept connections sees it: the
reader, admission, and the shovel and federation supervisors (STYLE §10,
docs/architecture.md "Contracts").

Owns: the `ServingBroker` contract only. It sits in the connection layer, above the vhosts
it hands out and below the reader and the supervisors that hold it; `broker.server.Broker`
implements it. The connections it registers are of a type parameter (the reader names
itself: `ServingBroker[Reader]`), so this module never imports the reader that implements
the connections. Must never: hold code; import the reader, the supervisors or the server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    import asyncio

    from broker.alarms import Alarms, ResourceMonitor
    from broker.config import BrokerConfig
    from broker.definitions import Definitions
    from broker.stats import AuthAttempts, Churn
    from broker.users import Users
    from broker.vhost import VHost

ConnT = TypeVar("ConnT")  # the connection type the broker registers (broker.reader.Reader)


class ServingBroker(Protocol[ConnT]):
    """The broker (broker.server.Broker) as the code that runs once its listeners accept
    connections sees it: the reader, admission, the shovel and federation supervisors.
    `Broker.start()` sets its loop, opens the definitions database and builds `users` and
    `resources` before it binds a listener, so here they are not None (`Broker` types them
    Optional because they are None until then); `Broker.serving()` hands out this view.
    `stop()` closes the definitions database last and sets it back to None: code that can
    run after that (a shovel's delete-after callback) still checks."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def vhosts(self) -> dict[str, VHost]: ...  # name -> vhost

    @property
    def connections(self) -> set[ConnT]: ...  # live connections

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

    def connection_opened(self, conn: ConnT) -> None: ...  # connection.open-ok was sent

    def connections_elsewhere(self, vhost: str, username: str) -> tuple[int, int, int]:
        """Open connections other worker processes serve: (all, in `vhost`, of `username`)."""

    def channels_elsewhere(self, username: str) -> int:
        """Open channels of `username` other worker processes serve (max-channels)."""

    def channels_changed(self, username: str) -> None: ...  # one of its channels opened/closed

    def connection_gone(self, conn: ConnT) -> None: ...
