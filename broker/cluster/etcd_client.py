"""The etcd client the cluster uses: `aetcd` (asyncio, gRPC) with what its 1.0.0 release
lacks — several endpoints and TLS.

Owns: building the gRPC channel (`ipv4:` targets for several IP endpoints, so gRPC's
pick_first moves to the next one when one is down; TLS credentials from PEM files) and
authenticating with a user and password as aetcd does. Everything else is aetcd's.
Must never: hold keys or cluster logic (broker/cluster/coordinator.py does).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import aetcd  # type: ignore[import-untyped]
from aetcd import rpc, watcher  # type: ignore[import-untyped]


@dataclass(frozen=True)
class EtcdSettings:
    """Where etcd is and how to log in: `endpoints` ["host:port", ...]; `username` and
    `password` ("" for none); TLS PEM files (`cacertfile` set turns TLS on); `timeout` s
    per request."""

    endpoints: tuple[str, ...]
    username: str = ""
    password: str = ""
    cacertfile: str = ""
    certfile: str = ""
    keyfile: str = ""
    timeout: float = 5.0

    @classmethod
    def parse_endpoints(cls, text: str) -> tuple[str, ...]:
        """"h1:2379,h2:2379" (an `http://` prefix is dropped) → ("h1:2379", "h2:2379")."""
        out = []
        for part in text.split(","):
            part = part.strip().removeprefix("http://").removeprefix("https://").rstrip("/")
            if part:
                out.append(part if ":" in part else f"{part}:2379")
        if not out:
            raise ValueError("clustering.etcd_endpoints names no endpoint")
        return tuple(out)


def _target(endpoints: tuple[str, ...]) -> str:
    """One gRPC target for the endpoints: `ipv4:a:p,b:p` when all are IPv4 literals (gRPC
    then fails over between them), else the first (a DNS name resolves to its addresses)."""
    hosts = [e.rsplit(":", 1)[0] for e in endpoints]
    try:
        if all(isinstance(ipaddress.ip_address(h), ipaddress.IPv4Address) for h in hosts):
            return "ipv4:" + ",".join(endpoints)
    except ValueError:
        pass
    return endpoints[0]


class EtcdClient(aetcd.Client):  # type: ignore[misc]
    """aetcd's client over the channel `settings` describe."""

    def __init__(self, settings: EtcdSettings) -> None:
        host, _sep, port = settings.endpoints[0].rpartition(":")
        super().__init__(host=host, port=int(port), username=settings.username or None,
                         password=settings.password or None, timeout=settings.timeout)
        self._settings = settings

    async def connect(self) -> None:
        """Open the channel (TLS when a CA file is set) and log in when a user is set."""
        if self._connected.is_set():
            return
        s = self._settings
        target = _target(s.endpoints)
        options = list(self._options.items())
        if s.cacertfile:
            import grpc  # type: ignore[import-untyped]

            def read(path: str) -> bytes | None:
                if not path:
                    return None
                with open(path, "rb") as f:
                    return f.read()

            creds = grpc.ssl_channel_credentials(read(s.cacertfile), read(s.keyfile),
                                                 read(s.certfile))
            self.channel = rpc.secure_channel(target, creds, options=options)
        else:
            self.channel = rpc.insecure_channel(target, options=options)
        if s.username:
            self.auth_stub = rpc.AuthStub(self.channel)
            resp = await self.auth_stub.Authenticate(
                rpc.AuthenticateRequest(name=s.username, password=s.password),
                timeout=self._timeout)
            self.metadata = (("token", resp.token),)
        self.kvstub = rpc.KVStub(self.channel)
        self.clusterstub = rpc.ClusterStub(self.channel)
        self.leasestub = rpc.LeaseStub(self.channel)
        self.maintenancestub = rpc.MaintenanceStub(self.channel)
        self._watcher = watcher.Watcher(rpc.WatchStub(self.channel), timeout=self._timeout,
                                        metadata=self.metadata)
        self._connected.set()
