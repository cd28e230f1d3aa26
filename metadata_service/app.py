"""The metadata service: answers membership renewals through the virtual CPU.

Routes:
  GET  /membership/{node}          a node's membership list (costs base + per_entry x entries)
  GET  /partition-map              who holds each partition, for customer routing (free)
  POST /admin/pause                 turn membership requests away (the front door: free)
  POST /admin/resume {"staged": N, "every_s": S}   readmit the fleet, at once or in N steps
  POST /admin/capacity {"cores": n, "break_glass": false}   set virtual cores (shared path)
  POST /admin/tables/{table}/gsis {"add": n}    customers adopt n more GSIs (shared path)
  POST|GET|DELETE /faults           fault leases (metadata_service/faults.py)
  GET  /status, /metrics, /healthz
Admin requests that change the service go through the same overloaded virtual CPU as the
renewals: the shared-fate path on which capacity could not be added in 2015. ``break_glass``
takes a path around it. /admin and /faults need the lab token.
"""
from __future__ import annotations

import asyncio
from typing import AsyncIterator

from aiohttp import web

from chaos.control import LeaseRunner, Recorder, add_fault_routes
from metadata_service.admission import Admission
from metadata_service.cpu_driver import CpuScheduler
from metadata_service.membership import MembershipStore, TooManyGsis, UnknownTable, MAX_GSIS
from metadata_service.metrics import MetadataMetrics
from metadata_service.vcpu import VirtualCpu
from services.common.auth import from_env, token_middleware
from services.common.settings import LabSettings
from services.common.web import BadRequest, LoopLag, base_app, json_error, number, read_object
from services.common.window import Window

SETTINGS = web.AppKey("settings", LabSettings)
STORE = web.AppKey("store", MembershipStore)
METRICS = web.AppKey("metrics", MetadataMetrics)
LAG = web.AppKey("lag", LoopLag)
STATE = web.AppKey("state", "ServiceState")


class ServiceState:
    def __init__(self, settings: LabSettings) -> None:
        self.settings = settings
        self.admission = Admission()
        self.cpu = VirtualCpu(settings.capacity_cores)
        self.scheduler: CpuScheduler | None = None
        self.latency = Window(span_s=10.0)
        self._busy_reported = 0.0
        self._wasted_reported = 0.0

    def sync_metrics(self, metrics: MetadataMetrics) -> None:
        """Bring counters up to the model's totals (called before each scrape and status)."""
        if self.scheduler is not None:
            self.scheduler.poll()
        busy, wasted = self.cpu.busy_core_seconds, self.scheduler.wasted_s if self.scheduler else 0.0
        metrics.busy.inc(busy - self._busy_reported)
        metrics.wasted.inc(wasted - self._wasted_reported)
        self._busy_reported, self._wasted_reported = busy, wasted
        metrics.inflight.set(self.cpu.inflight)
        metrics.cores.set(self.cpu.cores)
        metrics.paused.set(1 if self.admission.paused else 0)


def create_app(settings: LabSettings, token: str | None = None) -> web.Application:
    from metadata_service.faults import FAULTS, MetadataFaults

    metrics = MetadataMetrics.create()
    lag = LoopLag(metrics.registry)
    state = ServiceState(settings)
    store = MembershipStore.for_fleet(settings)
    app = base_app(metrics.registry, lag, refresh=lambda: state.sync_metrics(metrics),
                   middlewares=[token_middleware(from_env() if token is None else token)])
    app[SETTINGS], app[STORE], app[METRICS], app[LAG], app[STATE] = settings, store, metrics, lag, state
    metrics.version.set(store.version)
    app.cleanup_ctx.append(_scheduler_ctx)
    app.router.add_get("/membership/{node}", membership)
    app.router.add_get("/partition-map", partition_map)
    app.router.add_get("/status", status)
    app.router.add_post("/admin/pause", pause)
    app.router.add_post("/admin/resume", resume)
    app.router.add_post("/admin/capacity", capacity)
    app.router.add_post("/admin/tables/{table}/gsis", grow_gsis)
    faults = MetadataFaults(app, LeaseRunner(Recorder(metrics.registry, FAULTS, "metadata")))
    add_fault_routes(app, faults.runner, faults.handlers())
    return app


async def _scheduler_ctx(app: web.Application) -> AsyncIterator[None]:
    state = app[STATE]
    state.scheduler = CpuScheduler(state.cpu, app[SETTINGS].abandoned_work)
    yield


async def on_cpu(app: web.Application, kind: str, work_s: float) -> None:
    """Serve ``work_s`` on the virtual CPU, counting the request as abandoned if its client leaves."""
    state, metrics = app[STATE], app[METRICS]
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        await state.scheduler.run(work_s)
    except asyncio.CancelledError:
        metrics.requests.labels(kind, "abandoned").inc()
        raise
    elapsed = loop.time() - started
    metrics.processing.labels(kind).observe(elapsed)
    metrics.requests.labels(kind, "ok").inc()
    if kind == "membership":
        state.latency.add(loop.time(), elapsed)


