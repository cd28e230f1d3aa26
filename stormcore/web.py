"""What every stormlab process shares: JSON errors, body parsing, event-loop lag, serving."""

from __future__ import annotations

import asyncio
import functools
import gc
import inspect
import ipaddress
import json
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, Histogram, generate_latest

from stormcore import openapi
from stormcore.documents import finite, is_number
from stormcore.health import CpuSampler
from stormcore.openapi import Answer, Operation
from stormcore.window import Window
from stormcore.wire import HostReadings, WireError, parse_object

try:  # uvloop where the platform has it (not on Windows)
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None  # type: ignore[assignment]

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 64 * 1024
GC_PAUSE_LOGGED_S = 0.02  # a collection longer than this is logged: the loop's lag has a cause on record
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class BadRequest(web.HTTPBadRequest):
    def __init__(self, message: str) -> None:
        super().__init__(text=json.dumps({"error": "bad_request", "message": message}), content_type="application/json")


def json_error(status: int, error: str, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": error, "message": message, **extra}, status=status)


def error_body(error: str, message: str) -> bytes:
    """An error answer's JSON bytes, as :func:`json_error` sends them."""
    return json.dumps({"error": error, "message": message}).encode()


@web.middleware
async def json_errors(request: web.Request, handler: Callable) -> web.StreamResponse:
    """Every error answer is JSON, including aiohttp's own 404/405/413."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.content_type == "application/json" or exc.status < 400:
            raise
        reason = exc.reason.lower().replace(" ", "_")
        return json_error(exc.status, reason, exc.text or exc.reason)


async def read_object(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 that says what is wrong with it."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_BODY_BYTES, actual_size=request.content_length)
    raw = await request.content.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_BODY_BYTES, actual_size=len(raw))
    if not raw:  # no body: an operation whose body is optional takes its defaults
        return {}
    if not raw.strip():  # a body of blanks is not JSON (the fuzzer found it taken as no body)
        raise BadRequest("body must be a JSON object, or no body at all")
    try:
        return parse_object(raw)
    except WireError as exc:
        raise BadRequest(f"body must be a JSON object: {exc}") from None


def number(body: dict[str, Any], key: str, lo: float, hi: float, *, integer: bool = False) -> float:
    """A numeric field within [lo, hi]; booleans and strings are refused."""
    value = body.get(key)
    if not is_number(value, integer):
        raise BadRequest(f"{key} must be {'an integer' if integer else 'a number'}")
    assert isinstance(value, int | float)
    if not lo <= value <= hi:
        raise BadRequest(f"{key} must be between {lo} and {hi}")
    return int(value) if integer else value  # 8.0 as 8: is_number took it as an integer


def metrics_route(registry: CollectorRegistry, refresh: Callable[[], Any] | None = None) -> Callable:
    async def metrics(request: web.Request) -> web.Response:
        if refresh is not None and inspect.isawaitable(done := refresh()):
            await done
        resp = web.Response(body=generate_latest(registry))
        resp.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        return resp

    return metrics


HOST_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class LoopLag:
    """Measures how late the event loop wakes up, and (once a second) the CPU this process uses
    and waits for: the lab is only valid while these stay small."""

    CPU_EVERY = 10  # lag samples per CPU reading

    def __init__(self, registry: CollectorRegistry, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.window = Window(span_s=24 * 3600.0, max_samples=200_000)
        self.cpu = CpuSampler()
        self.histogram = Histogram(
            "stormlab_event_loop_lag_seconds", "How late this process's event loop ran a timer", buckets=LAG_BUCKETS, registry=registry
        )
        for name, key, doc in (
            ("stormlab_process_cpu_ratio", "process", "Share of one core this process used (last 10 s)"),
            ("stormlab_process_cpu_wait_seconds", "wait", "Mean wait for a core each time this process ran (last 10 s; schedstat)"),
            ("stormlab_host_cpu_busy_ratio", "host_busy", "Share of the host's CPU time that was busy (last 10 s)"),
            ("stormlab_host_cpu_steal_ratio", "host_steal", "Share of the host's CPU time a hypervisor took (last 10 s)"),
        ):
            Gauge(name, doc, registry=registry).set_function(functools.partial(self._mean, key))
        Gauge("stormlab_host_cores", "CPUs this process may run on (its affinity)", registry=registry).set(HOST_CORES)
        self.gc_pauses = Histogram(
            "stormlab_gc_pause_seconds", "How long each of Python's garbage collections held the loop", ["generation"],
            buckets=LAG_BUCKETS, registry=registry,
        )  # fmt: skip
        self._gc_started = self._gc_cpu = 0.0

    def _mean(self, key: str) -> float:
        return self.cpu.mean(key, 10.0) or 0.0

    def p99(self, request: web.Request | None = None) -> float:
        """p99 over the last 10 s, or over ``?lag_window_s=`` seconds (the demo asks for its whole run)."""
        return self.window.quantile(0.99, asyncio.get_running_loop().time(), self.within(request)) or 0.0

    @staticmethod
    def within(request: web.Request | None) -> float:
        if request is None or "lag_window_s" not in request.query:
            return 10.0
        try:
            return min(max(finite(request.query["lag_window_s"]), 0.1), 24 * 3600.0)
        except ValueError:  # nan, inf and what is not a number alike: NaN once made the window NaN
            raise BadRequest("lag_window_s must be a number of seconds") from None

    def readings(self, request: web.Request | None = None) -> HostReadings:
        """What every ``/status`` reports about the host: lag p99 and the CPU means over the
        same window (10 s, or ``?lag_window_s=``)."""
        within = self.within(request)
        cpu = self.cpu.means(within)
        return {
            "loop_lag_p99_s": self.p99(request),
            "cpu_ratio": cpu["process"],
            "cpu_wait_s": cpu["wait"],
            "host_cores": HOST_CORES,
            "host_cpu_ratio": cpu["host_busy"],
            "host_steal_ratio": cpu["host_steal"],
        }

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started, self._gc_cpu = time.perf_counter(), time.thread_time()
            return
        pause, cpu = time.perf_counter() - self._gc_started, time.thread_time() - self._gc_cpu
        self.gc_pauses.labels(str(info["generation"])).observe(pause)
        if pause > GC_PAUSE_LOGGED_S:  # its CPU says whether the collector took the time or the process waited for a core
            log.warning(
                "a garbage collection of generation %s held the loop %.0f ms, %.0f ms of it on a core (%s collected)",
                info["generation"],
                1000 * pause,
                1000 * cpu,
                info["collected"],
            )

    async def ctx(self, app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(self._run())
        gc.callbacks.append(self._gc)
        yield
        gc.callbacks.remove(self._gc)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        self.cpu.sample()  # the counters' starting point
        ticks = 0
        while True:
            start = loop.time()
            await asyncio.sleep(self.interval_s)
            lag = max(0.0, loop.time() - start - self.interval_s)
            self.window.add(loop.time(), lag)
            self.histogram.observe(lag)
            ticks += 1
            if ticks % self.CPU_EVERY == 0:
                self.cpu.sample()


def described_app(title: str, operations: Mapping[str, Operation], handlers: Mapping[str, Callable]) -> web.Application:
    """An app of ``handlers``, each at its operation of ``operations`` (by name) and described at
    ``/openapi.json``; JSON errors; bodies up to 64 KiB. For the game's consoles, which have no
    /metrics or /healthz of their own (the lab's processes start from ``base_app``)."""
    app = web.Application(middlewares=[json_errors], client_max_size=MAX_BODY_BYTES)
    openapi.serve_description(app, title)
    for name, handler in handlers.items():
        openapi.add(app, operations[name], handler)
    return app


def base_app(
    title: str,
    registry: CollectorRegistry,
    lag: LoopLag,
    refresh: Callable[[], Any] | None = None,
    middlewares: list[Callable] | None = None,
) -> web.Application:
    """An app with JSON errors, ``/metrics`` (``refresh``, plain or async, runs before each scrape),
    ``/healthz`` and ``/openapi.json`` (the description of ``title``'s API: add routes with
    :func:`stormcore.openapi.add`)."""
    app = web.Application(middlewares=[json_errors, *(middlewares or [])], client_max_size=MAX_BODY_BYTES)
    openapi.serve_description(app, title)
    text = Answer("Prometheus text exposition", {"type": "string"}, media="text/plain")
    openapi.add(
        app,
        Operation("GET", "/metrics", "this process's metrics, for Prometheus", {200: text}, tag="common"),
        metrics_route(registry, refresh),
    )
    healthy = {"type": "object", "required": ["ok"], "properties": {"ok": {"const": True}}}
    openapi.add(
        app, Operation("GET", "/healthz", "answers while the process serves", {200: Answer("serving", healthy)}, tag="common"), healthz
    )
    app.cleanup_ctx.append(lag.ctx)
    app.on_startup.append(_freeze_startup_objects)
    return app


async def _freeze_startup_objects(app: web.Application) -> None:
    # Everything built at startup (memberships, nodes, routes) lives as long as the process:
    # keep it out of the garbage collector's full passes, which would otherwise stall the loop.
    gc.freeze()


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


Front = Callable[[Callable[[], asyncio.Protocol]], asyncio.Protocol]  # a protocol in front of the app's, given the app's factory


def serve(app: web.Application, host: str, port: int, front: Front | None = None) -> None:
    """Run until SIGTERM/SIGINT; handlers are cancelled when their client goes away. ``front``
    makes each connection's protocol, given the app's protocol factory (the metadata service's
    front door answers renewals itself and hands the rest to the app)."""
    loop = uvloop.new_event_loop() if uvloop is not None else asyncio.new_event_loop()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    app.on_startup.append(freeze_startup_heap)  # after the app's own start-up
    if front is None:
        web.run_app(app, host=host, port=port, handler_cancellation=True, access_log=None, print=None, backlog=4096, loop=loop)
        return
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(_serve_behind(app, host, port, front))
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


async def freeze_startup_heap(app: web.Application) -> None:
    """What start-up built (a metadata service's 10,000-node placement: 230,000 objects) lives as
    long as the process: out of the collector's sight, so a full collection no longer walks it.
    At 10,000 nodes that collection held the metadata service's loop ~25 ms each time a GSI
    change re-encoded the memberships; frozen, 0.1 ms. Objects made later are collected as ever."""
    gc.freeze()


async def _serve_behind(app: web.Application, host: str, port: int, front: Front) -> None:
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        app_protocol = runner.server
        assert app_protocol is not None
        server = await loop.create_server(lambda: front(app_protocol), host, port, backlog=4096, reuse_address=True)
        await stop.wait()
        server.close()
    finally:
        await runner.cleanup()


def is_address(text: str) -> bool:
    """Whether ``text`` is an IP address (v4 or v6) rather than a name."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
