"""What every service beside the database shares: its app built around one service object that
reads and writes the lab's tables, its background loops, its ``/status``, its entry point."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import aiohttp
from aiohttp import web

from chaos import catalog
from chaos.control import Handler, LeaseRunner, Plan, Recorder, add_fault_routes
from services.storage import Storage, keep_map_fresh
from stormcore import openapi
from stormcore.auth import from_env, token_middleware
from stormcore.metrics import MetricFactory
from stormcore.openapi import LAG_WINDOW, Answer, Operation, schema_of
from stormcore.racks import RackUrls
from stormcore.roster import CASCADE
from stormcore.settings import LabSettings
from stormcore.web import BadRequest, LoopLag, base_app, serve
from stormcore.wire import HostReadings, Status

MAP_REFRESH_S = 5.0


class Switch:
    """A fix a responder switches on while the lab runs (a fault lease of its service): the
    newest lease in force decides; with none, the value the service started with."""

    def __init__(self, gauge: Any, base: Any, on_change: Callable[[Any], None] | None = None) -> None:
        self.gauge, self.base, self.on_change = gauge, base, on_change
        self._held: dict[object, Any] = {}

    @property
    def value(self) -> Any:
        return list(self._held.values())[-1] if self._held else self.base

    def hold(self, key: object, value: Any) -> None:
        self._set(lambda: self._held.__setitem__(key, value))

    def release(self, key: object) -> None:
        self._set(lambda: self._held.pop(key, None))

    def _set(self, change: Callable[[], None]) -> None:
        before = self.value
        change()
        self.gauge.set(fix_on(self.value))
        if self.on_change is not None and self.value != before:
            self.on_change(self.value)


class Dependent(Protocol):
    switches: dict[str, Switch]  # fault name (chaos/catalog.py) -> the fix it switches

    def loops(self) -> list[Coroutine[Any, Any, None]]: ...

    async def status(self, host: HostReadings) -> Status: ...

    def close(self) -> None: ...


S = TypeVar("S", bound=Dependent)


def fix_gauge(f: MetricFactory, service: str, fixes: dict[str, Any]) -> dict[str, Any]:
    """``stormlab_cascade_fix_enabled``: which of AWS's announced fixes this service runs with
    (a number of workers counts as the fix when it is more than one); returns each fix's gauge."""
    gauge = f.gauge("stormlab_cascade_fix_enabled", "1 where a fix AWS announced is switched on", ("service", "fix"))
    out = {}
    for fix, on in fixes.items():
        out[fix] = gauge.labels(service, fix)
        out[fix].set(fix_on(on))
    return out


def fix_on(value: Any) -> int:
    """1 when a fix is in force: a switch on, or more than one worker."""
    return int(value > 1 if isinstance(value, int) and not isinstance(value, bool) else bool(value))


def switch_handlers(app: web.Application, key: web.AppKey[S], component: str) -> dict[str, Handler]:
    """The service's fixes as fault leases (their names in the catalog, held by ``component``): a
    switch held at the fault's one argument (on, if it has none), or the service's own plan."""

    def handler(fault: str) -> Handler:
        async def plan(values: dict[str, Any]) -> Plan:
            if key not in app:
                raise BadRequest(f"{component} is starting: try again in a moment")
            service = app[key]
            actions = getattr(service, "actions", {})  # fault -> its plan, for a lease that is no switch (a restart)
            if fault in actions:
                return actions[fault](values)
            switch, lease = service.switches[fault], object()
            value = next((v for k, v in values.items() if k not in ("fault", "duration_s")), True)  # a switch's one argument, or on
            return Plan(component, lambda: switch.hold(lease, value), lambda: switch.release(lease), {"value": value})

        return plan

    return {fault: handler(fault) for fault in catalog.names(component)}


def create_app(
    settings: LabSettings, metadata_url: str, rack_urls: RackUrls, data_dir: Path, key: web.AppKey[S],
    make: Callable[[Storage, MetricFactory], S], status_type: type[Status], tables: Sequence[str], token: str | None = None,
    storage_type: Callable[..., Storage] = Storage,
) -> web.Application:  # fmt: skip
    """An app whose service ``make`` builds once the loop runs (``app[key]``), with ``/status``
    (described as ``status_type``, the class its service's ``status`` returns) and ``/faults``
    for its fixes (the lab token guards it: ``token``, else the environment's); its storage
    routes to ``tables``, and reads the partition map of those only; ``storage_type`` makes it (the
    lease manager's dials the racks through the database's endpoint name)."""
    f = MetricFactory()
    lag = LoopLag(f.registry)
    component = status_type.COMPONENT

    async def refresh() -> None:  # the gauges a /status sets (ages, sizes) are set for each scrape too
        if key in app:
            await app[key].status(lag.readings())

    guard = token_middleware(from_env() if token is None else token)
    app = base_app(f"stormlab {component}", f.registry, lag, refresh=refresh, middlewares=[guard])
    runner = LeaseRunner(Recorder(f.registry, catalog.names(component), component))
    add_fault_routes(app, runner, switch_handlers(app, key, component))

    async def service_ctx(app: web.Application) -> AsyncIterator[None]:
        data_dir.mkdir(parents=True, exist_ok=True)
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        storage = storage_type(metadata_url, rack_urls, session, settings.cascade_timeout_s, tables)
        service = app[key] = make(storage, f)
        phase = CASCADE.index(component) / len(CASCADE) if component in CASCADE else 0.0  # each its own moment
        loops = (keep_map_fresh(storage, MAP_REFRESH_S, phase), rack_urls.keep_fresh(session, settings.racks), *service.loops())
        tasks = [asyncio.create_task(loop) for loop in loops]
        yield
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await storage.close()
        await session.close()
        service.close()

    async def status(request: web.Request) -> web.Response:
        return web.json_response((await request.app[key].status(lag.readings(request))).to_json())

    app.cleanup_ctx.append(service_ctx)
    openapi.add(app, Operation("GET", "/status", f"the {status_type.COMPONENT} service's state", {
        200: Answer("its status", schema_of(status_type)),
    }, parameters=(LAG_WINDOW,)), status)  # fmt: skip
    return app


def main(create: Callable[[LabSettings, str, RackUrls, Path], web.Application]) -> None:
    """``python -m services.NAME``: its settings and its peers' addresses from the environment."""
    app = create(
        LabSettings.from_env(),
        os.environ["STORMLAB_METADATA_URL"],
        RackUrls.from_env(),
        Path(os.environ.get("STORMLAB_DATA_DIR", "data")),
    )
    serve(app, os.environ.get("STORMLAB_HOST", "127.0.0.1"), int(os.environ["STORMLAB_PORT"]))
