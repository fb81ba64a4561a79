# Owns: the broker's dynamic shovels: the `shovel` runtime parameters (validated, stored in
# the definitions database) and one running link per parameter.
# Talked to by: broker/server.py (start at boot, stop at shutdown), the management API
# (/api/parameters/shovel, /api/shovels), definitions import/export.
# Must never: block the loop or let a link's failure reach the broker.
"""Dynamic shovels (rabbitmq.com/shovel-dynamic.html): a `shovel` runtime parameter per
vhost and name; setting it starts (or restarts) its link, clearing it stops the link, and
every stored parameter's link starts again at boot (rabbit_shovel_dyn_worker_sup_sup).
Static shovels (rabbitmq.com/shovel-static.html) come from the configuration file
(broker/shovel/static.py) and run from boot to shutdown."""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from typing import TYPE_CHECKING, Any

from broker.definitions import ParameterDef
from broker.shovel import definition
from broker.shovel.link import ShovelLink

if TYPE_CHECKING:
    from broker.reader import Reader
    from broker.serving import ServingBroker

log = logging.getLogger("broker.shovel")
COMPONENT = "shovel"


class Shovels:
    """The shovels of `broker` (a broker.server.Broker: its definitions, port, config)."""

    def __init__(self, broker: ServingBroker[Reader]) -> None:
        self.broker = broker
        self.links: dict[tuple[str, str], ShovelLink] = {}
        self._stopping: set[asyncio.Task[None]] = set()

    def start_all(self) -> None:
        """Boot: a link for every static shovel of the configuration and every stored
        shovel parameter (a parameter with a static shovel's name is left out)."""
        for d in getattr(self.broker.config, "shovels", ()):
            self._start(d.vhost, d.name, None, d)
        for p in self.broker.definitions.list_parameters():
            if (p.component == COMPONENT and not definition.validate(p.value)
                    and (p.vhost, p.name) not in self.links):
                self._start(p.vhost, p.name, p.value)

    def set(self, vhost: str, name: str, value: Any) -> list[str]:
        """Validate and store the parameter, (re)start its link. Returns the validation
        errors (nothing changed then); a static shovel's name is refused."""
        errs = definition.validate(value)
        if errs:
            return errs
        link = self.links.get((vhost, name))
        if link is not None and link.d.static:
            return [f"a static shovel named {name} exists (configuration file)"]
        self.broker.definitions.set_parameter(ParameterDef(vhost, COMPONENT, name, value))
        self._stop_soon((vhost, name))
        self._start(vhost, name, value)
        return []

    def clear(self, vhost: str, name: str) -> bool:
        """Delete the parameter and stop its link; False when there was none (a static
        shovel is not a parameter: it stays)."""
        link = self.links.get((vhost, name))
        if link is not None and link.d.static:
            return False
        self._stop_soon((vhost, name))
        return self.broker.definitions.clear_parameter(vhost, COMPONENT, name)

    def clear_vhost(self, vhost: str) -> None:
        """The vhost is being deleted: stop its links (its parameters go with it)."""
        for key in [k for k in self.links if k[0] == vhost]:
            self._stop_soon(key)

    async def restart(self, vhost: str, name: str) -> bool:
        """Stop the link and start it again from its stored parameter; False when there is
        no such shovel (rabbit_shovel_util:restart_shovel)."""
        link = self.links.pop((vhost, name), None)
        if link is None:
            return False
        await link.stop()
        self._start(vhost, name, None, link.d)
        return True

    def status(self, vhost: str | None = None) -> list[dict[str, Any]]:
        node = self.broker.node_name()
        return [link.status(node) for (v, _n), link in sorted(self.links.items())
                if vhost is None or v == vhost]

    async def stop_all(self) -> None:
        links = list(self.links.values())
        self.links.clear()
        await asyncio.gather(*(link.stop() for link in links), *self._stopping,
                             return_exceptions=True)

    # -- internals ---------------------------------------------------------------------------
    def _start(self, vhost: str, name: str, value: Any,
               parsed: definition.ShovelDef | None = None) -> None:
        d = parsed or definition.parse(vhost, name, value)
        link = ShovelLink(d, self._resolve, self.broker.cluster_name(),
                          lambda: self._finished(vhost, name))
        self.links[(vhost, name)] = link
        link.start()

    def _stop_soon(self, key: tuple[str, str]) -> None:
        link = self.links.pop(key, None)
        if link is not None:
            task = asyncio.get_running_loop().create_task(link.stop())
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    def _finished(self, vhost: str, name: str) -> None:
        """delete-after reached: the shovel deletes itself, as RabbitMQ's does."""
        log.info("shovel '%s' in vhost '%s' moved its delete-after count: deleted", name, vhost)
        self.links.pop((vhost, name), None)
        if self.broker.definitions is not None:  # None once the broker has stopped
            self.broker.definitions.clear_parameter(vhost, COMPONENT, name)

    def _resolve(self, uri: str) -> str:
        """A host-less URI (`amqp://`, `amqp:///vhost`) is this broker, reached over
        loopback as `default_user` (see broker/shovel/definition.py)."""
        u = urllib.parse.urlparse(uri)
        if u.hostname:
            return uri
        cfg = self.broker.config
        vhost = urllib.parse.unquote(u.path[1:]) if len(u.path) > 1 else "/"
        user = urllib.parse.quote(cfg.default_user, safe="")
        password = urllib.parse.quote(cfg.default_pass, safe="")
        return (f"amqp://{user}:{password}@127.0.0.1:{self.broker.port}/"
                f"{urllib.parse.quote(vhost, safe='')}")
