"""The racks' network links: a TCP fault proxy that really drops or delays a rack's traffic.

Each rack reaches the metadata service only through its own port here, so a fault on a link
acts on the wire: bytes are dropped or held back, the processes on either side see only what a
network would show them. Faults are leases held by this process (see ``chaos/control.py``):
the revert is armed here, on the path, the moment the fault is applied. No root needed.

Faults (their arguments are in ``chaos/catalog.py``): ``blip`` and ``partition`` drop a rack's
bytes (both ways, or one), ``latency`` holds them back, ``loss`` delivers a lost segment one
retransmission timeout (200 ms, doubling) later, as TCP does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
from collections.abc import AsyncIterator
from typing import Any, cast

from aiohttp import web
from prometheus_client import CollectorRegistry

from chaos import catalog
from chaos.control import LeaseRunner, Plan, Recorder, add_fault_routes
from common.auth import from_env, token_middleware
from common.web import BadRequest, LoopLag, base_app, serve

log = logging.getLogger(__name__)
FAULTS = catalog.names("linkproxy")
RTO_S = 0.2


class Link:
    """One rack's path to the metadata service and the faults on it (keyed by lease)."""

    def __init__(self, rack: int, rng: random.Random) -> None:
        self.rack, self.rng = rack, rng
        self.cuts: dict[object, str] = {}
        self.delays: dict[object, tuple[float, float]] = {}
        self.losses: dict[object, float] = {}
        self.connections: set[_Downstream] = set()

    def dropping(self, upstream: bool) -> bool:
        wanted = "to-metadata" if upstream else "from-metadata"
        return any(d in ("both", wanted) for d in self.cuts.values())

    def hold_s(self) -> float:
        """How long the next chunk is held back by latency and loss faults."""
        hold = 0.0
        if self.delays:
            delay, jitter = max(self.delays.values())
            hold += max(0.0, delay + self.rng.uniform(-jitter, jitter))
        p = max(self.losses.values(), default=0.0)
        rto = RTO_S
        while p and self.rng.random() < p and rto < 60:
            hold += rto
            rto *= 2
        return hold

    def heal(self) -> None:
        # Connections that lost bytes are broken streams: reset them, as TCP eventually would.
        if not self.cuts:
            for conn in [c for c in self.connections if c.lost_bytes]:
                conn.transport.abort()


class _Pipe:
    """Writes chunks to one side, in order, each after its link's hold time."""

    def __init__(self, link: Link, transport: asyncio.Transport) -> None:
        self.link, self.transport = link, transport
        self._free_at = 0.0

    def send(self, data: bytes) -> None:
        hold = self.link.hold_s()
        if not hold and not self._free_at:
            self.transport.write(data)
            return
        loop = asyncio.get_running_loop()
        at = max(loop.time() + hold, self._free_at)
        self._free_at = at
        loop.call_at(at, self._write, data, at)

    def _write(self, data: bytes, at: float) -> None:
        if not self.transport.is_closing():
            self.transport.write(data)
        if self._free_at == at:
            self._free_at = 0.0


