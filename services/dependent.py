"""What every service beside the database shares: its app built around one service object that
reads and writes the lab's tables, its background loops, its ``/status``, its entry point."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol, TypeVar

import aiohttp
from aiohttp import web

from common import openapi
from common.metrics import MetricFactory
from common.openapi import LAG_WINDOW, Answer, Operation, schema_of
from common.settings import LabSettings
from common.web import LoopLag, base_app, serve
from common.wire import HostReadings, Status
from services.storage import Storage, keep_map_fresh

MAP_REFRESH_S = 5.0


class Dependent(Protocol):
    def loops(self) -> list[Coroutine[Any, Any, None]]: ...

    async def status(self, host: HostReadings) -> Status: ...

    def close(self) -> None: ...


S = TypeVar("S", bound=Dependent)


def fix_gauge(f: MetricFactory, service: str, fixes: dict[str, bool]) -> None:
    """``stormlab_cascade_fix_enabled``: which of AWS's announced fixes this service runs with."""
    gauge = f.gauge("stormlab_cascade_fix_enabled", "1 where a fix AWS announced is switched on", ("service", "fix"))
    for fix, on in fixes.items():
        gauge.labels(service, fix).set(1 if on else 0)


def create_app(
    settings: LabSettings, metadata_url: str, rack_urls: list[str], data_dir: Path, key: web.AppKey[S],
    make: Callable[[Storage, MetricFactory], S], status_type: type[Status],
) -> web.Application:  # fmt: skip
    """An app whose service ``make`` builds once the loop runs (``app[key]``), with ``/status``
    (described as ``status_type``, the class its service's ``status`` returns)."""
    f = MetricFactory()
    lag = LoopLag(f.registry)

    async def refresh() -> None:  # the gauges a /status sets (ages, sizes) are set for each scrape too
        if key in app:
            await app[key].status(lag.readings())

    app = base_app(f"stormlab {status_type.COMPONENT}", f.registry, lag, refresh=refresh)

    async def service_ctx(app: web.Application) -> AsyncIterator[None]:
        data_dir.mkdir(parents=True, exist_ok=True)
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        storage = Storage(metadata_url, rack_urls, session, settings.cascade_timeout_s)
        service = app[key] = make(storage, f)
        tasks = [asyncio.create_task(loop) for loop in (keep_map_fresh(storage, MAP_REFRESH_S), *service.loops())]
        yield
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await session.close()
        service.close()

    async def status(request: web.Request) -> web.Response:
        return web.json_response((await request.app[key].status(lag.readings(request))).to_json())

    app.cleanup_ctx.append(service_ctx)
    openapi.add(app, Operation("GET", "/status", f"the {status_type.COMPONENT} service's state", {
        200: Answer("its status", schema_of(status_type)),
    }, parameters=(LAG_WINDOW,)), status)  # fmt: skip
    return app


def main(create: Callable[[LabSettings, str, list[str], Path], web.Application]) -> None:
    """``python -m services.NAME``: its settings and its peers' addresses from the environment."""
    app = create(
        LabSettings.from_env(),
        os.environ["STORMLAB_METADATA_URL"],
        os.environ["STORMLAB_RACK_URLS"].split(","),
        Path(os.environ.get("STORMLAB_DATA_DIR", "data")),
    )
    serve(app, os.environ.get("STORMLAB_HOST", "127.0.0.1"), int(os.environ["STORMLAB_PORT"]))