async def membership(request: web.Request) -> web.Response:
    store, state, settings, metrics = request.app[STORE], request.app[STATE], request.app[SETTINGS], request.app[METRICS]
    node = request.match_info["node"]
    if not store.has_node(node):
        metrics.requests.labels("membership", "rejected").inc()
        return json_error(404, "unknown_node", f"no storage node {node!r} in this cell")
    if not state.admission.admits(node, asyncio.get_running_loop().time()):
        metrics.requests.labels("membership", "paused").inc()
        return json_error(503, "paused", "membership requests are paused by an operator")
    entries = store.entries(node)
    await on_cpu(request.app, "membership", settings.cost_base_s + settings.cost_per_entry_s * entries)
    metrics.entries.observe(entries)
    return web.Response(body=store.membership(node), content_type="application/json")


async def partition_map(request: web.Request) -> web.Response:
    store = request.app[STORE]
    etag = f'"{store.version}"'
    if request.headers.get("If-None-Match") == etag:
        return web.Response(status=304, headers={"ETag": etag})  # routers poll this: unchanged costs nothing
    return web.Response(body=store.partition_map(), content_type="application/json", headers={"ETag": etag})


async def pause(request: web.Request) -> web.Response:
    request.app[STATE].admission.pause()
    request.app[METRICS].paused.set(1)
    return web.json_response({"paused": True})


def staging(body: dict) -> tuple[int, float]:
    groups = int(number(body | {"staged": body.get("staged", 1)}, "staged", 1, 1000, integer=True))
    every = number(body | {"every_s": body.get("every_s", 0)}, "every_s", 0, 3600)
    return groups, every


async def resume(request: web.Request) -> web.Response:
    groups, every = staging(await read_object(request))
    admission = request.app[STATE].admission
    admission.resume(asyncio.get_running_loop().time(), groups, every)
    request.app[METRICS].paused.set(0)
    return web.json_response(admission.describe(asyncio.get_running_loop().time()))


def break_glass(body: dict) -> bool:
    value = body.get("break_glass", False)
    if not isinstance(value, bool):
        raise BadRequest("break_glass must be true or false")
    return value


async def set_capacity(app: web.Application, cores: float, bypass: bool) -> None:
    """The admin path of 2015: through the same virtual CPU as the renewals, unless ``bypass``."""
    if not bypass:
        await on_cpu(app, "admin", app[SETTINGS].admin_cost_s)
    app[STATE].scheduler.set_cores(cores)


async def capacity(request: web.Request) -> web.Response:
    body = await read_object(request)
    cores = number(body, "cores", 0.1, 100_000)
    await set_capacity(request.app, cores, break_glass(body))
    return web.json_response({"cores": cores})


async def grow_gsis(request: web.Request) -> web.Response:
    store = request.app[STORE]
    table = request.match_info["table"]
    add = int(number(await read_object(request), "add", 1, MAX_GSIS, integer=True))
    if table not in store.tables:
        return json_error(404, "unknown_table", f"no table {table!r}; tables: {', '.join(store.tables)}")
    if len(store.tables[table].gsis) + add > MAX_GSIS:
        return json_error(400, "too_many_gsis", f"{table} would exceed {MAX_GSIS} GSIs")
    await on_cpu(request.app, "admin", request.app[SETTINGS].admin_cost_s)
    try:
        gsis = store.add_gsis(table, add)
    except (UnknownTable, TooManyGsis) as exc:  # changed while this request waited for the CPU
        return json_error(409, "conflict", str(exc))
    request.app[METRICS].version.set(store.version)
    return web.json_response({"table": table, "gsis": gsis, "version": store.version,
                              "sizes": store.size_distribution()})


async def status(request: web.Request) -> web.Response:
    state, store, metrics = request.app[STATE], request.app[STORE], request.app[METRICS]
    state.sync_metrics(metrics)
    now = asyncio.get_running_loop().time()
    return web.json_response({
        "component": "metadata",
        "paused": state.admission.paused,
        "admission": state.admission.describe(now),
        "cores": state.cpu.cores,
        "inflight": state.cpu.inflight,
        "busy_cores": state.cpu.busy_cores,
        "abandoned_work": state.scheduler.abandoned_work if state.scheduler else None,
        "wasted_work_s": state.scheduler.wasted_s if state.scheduler else 0.0,
        "membership_version": store.version,
        "membership_sizes": {str(k): v for k, v in store.size_distribution().items()},
        "processing_p99_s": state.latency.quantile(0.99, now),
        "allowance_s": request.app[SETTINGS].allowance_s,
        "loop_lag_p99_s": request.app[LAG].p99(request),
    })
