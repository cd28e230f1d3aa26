"""The lab's network links: a TCP fault proxy that really drops or delays traffic.

Each rack reaches the metadata service only through its own port here, and each of the
cascade's services reaches each rack through a port of its own, so a fault on a link acts on
the wire: bytes are dropped or held back, the processes on either side see only what a network
would show them. Faults are leases held by this process (see ``chaos/control.py``): the revert
is armed here, on the path, the moment the fault is applied. No root needed.

Faults (their arguments are in ``chaos/catalog.py``): ``blip`` and ``partition`` drop a rack's
bytes to and from the metadata service (both ways, or one), ``latency`` holds them back,
``loss`` delivers a lost segment one retransmission timeout (200 ms, doubling) later, as TCP
does; ``isolate`` drops a service's bytes to and from racks.

Each lease counts what it did on the wire (bytes dropped, held back, or lost and re-sent), so a
fault that met no traffic says so when it ends ("no effect") instead of passing for a blip.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import random
from collections.abc import AsyncIterator, Iterable
from typing import Any, cast

from aiohttp import web
from prometheus_client import CollectorRegistry

from chaos import catalog
from chaos.control import LEASE_SCHEMA, LeaseRunner, Plan, Recorder, add_fault_routes
from chaos.kernel_link import KernelLinks, available, cut, detour, reset_requests
from stormcore import openapi
from stormcore.auth import from_env, token_middleware
from stormcore.openapi import LAG_WINDOW, Answer, Operation
from stormcore.web import BadRequest, LoopLag, base_app, serve

log = logging.getLogger(__name__)
FAULTS = catalog.names("linkproxy")
RTO_S = 0.2
STALLED_S = 30.0  # a stalled connection nobody closes is given up after this (TCP retries for minutes; the lab's clients for 1 s)
EFFECT_WORDS = {"cuts": "dropped_bytes", "delays": "delayed_bytes", "losses": "lost_bytes"}  # what each kind of fault counts


class Link:
    """One path (a rack's to the metadata service, or a service's to a rack) and the faults on it
    (keyed by lease); "to-metadata" is the direction from the side that connects."""

    def __init__(self, rack: int, rng: random.Random) -> None:
        self.rack, self.rng = rack, rng
        self.cuts: dict[object, str] = {}
        self.delays: dict[object, tuple[float, float]] = {}
        self.losses: dict[object, float] = {}
        self.acted: dict[object, int] = {}  # lease key -> bytes it dropped or held back on this link
        self.connections: set[_Downstream] = set()

    def _count(self, keys: Iterable[object], size: int) -> None:
        for key in keys:
            self.acted[key] = self.acted.get(key, 0) + size

    def drops(self, upstream: bool, size: int) -> bool:
        """Whether a chunk of ``size`` bytes going this way is dropped (counted to the cuts that drop it)."""
        wanted = "to-metadata" if upstream else "from-metadata"
        cutting = [key for key, d in self.cuts.items() if d in ("both", wanted)]
        self._count(cutting, size)
        return bool(cutting)

    def hold_s(self, size: int) -> float:
        """How long the next chunk (``size`` bytes) is held back by latency and loss faults."""
        hold = 0.0
        if self.delays:
            delay, jitter = max(self.delays.values())
            hold += max(0.0, delay + self.rng.uniform(-jitter, jitter))
            self._count(self.delays, size)
        p = max(self.losses.values(), default=0.0)
        rto = RTO_S
        while p and self.rng.random() < p and rto < 60:
            hold += rto
            rto *= 2
        if rto > RTO_S:  # lost at least once: re-sent after its retransmission timeouts
            self._count(self.losses, size)
        return hold

    def release(self) -> None:
        """Close every connection on this path once what it holds back is written: a detour's
        end (link_cut=kernel), the rack's client taking its next request through the kernel."""
        for conn in list(self.connections):
            conn.close_when_drained()

    def heal(self) -> None:
        """The link carries bytes again, but a connection that lost bytes stays stalled (nothing
        more goes through it either way, as over a real network nothing past a lost segment is
        delivered until it is sent again, which this proxy never does) until an end gives up on
        it: the request in flight on it runs to its deadline, as through the kernel's DROP rules.
        Nothing is reset at the heal (a network that heals resets nothing): resetting made every
        blipped node retry at the same instant, a herd sharper than any network gives
        (docs/profile.md). One that nobody closes is given up after STALLED_S, as TCP gives up."""
        if not self.cuts:
            loop = asyncio.get_running_loop()
            for conn in [c for c in self.connections if c.lost_bytes]:
                loop.call_later(STALLED_S, conn.transport.abort)