class _Upstream(asyncio.Protocol):
    def __init__(self, down: _Downstream) -> None:
        self.down = down

    def data_received(self, data: bytes) -> None:
        if self.down.link.dropping(upstream=False):
            self.down.lost_bytes = True
        else:
            self.down.to_rack.send(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.down.transport.close()


class _Downstream(asyncio.Protocol):
    def __init__(self, link: Link, target: tuple[str, int]) -> None:
        self.link, self.target = link, target
        self.to_metadata: _Pipe | None = None
        self.pending: list[bytes] = []
        self.lost_bytes = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a TCP server's transport
        self.to_rack = _Pipe(self.link, self.transport)
        self.link.connections.add(self)
        self._connecting = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await loop.create_connection(lambda: _Upstream(self), *self.target)
        except OSError:
            self.transport.close()
            return
        if self.transport.is_closing():
            transport.close()
            return
        self.upstream = transport
        self.to_metadata = _Pipe(self.link, transport)
        for chunk in self.pending:
            self.to_metadata.send(chunk)
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        if self.link.dropping(upstream=True):
            self.lost_bytes = True
        elif self.to_metadata is not None:
            self.to_metadata.send(data)
        else:
            self.pending.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.connections.discard(self)
        if self.to_metadata is not None:
            self.upstream.close()
        else:
            self._connecting.cancel()


class LinkProxy:
    def __init__(self, target: tuple[str, int], registry: CollectorRegistry, seed: int = 2015) -> None:
        self.target = target
        self.rng = random.Random(seed)
        self.links: dict[int, Link] = {}
        self._servers: list[asyncio.AbstractServer] = []
        self.runner = LeaseRunner(Recorder(registry, FAULTS, "linkproxy"))

    async def open(self, rack: int, host: str, port: int) -> None:
        link = self.links[rack] = Link(rack, self.rng)
        for fault in FAULTS:
            self.runner.recorder.active.labels(fault, f"rack-{rack}").set(0)
        server = await asyncio.get_running_loop().create_server(lambda: _Downstream(link, self.target), host, port, backlog=4096)
        self._servers.append(server)

    async def close(self) -> None:
        self.runner.halt()
        for server in self._servers:
            server.close()
        for link in self.links.values():
            for conn in list(link.connections):
                conn.transport.abort()

    def racks(self, values: dict[str, Any]) -> list[int]:
        racks = values["racks"]
        if not all(r in self.links for r in racks):
            raise BadRequest(f"racks must be among {sorted(self.links)}")
        return racks

    def plan(self, racks: list[int], table: str, value: Any, detail: dict[str, Any]) -> Plan:
        """Put ``value`` into each link's ``table`` for the lease's life."""
        key = object()

        def apply() -> None:
            for r in racks:
                getattr(self.links[r], table)[key] = value

        def revert() -> None:
            for r in racks:
                getattr(self.links[r], table).pop(key, None)
                self.links[r].heal()

        target = ",".join(f"rack-{r}" for r in racks) if len(racks) > 1 else f"rack-{racks[0]}"
        return Plan(target, apply, revert, {"racks": racks, **detail})

    async def blip(self, values: dict[str, Any]) -> Plan:
        return self.plan(self.racks(values), "cuts", "both", {})

    async def partition(self, values: dict[str, Any]) -> Plan:
        direction = values["direction"]
        return self.plan(self.racks(values), "cuts", direction, {"direction": direction})

    async def latency(self, values: dict[str, Any]) -> Plan:
        delay, jitter = values["delay_s"], values["jitter_s"]
        return self.plan(self.racks(values), "delays", (delay, jitter), {"delay_s": delay, "jitter_s": jitter})

    async def loss(self, values: dict[str, Any]) -> Plan:
        p = values["probability"]
        return self.plan(self.racks(values), "losses", p, {"probability": p})


PROXY = web.AppKey("proxy", LinkProxy)


def create_app(target: tuple[str, int], links: dict[int, tuple[str, int]], token: str | None = None) -> web.Application:
    registry = CollectorRegistry()
    lag = LoopLag(registry)
    app = base_app(registry, lag, middlewares=[token_middleware(from_env() if token is None else token)])
    proxy = app[PROXY] = LinkProxy(target, registry)

    async def links_ctx(app: web.Application) -> AsyncIterator[None]:
        for rack, (host, port) in sorted(links.items()):
            await proxy.open(rack, host, port)
        yield
        await proxy.close()

    app.cleanup_ctx.append(links_ctx)
    add_fault_routes(app, proxy.runner, {f: getattr(proxy, f) for f in FAULTS})

    async def status(request: web.Request) -> web.Response:
        now = asyncio.get_running_loop().time()
        return web.json_response({"component": "linkproxy", "faults": proxy.runner.book.active(now), "loop_lag_p99_s": lag.p99(request)})

    app.router.add_get("/status", status)
    return app


def main() -> None:
    """``python -m chaos.linkproxy``, its ports in the environment (the launcher sets them)."""
    host = os.environ.get("STORMLAB_HOST", "127.0.0.1")
    links = {int(rack): (host, port) for rack, port in json.loads(os.environ["STORMLAB_LINK_PORTS"]).items()}
    target = (os.environ.get("STORMLAB_METADATA_HOST", "127.0.0.1"), int(os.environ["STORMLAB_METADATA_PORT"]))
    serve(create_app(target, links), host, int(os.environ["STORMLAB_PORT"]))


if __name__ == "__main__":
    main()
