"""The racks' network links: a TCP fault proxy that can really black-hole a rack's traffic.

Each rack reaches the metadata service only through its own port here. A fault is a lease
held by this process: it black-holes the chosen racks' links (bytes in both directions are
dropped, new connections go nowhere) and its revert is armed here, on the path, the moment it
is applied, so killing the chaos command cannot leave a rack cut off. No root needed.

Control API (JSON):
  POST   /faults  {"fault": "blip", "racks": [0, 1, 2], "duration_s": 5}
  GET    /faults  active faults with the time they have left
  DELETE /faults  halt: revert every fault now
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass, field
from typing import AsyncIterator

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge

from services.common.web import BadRequest, LoopLag, base_app, number, read_object

log = logging.getLogger(__name__)
MAX_DURATION_S = 600.0
FAULTS = ("blip",)


class Link:
    """One rack's path to the metadata service."""

    def __init__(self, rack: int) -> None:
        self.rack = rack
        self.cut = 0  # active leases black-holing this link
        self.connections: set["_Downstream"] = set()

    @property
    def blackholed(self) -> bool:
        return self.cut > 0

    def heal(self) -> None:
        # Connections that lost bytes are broken streams: reset them, as TCP eventually would.
        for conn in [c for c in self.connections if c.lost_bytes]:
            conn.transport.abort()


class _Upstream(asyncio.Protocol):
    def __init__(self, down: "_Downstream") -> None:
        self.down = down

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.down.link.blackholed:
            self.down.lost_bytes = True
        elif not self.down.transport.is_closing():
            self.down.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.down.transport.close()


class _Downstream(asyncio.Protocol):
    def __init__(self, link: Link, target: tuple[str, int]) -> None:
        self.link, self.target = link, target
        self.upstream: asyncio.Transport | None = None
        self.pending: list[bytes] = []
        self.lost_bytes = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
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
        for chunk in self.pending:
            transport.write(chunk)
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        if self.link.blackholed:
            self.lost_bytes = True
        elif self.upstream is not None:
            self.upstream.write(data)
        else:
            self.pending.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.connections.discard(self)
        if self.upstream is not None:
            self.upstream.close()
        else:
            self._connecting.cancel()


@dataclass
class Lease:
    id: int
    fault: str
    racks: list[int]
    ends_at: float
    revert: asyncio.TimerHandle | None = field(default=None, repr=False)


class LinkProxy:
    def __init__(self, target: tuple[str, int], registry: CollectorRegistry) -> None:
        self.target = target
        self.links: dict[int, Link] = {}
        self.leases: dict[int, Lease] = {}
        self._ids = itertools.count(1)
        self._servers: list[asyncio.AbstractServer] = []
        self.active = Gauge("stormlab_chaos_fault_active", "1 while a fault holds a target", ["fault", "target"],
                            registry=registry)
        self.events = Counter("stormlab_chaos_faults_total", "Fault leases by fault and outcome",
                              ["fault", "outcome"], registry=registry)
        for fault in FAULTS:
            for outcome in ("applied", "reverted", "halted"):
                self.events.labels(fault, outcome)

    async def open(self, rack: int, host: str, port: int) -> None:
        link = self.links[rack] = Link(rack)
        self.active.labels("blip", f"rack-{rack}").set(0)
        server = await asyncio.get_running_loop().create_server(
            lambda: _Downstream(link, self.target), host, port, backlog=4096)
        self._servers.append(server)

    async def close(self) -> None:
        for lease in list(self.leases.values()):
            self._end(lease, "halted")
        for server in self._servers:
            server.close()
        for link in self.links.values():
            for conn in list(link.connections):
                conn.transport.abort()

    def apply(self, fault: str, racks: list[int], duration_s: float) -> Lease:
        loop = asyncio.get_running_loop()
        lease = Lease(next(self._ids), fault, racks, loop.time() + duration_s)
        lease.revert = loop.call_at(lease.ends_at, self._end, lease, "reverted")  # armed with the fault
        self.leases[lease.id] = lease
        for rack in racks:
            self.links[rack].cut += 1
            self.active.labels(fault, f"rack-{rack}").set(1)
        self.events.labels(fault, "applied").inc()
        log.info("fault %s #%s on racks %s for %.1fs", fault, lease.id, racks, duration_s)
        return lease

    def halt(self) -> int:
        leases = list(self.leases.values())
        for lease in leases:
            self._end(lease, "halted")
        return len(leases)

    def _end(self, lease: Lease, outcome: str) -> None:
        if self.leases.pop(lease.id, None) is None:
            return
        if lease.revert is not None:
            lease.revert.cancel()
        for rack in lease.racks:
            link = self.links[rack]
            link.cut -= 1
            if not link.blackholed:
                self.active.labels(lease.fault, f"rack-{rack}").set(0)
                link.heal()
        self.events.labels(lease.fault, outcome).inc()
        log.info("fault %s #%s %s", lease.fault, lease.id, outcome)

    def describe(self) -> list[dict]:
        now = asyncio.get_running_loop().time()
        return [{"id": l.id, "fault": l.fault, "racks": l.racks, "left_s": round(max(0.0, l.ends_at - now), 3)}
                for l in self.leases.values()]


PROXY = web.AppKey("proxy", LinkProxy)


def create_app(target: tuple[str, int], links: dict[int, tuple[str, int]]) -> web.Application:
    registry = CollectorRegistry()
    lag = LoopLag(registry)
    app = base_app(registry, lag)
    proxy = app[PROXY] = LinkProxy(target, registry)

    async def links_ctx(app: web.Application) -> AsyncIterator[None]:
        for rack, (host, port) in sorted(links.items()):
            await proxy.open(rack, host, port)
        yield
        await proxy.close()

    app.cleanup_ctx.append(links_ctx)
    app.router.add_post("/faults", apply_fault)
    app.router.add_get("/faults", list_faults)
    app.router.add_delete("/faults", halt_faults)

    async def status(request: web.Request) -> web.Response:
        return web.json_response({"component": "linkproxy", "faults": proxy.describe(), "loop_lag_p99_s": lag.p99()})

    app.router.add_get("/status", status)
    return app


async def apply_fault(request: web.Request) -> web.Response:
    proxy = request.app[PROXY]
    body = await read_object(request)
    if body.get("fault", "blip") not in FAULTS:
        raise BadRequest(f"fault must be one of {', '.join(FAULTS)}")
    racks = body.get("racks")
    if (not isinstance(racks, list) or not racks or len(set(map(repr, racks))) != len(racks)
            or not all(isinstance(r, int) and not isinstance(r, bool) and r in proxy.links for r in racks)):
        raise BadRequest(f"racks must be a list of distinct rack numbers among {sorted(proxy.links)}")
    duration = number(body, "duration_s", 0.001, MAX_DURATION_S)
    lease = proxy.apply("blip", racks, duration)
    return web.json_response({"id": lease.id, "fault": lease.fault, "racks": racks, "duration_s": duration}, status=201)


async def list_faults(request: web.Request) -> web.Response:
    return web.json_response({"faults": request.app[PROXY].describe()})


async def halt_faults(request: web.Request) -> web.Response:
    return web.json_response({"halted": request.app[PROXY].halt()})