class _Pipe:
    """Writes chunks to one side, in order, each after its link's hold time."""

    def __init__(self, link: Link, transport: asyncio.Transport) -> None:
        self.link, self.transport = link, transport
        self.free_at = 0.0

    def send(self, data: bytes) -> None:
        hold = self.link.hold_s(len(data))
        if not hold and not self.free_at:
            self.transport.write(data)
            return
        loop = asyncio.get_running_loop()
        at = max(loop.time() + hold, self.free_at)
        self.free_at = at
        loop.call_at(at, self._write, data, at)

    def _write(self, data: bytes, at: float) -> None:
        if not self.transport.is_closing():
            self.transport.write(data)
        if self.free_at == at:
            self.free_at = 0.0


class _Upstream(asyncio.Protocol):
    def __init__(self, down: _Downstream) -> None:
        self.down = down

    def data_received(self, data: bytes) -> None:
        if self.down.lost_bytes:  # stalled: nothing past a lost byte is delivered
            return
        if self.down.link.drops(upstream=False, size=len(data)):
            self.down.lost_bytes = True
        else:
            self.down.to_rack.send(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.down.transport.close()


class _Downstream(asyncio.Protocol):
    def __init__(self, link: Link, target: tuple[str, int]) -> None:
        self.link, self.target = link, target
        self.onward: _Pipe | None = None  # to the target, once connected
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
        self.onward = _Pipe(self.link, transport)
        for chunk in self.pending:
            self.onward.send(chunk)
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        if self.lost_bytes:  # stalled: nothing past a lost byte is delivered
            return
        if self.link.drops(upstream=True, size=len(data)):
            self.lost_bytes = True
        elif self.onward is not None:
            self.onward.send(data)
        else:
            self.pending.append(data)

    def close_when_drained(self) -> None:
        """Close once neither way holds bytes back (a request or answer still delayed is delivered)."""
        busy = max(self.to_rack.free_at, self.onward.free_at if self.onward is not None else 0.0)
        if not busy:
            self.transport.close()
            return
        asyncio.get_running_loop().call_at(busy + 0.001, self.close_when_drained)

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.connections.discard(self)
        if self.onward is not None:
            self.upstream.close()
        else:
            self._connecting.cancel()


class LinkProxy:
    def __init__(self, target: tuple[str, int], registry: CollectorRegistry, seed: int = 2015, kernel: KernelLinks | None = None) -> None:
        self.target = target
        self.kernel = kernel  # the racks' links carried and cut by the kernel (link_cut=kernel), else by this proxy
        self.link_ports: dict[int, int] = {}  # rack -> its link's port
        self._redirects: dict[int, tuple[str, int]] = {}  # link port -> the metadata service it leads to
        self._leases = itertools.count(1)
        self._detours: dict[int, int] = {}  # rack -> the latencies holding its link through this proxy (link_cut=kernel)
        self.rng = random.Random(seed)
        self.links: dict[int, Link] = {}  # rack -> its path to the metadata service
        self.paths: dict[tuple[str, int], Link] = {}  # (service, rack) -> the service's path to the rack
        self._servers: list[asyncio.AbstractServer] = []
        self.runner = LeaseRunner(Recorder(registry, FAULTS, "linkproxy"))

    async def open(self, rack: int, host: str, port: int, target: tuple[str, int] | None = None) -> None:
        """``rack``'s path to the metadata service (``target``: its cell's, if not the proxy's)."""
        link = self.links[rack] = Link(rack, self.rng)
        self.link_ports[rack] = port
        for fault in FAULTS:
            if fault != "isolate":
                self.runner.recorder.active.labels(fault, f"rack-{rack}").set(0)
        if self.kernel is not None:  # the kernel carries it: its redirect goes in with the others (install)
            self._redirects[port] = target or self.target
        await self._listen(link, host, port, target or self.target)  # in the kernel's case, for a latency's detour

    def install(self) -> None:
        """The racks' links in the kernel, once every link is opened (link_cut=kernel)."""
        if self.kernel is not None:
            self.kernel.install(self._redirects)

    async def open_path(self, service: str, rack: int, host: str, port: int, rack_address: tuple[str, int]) -> None:
        """``service``'s path to ``rack``: it listens on ``port`` and leads to ``rack_address``."""
        link = self.paths[(service, rack)] = Link(rack, self.rng)
        self.runner.recorder.active.labels("isolate", service).set(0)
        await self._listen(link, host, port, rack_address)

    async def _listen(self, link: Link, host: str, port: int, target: tuple[str, int]) -> None:
        server = await asyncio.get_running_loop().create_server(lambda: _Downstream(link, target), host, port, backlog=4096)
        self._servers.append(server)

    async def close(self) -> None:
        self.runner.halt()
        if self.kernel is not None:
            self.kernel.remove()
        for server in self._servers:
            server.close()
        for link in [*self.links.values(), *self.paths.values()]:
            for conn in list(link.connections):
                conn.transport.abort()

    def racks(self, values: dict[str, Any]) -> list[int]:
        racks = values["racks"]
        if not all(r in self.links for r in racks):
            raise BadRequest(f"racks must be among {sorted(self.links)}")
        return racks

    def plan(self, links: list[Link], target: str, table: str, value: Any, detail: dict[str, Any]) -> Plan:
        """Put ``value`` into each link's ``table`` for the lease's life; its effect is the bytes
        it acted on, in the words of its table."""
        key = object()

        def apply() -> None:
            for link in links:
                getattr(link, table)[key] = value

        def revert() -> None:
            for link in links:
                getattr(link, table).pop(key, None)
                link.acted.pop(key, None)
                link.heal()

        def effect() -> dict[str, int]:
            return {EFFECT_WORDS[table]: sum(link.acted.get(key, 0) for link in links)}

        return Plan(target, apply, revert, detail, effect)

    def on_racks(self, values: dict[str, Any], table: str, value: Any, detail: dict[str, Any]) -> Plan:
        """A fault on the racks' paths to the metadata service."""
        racks = self.racks(values)
        target = ",".join(f"rack-{r}" for r in racks) if len(racks) > 1 else f"rack-{racks[0]}"
        if self.kernel is not None:
            return self.kernel_plan(racks, target, table, value, {"racks": racks, **detail})
        return self.plan([self.links[r] for r in racks], target, table, value, {"racks": racks, **detail})

    def kernel_plan(self, racks: list[int], target: str, table: str, value: Any, detail: dict[str, Any]) -> Plan:
        """The same fault as rules in the kernel: a cut drops the link's packets (both ways or one),
        a loss each packet with its probability; what they dropped is read from their counters."""
        kernel = self.kernel
        assert kernel is not None
        if table == "delays":  # the kernel has no netem: the links come through this proxy for the latency's life
            return self.detoured(racks, self.plan([self.links[r] for r in racks], target, table, value, detail))
        lease = f"stormlab-lease-{next(self._leases)}"
        direction, probability = (value, None) if table == "cuts" else ("both", value)
        rules = [cut(self.link_ports[r], direction, lease, probability) for r in racks]

        def apply() -> None:
            for rule in rules:
                kernel.add(rule)

        def revert() -> None:
            for rule in rules:
                kernel.delete(rule)

        def effect() -> dict[str, int]:
            return {EFFECT_WORDS[table]: kernel.dropped(lease)}

        return Plan(target, apply, revert, detail, effect)

    def detoured(self, racks: list[int], plan: Plan) -> Plan:
        """``plan`` with its racks' links taken through this proxy while it holds (see
        chaos.kernel_link: a detour ahead of each redirect, requests on the kernel's connections
        reset so they come again through here), and given back to the kernel when the last
        detour on a link ends: the detour and the reset go, and this proxy closes its connections
        on the link once what they hold back is written."""
        kernel = self.kernel
        assert kernel is not None

        def apply() -> None:
            for rack in racks:
                held = self._detours.get(rack, 0)
                if held == 0:
                    kernel.add_detour(detour(self.link_ports[rack]))
                    kernel.add(reset_requests(self.link_ports[rack]))
                self._detours[rack] = held + 1
            plan.apply()

        def revert() -> None:
            plan.revert()
            for rack in racks:
                held = self._detours.pop(rack, 1) - 1
                if held > 0:
                    self._detours[rack] = held
                    continue
                kernel.delete_detour(detour(self.link_ports[rack]))
                kernel.delete(reset_requests(self.link_ports[rack]))
                self.links[rack].release()  # new connections are the kernel's again, and these close

        return Plan(plan.target, apply, revert, plan.detail, plan.effect)

    async def isolate(self, values: dict[str, Any]) -> Plan:
        """Drop ``target``'s bytes to and from these racks, both ways."""
        service, racks = values["target"], values["racks"]
        missing = [r for r in racks if (service, r) not in self.paths]
        if missing:
            raise BadRequest(f"{service} has no path through this proxy to rack(s) {', '.join(map(str, missing))}")
        return self.plan([self.paths[(service, r)] for r in racks], service, "cuts", "both", {"racks": racks})

    async def blip(self, values: dict[str, Any]) -> Plan:
        return self.on_racks(values, "cuts", "both", {})

    async def partition(self, values: dict[str, Any]) -> Plan:
        direction = values["direction"]
        return self.on_racks(values, "cuts", direction, {"direction": direction})

    async def latency(self, values: dict[str, Any]) -> Plan:
        delay, jitter = values["delay_s"], values["jitter_s"]
        return self.on_racks(values, "delays", (delay, jitter), {"delay_s": delay, "jitter_s": jitter})

    async def loss(self, values: dict[str, Any]) -> Plan:
        p = values["probability"]
        return self.on_racks(values, "losses", p, {"probability": p})


PROXY = web.AppKey("proxy", LinkProxy)


Address = tuple[str, int]


def create_app(
    target: Address,
    links: dict[int, Address],
    token: str | None = None,
    paths: dict[str, dict[int, tuple[Address, Address]]] | None = None,
    cells: dict[int, Address] | None = None,
    kernel: KernelLinks | None = None,
) -> web.Application:
    """The proxy: ``links`` (rack -> where it listens for that rack's metadata traffic), ``cells``
    (rack -> its cell's metadata service, where not ``target``) and ``paths`` (service -> rack ->
    where it listens for that service, and the rack's address)."""
    registry = CollectorRegistry()
    lag = LoopLag(registry)
    app = base_app("stormlab link proxy", registry, lag, middlewares=[token_middleware(from_env() if token is None else token)])
    proxy = app[PROXY] = LinkProxy(target, registry, kernel=kernel)

    async def links_ctx(app: web.Application) -> AsyncIterator[None]:
        for rack, (host, port) in sorted(links.items()):
            await proxy.open(rack, host, port, (cells or {}).get(rack))
        await asyncio.to_thread(proxy.install)  # a few dozen iptables runs: off the loop, whose lag is the lab's validity
        for service, racks in sorted((paths or {}).items()):
            for rack, ((host, port), rack_address) in sorted(racks.items()):
                await proxy.open_path(service, rack, host, port, rack_address)
        yield
        await proxy.close()

    app.cleanup_ctx.append(links_ctx)
    add_fault_routes(app, proxy.runner, {f: getattr(proxy, f) for f in FAULTS}, racks_total=len(links))

    async def status(request: web.Request) -> web.Response:
        now = asyncio.get_running_loop().time()
        return web.json_response(
            {
                "component": "linkproxy",
                "faults": proxy.runner.active(now),
                "loop_lag_p99_s": lag.p99(request),
                "links": "kernel" if proxy.kernel is not None else "proxy",
            }
        )

    described = {
        "type": "object",
        "required": ["component", "faults", "loop_lag_p99_s", "links"],
        "properties": {
            "component": {"const": "linkproxy"},
            "links": {"enum": ["proxy", "kernel"], "description": "who carries and cuts the racks' links: this proxy, or the kernel"},
            "faults": {"type": "array", "items": LEASE_SCHEMA},
            "loop_lag_p99_s": {"type": "number"},
        },
    }
    openapi.add(app, Operation("GET", "/status", "the leases in force and the loop's lag", {200: Answer("the proxy's status", described)},
                               parameters=(LAG_WINDOW,)), status)  # fmt: skip
    return app


def main() -> None:
    """``python -m chaos.linkproxy``, its ports in the environment (the launcher sets them)."""
    host = os.environ.get("STORMLAB_HOST", "127.0.0.1")
    links = {int(rack): (host, port) for rack, port in json.loads(os.environ["STORMLAB_LINK_PORTS"]).items()}
    paths = {
        service: {int(rack): ((host, listen), (host, rack_port)) for rack, (listen, rack_port) in racks.items()}
        for service, racks in json.loads(os.environ.get("STORMLAB_PATH_PORTS", "{}")).items()
    }
    meta_host = os.environ.get("STORMLAB_METADATA_HOST", "127.0.0.1")
    target = (meta_host, int(os.environ["STORMLAB_METADATA_PORT"]))
    cells = {int(rack): (meta_host, port) for rack, port in json.loads(os.environ.get("STORMLAB_CELL_PORTS", "{}")).items()}
    kernel = None
    if os.environ.get("STORMLAB_LINK_CUT", "proxy") in ("kernel", "namespace"):  # namespace: root of the lab's own
        why_not = available()
        if why_not:
            raise SystemExit(f"linkproxy: {why_not}")
        kernel = KernelLinks(os.environ["STORMLAB_PORT"])
    serve(create_app(target, links, paths=paths, cells=cells, kernel=kernel), host, int(os.environ["STORMLAB_PORT"]))


if __name__ == "__main__":
    main()
