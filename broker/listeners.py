"""What a listener that cannot bind tells the operator: which listener, which address, and
which setting moves it (issue 33: a port already in use used to end `python -m broker` in a
40-line traceback).

Owns: `ListenerError` and the setting that moves each kind of listener. Raised by
`broker/server.py` (AMQP, AMQPS) and `broker/management/app.py` (HTTP API and UI,
Prometheus); `python -m broker` prints it as one line on stderr and exits non-zero. Never
binds a socket itself.
"""

from __future__ import annotations

import errno
import os

AMQP = "AMQP"
AMQPS = "AMQPS (TLS)"
MANAGEMENT = "management API and UI"
PROMETHEUS = "Prometheus"
STREAM = "stream protocol"
STREAM_TLS = "stream protocol (TLS)"
# a cluster leader with several workers: clients a follower carried here, after their
# PROXY line (broker/cluster/proxy.py), handed to a worker like accepted connections
PROXIED_AMQP = "AMQP (proxied)"
PROXIED_HTTP = "http (proxied)"
PROXIED_PROMETHEUS = "prometheus (proxied)"

# listener -> (the setting that changes its port, the one that changes its address); the
# names are those of docs/configuration.md (`--port` is `listeners.tcp.default` in a
# rabbitmq.conf)
_SETTINGS = {
    AMQP: ("--port N (listeners.tcp.default in a rabbitmq.conf)", "--host ADDRESS"),
    AMQPS: ("--set listeners.ssl.default=N", "--set listeners.ssl.default=ADDRESS:N"),
    MANAGEMENT: ("--set management.tcp.port=N (0 turns it off)",
                 "--set management.tcp.ip=ADDRESS"),
    PROMETHEUS: ("--set prometheus.tcp.port=N (0 turns it off)",
                 "--set prometheus.tcp.ip=ADDRESS"),
    STREAM: ("--set stream.listeners.tcp.default=N", "--set stream.listeners.tcp.default=ADDRESS:N"),
    STREAM_TLS: ("--set stream.listeners.ssl.default=N",
                 "--set stream.listeners.ssl.default=ADDRESS:N"),
}
# errors the port setting fixes (another process holds it; below 1024 without privilege);
# anything else (an address this machine does not have) is the address setting's
_PORT_ERRNOS = frozenset({errno.EADDRINUSE, errno.EACCES})


class ListenerError(OSError):
    """`listener` (one of AMQP, AMQPS, MANAGEMENT, PROMETHEUS) could not bind `host:port`
    because of `cause`; `str()` is one line naming all three and the setting to change."""

    def __init__(self, listener: str, host: str, port: int, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror)
        self.listener = listener
        self.host = host
        self.port = port
        reason = os.strerror(cause.errno).lower() if cause.errno else str(cause)
        port_setting, address_setting = _SETTINGS[listener]
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if cause.errno in _PORT_ERRNOS:
            hint = f"give it another port with {port_setting}"
        else:
            hint = f"give it another address with {address_setting}"
        self.message = f"cannot start the {listener} listener on {where}: {reason}; {hint}"

    def __str__(self) -> str:
        return self.message
