"""Run a broker on a background thread with its own event loop.

Owns: one thread, one event loop, one `broker.server.Broker`. Used by tests (pika's blocking
client, PySpark) and by scripts that need a broker in-process. It never touches the broker's
internals; it only starts and stops it.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.server import Broker


class EmbeddedBroker:
    """A broker on 127.0.0.1 (port 0 = ephemeral) served from a daemon thread.

    `start()` blocks until the listener is bound and the broker said it is ready, then
    `port` and `url` are valid. `stop()` shuts it down gracefully (clients get 320
    CONNECTION_FORCED) and joins the thread. Keyword arguments override `BrokerConfig` fields.
    """

    def __init__(self, **overrides: Any) -> None:
        overrides.setdefault("host", "127.0.0.1")
        overrides.setdefault("port", 0)
        # the HTTP API / Prometheus are off unless asked for (-1 = a free port)
        overrides.setdefault("management_tcp_port", 0)
        overrides.setdefault("prometheus_tcp_port", 0)
        self._tmp: tempfile.TemporaryDirectory | None = None  # data_dir when none was given
        if "data_dir" not in overrides:
            self._tmp = tempfile.TemporaryDirectory(prefix="broker-")
            overrides["data_dir"] = self._tmp.name
        self._overrides = overrides
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.broker: Broker | None = None
        self.host: str = overrides["host"]
        self.port: int = 0
        self.ssl_port: int | None = None  # the amqps port when listeners_ssl_default is set
        self.stream_port: int | None = None  # the stream protocol's port when it listens
        self.stream_ssl_port: int | None = None  # its TLS port
        self.management_port: int | None = None  # the HTTP API's port when it is on
        self.prometheus_port: int | None = None  # the Prometheus endpoint's port when on

    @property
    def api_url(self) -> str:
        """Base URL of the management HTTP API, e.g. http://127.0.0.1:PORT (when on)."""
        return f"http://{self.host}:{self.management_port}"

    @property
    def url(self) -> str:
        """AMQP URI for the default user and vhost, e.g. amqp://guest:guest@127.0.0.1:PORT/%2F."""
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"

    def start(self, timeout: float = 30.0) -> EmbeddedBroker:
        self._thread = threading.Thread(target=self._run, name="embedded-broker", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("embedded broker did not become ready")
        if self._error is not None:
            raise RuntimeError("embedded broker failed to start") from self._error
        return self

    def _run(self) -> None:
        from broker.config import BrokerConfig
        from broker.server import Broker

        loop: asyncio.AbstractEventLoop
        try:
            import uvloop

            loop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover - uvloop is a runtime dependency
            loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            self.broker = Broker(BrokerConfig(**self._overrides))
            loop.run_until_complete(self.broker.start())
            self.port = self.broker.port
            self.ssl_port = self.broker.ssl_port
            self.stream_port = self.broker.stream_port
            self.stream_ssl_port = self.broker.stream_ssl_port
            mgmt = self.broker.management
            if mgmt is not None:
                self.management_port = mgmt.port
                self.prometheus_port = mgmt.prometheus_port
        except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(self.broker.stop())
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def call(self, fn: Any, timeout: float = 10.0) -> Any:
        """Run `fn()` (a plain function or a coroutine function) on the broker's loop."""
        assert self._loop is not None

        async def _call() -> Any:
            result = fn()
            if asyncio.iscoroutine(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(_call(), self._loop).result(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        if self._loop is None or self._thread is None:
            return
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        self._loop = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
