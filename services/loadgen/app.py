"""loadgen: the customers. Sends reads and writes at a set rate, routed by the partition map.

GET /status   customer error ratio over the last 10 s, total and per table
GET /metrics, /healthz
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram

from services.loadgen.traffic import FAILURES, OUTCOMES, Indexes, Request, Routes, due, outcome
from stormcore import openapi
from stormcore.fleet import cell_of
from stormcore.openapi import LAG_WINDOW, Answer, Operation, schema_of
from stormcore.racks import RackUrls
from stormcore.settings import LabSettings
from stormcore.web import LoopLag, base_app
from stormcore.window import Window
from stormcore.wire import HostReadings, LoadgenStatus, PartitionMap

log = logging.getLogger(__name__)
LAG = web.AppKey("lag", LoopLag)
MAX_INFLIGHT = 5000
MAP_REFRESH_S = 5.0  # a conditional GET: the map is sent again only when it changed


class Generator:
    def __init__(self, settings: LabSettings, metadata_url: str, rack_urls: RackUrls, registry: CollectorRegistry) -> None:
        self.settings, self.metadata_url, self.rack_urls = settings, metadata_url.rstrip("/"), rack_urls
        self.rng = random.Random(settings.seed)
        self.routes: Routes | None = None
        self.partition_map: PartitionMap | None = None
        # a new GSI's owners learn it at their next renewal, within a period and an allowance
        self.indexes = Indexes(settings.renewal_period_s + settings.allowance_s)
        self.activates_at: float | None = None  # when the next CREATING GSI becomes ACTIVE: routes again
        self.window = Window(span_s=10.0)
        self.table_windows: dict[str, Window] = {}
        self.inflight = 0
        self.sent = self.failed = 0
        self.requests = Counter(
            "stormlab_customer_requests_total",
            "Customer requests by table, outcome and the cell of the node asked",
            ["table", "outcome", "cell"],
            registry=registry,
        )
        self.cell_windows = {str(c): Window(span_s=10.0) for c in range(settings.cells)} if settings.cells > 1 else {}
        self.latency = Histogram(
            "stormlab_customer_request_seconds",
            "Customer request latency",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=registry,
        )
        self.timeout = aiohttp.ClientTimeout(total=settings.customer_timeout_s)
        self._tasks: set[asyncio.Task] = set()

    async def run(self, session: aiohttp.ClientSession) -> None:
        loop = asyncio.get_running_loop()
        await self._load_routes(session)
        started, sent, refreshed = loop.time(), 0, loop.time()
        while True:
            await asyncio.sleep(0.01)
            now = loop.time()
            if now - refreshed > MAP_REFRESH_S:
                refreshed = now
                self._spawn(self._load_routes(session, once=True))
            if self.activates_at is not None and now >= self.activates_at:
                self._route(now)
            for _ in range(due(self.settings.customer_rate, now - started, sent)):
                sent += 1
                if self.inflight < MAX_INFLIGHT and self.routes is not None:
                    self._spawn(self._send(session, self.routes.pick(self.rng)))

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _route(self, now: float) -> Routes:
        """Routes by the last map, the GSIs still CREATING left out; taken if it routes anywhere."""
        assert self.partition_map is not None, "routes are made from a map loaded"
        routes = Routes(self.partition_map, self.indexes.creating(now))
        self.activates_at = self.indexes.next_active(now)
        if routes.size:
            self.routes = routes
        return routes

    async def _load_routes(self, session: aiohttp.ClientSession, once: bool = False) -> None:
        while True:
            try:
                known = {"If-None-Match": f'"{self.routes.version}"'} if self.routes else {}
                async with session.get(f"{self.metadata_url}/partition-map", headers=known, timeout=aiohttp.ClientTimeout(total=5)) as resp:
                    if resp.status == 304:
                        return
                    resp.raise_for_status()
                    partition_map = PartitionMap.decode(await resp.read())
                self.partition_map = partition_map
                self.indexes.seen(partition_map, asyncio.get_running_loop().time())
                routes = self._route(asyncio.get_running_loop().time())
                if routes.size:
                    for table in routes.tables:
                        self.table_windows.setdefault(table, Window(span_s=10.0))
                        for o, c in itertools.product(OUTCOMES, range(self.settings.cells)):
                            self.requests.labels(table, o, str(c))
                return
            except (TimeoutError, aiohttp.ClientError, ValueError, KeyError) as exc:
                log.warning("partition map not loaded: %s", exc)
                if once:
                    return
            await asyncio.sleep(1.0)

    async def _send(self, session: aiohttp.ClientSession, req: Request) -> None:
        loop = asyncio.get_running_loop()
        params = {"index": req.index} if req.index else None
        started = loop.time()
        self.inflight += 1
        try:
            url = f"{self.rack_urls[req.rack]}/nodes/{req.node}/tables/{req.table}/partitions/{req.partition}/items/{req.key}"
            item = {"value": {"at": started}} if req.method == "PUT" else None
            async with session.request(req.method, url, params=params, timeout=self.timeout, json=item) as resp:
                answer = await resp.json(content_type=None) if resp.status != 200 else await resp.read()
                result = outcome(resp.status, answer.get("error") if isinstance(answer, dict) else None)
        except TimeoutError:
            result = "timeout"
        except (aiohttp.ClientError, OSError, ValueError, KeyError):  # KeyError: the rack is not found yet
            result = "error"
        finally:
            self.inflight -= 1
        now = loop.time()
        self.latency.observe(now - started)
        cell = str(cell_of(req.rack, self.settings))
        self.requests.labels(req.table, result, cell).inc()
        failed = 1.0 if result in FAILURES else 0.0
        if cell in self.cell_windows:
            self.cell_windows[cell].add(now, failed)
        self.sent += 1
        self.failed += int(failed)
        self.window.add(now, failed)
        self.table_windows[req.table].add(now, failed)

    def status(self, host: HostReadings) -> LoadgenStatus:
        now = asyncio.get_running_loop().time()
        return LoadgenStatus(
            **host,
            rate_per_s=self.settings.customer_rate,
            requests_last_10s=len(self.window.values(now)),
            customer_error_ratio=self.window.mean(now),
            table_error_ratio={t: w.mean(now) for t, w in sorted(self.table_windows.items())},
            requests_total=self.sent,
            failures_total=self.failed,
            inflight=self.inflight,
            routes_version=self.routes.version if self.routes else None,
            cell_error_ratio={c: w.mean(now) for c, w in self.cell_windows.items()},
        )

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


GEN = web.AppKey("generator", Generator)


def create_app(settings: LabSettings, metadata_url: str, rack_urls: RackUrls) -> web.Application:
    registry = CollectorRegistry()
    lag = LoopLag(registry)
    app = base_app("stormlab loadgen (the customers)", registry, lag)
    gen = app[GEN] = Generator(settings, metadata_url, rack_urls, registry)
    app[LAG] = lag

    async def traffic_ctx(app: web.Application) -> AsyncIterator[None]:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        tasks = [asyncio.create_task(gen.run(session)), asyncio.create_task(rack_urls.keep_fresh(session, settings.racks))]
        yield
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await gen.stop()
        await session.close()

    app.cleanup_ctx.append(traffic_ctx)

    async def status(request: web.Request) -> web.Response:
        return web.json_response(gen.status(lag.readings(request)).to_json())

    openapi.add(app, Operation("GET", "/status", "the customers' view: error ratios, requests", {
        200: Answer("loadgen's status", schema_of(LoadgenStatus)),
    }, parameters=(LAG_WINDOW,)), status)  # fmt: skip
    return app
