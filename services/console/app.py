"""console: the lab's AWS Console login. Nothing of its own lives in the lab's tables, but each
login makes one non-critical lookup there (the user's console preferences, in ``sessions``)
and waits for it, retrying, up to ``login_lookup_timeout_s``: in 2015 "a very
long timeout" that held logins up for tens of seconds once DynamoDB's traffic was disabled,
though the login did not need the answer. AWS's fix, a switch: ``fix_short_timeout`` (fail fast,
log in anyway).

  POST /login  {"user": NAME}   log in; 200 {"user", "lookup": "ok" | "skipped", "seconds"}
  GET  /status, /metrics, /healthz
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from aiohttp import web

from services import dependent
from services.dependent import Switch, fix_gauge
from services.storage import Storage, StorageError
from stormcore import openapi
from stormcore.metrics import MetricFactory
from stormcore.openapi import Answer, Operation
from stormcore.racks import RackUrls
from stormcore.settings import LabSettings
from stormcore.web import BadRequest, read_object
from stormcore.window import Window
from stormcore.wire import ConsoleStatus, HostReadings

TABLE = "sessions"
SHORT_TIMEOUT_S = 0.1
RETRY_S = 0.05
MAX_INFLIGHT = 1000
USER = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
LOGIN_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Console:
    def __init__(self, settings: LabSettings, storage: Storage, f: MetricFactory) -> None:
        self.settings, self.storage = settings, storage
        self.latency = Window(span_s=10.0)
        self.logins = f.counter("stormlab_console_logins_total", "Logins by what became of their lookup", ("lookup",))
        self.seconds = f.histogram("stormlab_console_login_seconds", "Time to log in (the lookup included)", LOGIN_BUCKETS)
        gauges = fix_gauge(f, "console", {"short-timeout": settings.fix_short_timeout})
        self.switches = {"short-timeout": Switch(gauges["short-timeout"], settings.fix_short_timeout)}
        for lookup in ("ok", "skipped"):
            self.logins.labels(lookup)
        self.total = 0
        self._inflight: set[asyncio.Task[dict[str, object]]] = set()

    @property
    def short_timeout(self) -> bool:
        return self.switches["short-timeout"].value

    @property
    def timeout_s(self) -> float:
        return SHORT_TIMEOUT_S if self.short_timeout else self.settings.login_lookup_timeout_s

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def login(self, user: str) -> dict[str, object]:
        """The lookup is retried until it answers or its timeout runs out; the login goes on either way."""
        started = self.now()
        deadline = started + self.timeout_s
        lookup = "skipped"
        while self.now() < deadline:
            try:
                await self.storage.get(TABLE, f"prefs:{user}", timeout_s=max(0.001, deadline - self.now()))
                lookup = "ok"
                break
            except StorageError:
                await asyncio.sleep(min(RETRY_S, max(0.0, deadline - self.now())))
        took = self.now() - started
        self.logins.labels(lookup).inc()
        self.seconds.observe(took)
        self.latency.add(self.now(), took)
        self.total += 1
        return {"user": user, "lookup": lookup, "seconds": round(took, 4)}

    async def clients(self, rng: random.Random) -> None:
        while True:
            await asyncio.sleep(1.0 / self.settings.cascade_rate)
            if len(self._inflight) < MAX_INFLIGHT:  # logins overlap while the lookups hang
                task = asyncio.create_task(self.login(f"user-{rng.randrange(1000)}"))
                self._inflight.add(task)
                task.add_done_callback(self._inflight.discard)

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        return [self.clients(random.Random(f"{self.settings.seed}/console"))] if self.settings.cascade_rate > 0 else []

    def close(self) -> None:
        return None

    async def status(self, host: HostReadings) -> ConsoleStatus:
        now = self.now()
        return ConsoleStatus(
            **host,
            login_p50_s=self.latency.quantile(0.5, now),
            login_p99_s=self.latency.quantile(0.99, now),
            logins_total=self.total,
            lookup_timeout_s=self.timeout_s,
            fix_short_timeout=self.short_timeout,
        )


CONSOLE = web.AppKey("console", Console)


def create_app(settings: LabSettings, metadata_url: str, rack_urls: RackUrls, data_dir: Path) -> web.Application:
    app = dependent.create_app(
        settings, metadata_url, rack_urls, data_dir, CONSOLE, lambda storage, f: Console(settings, storage, f), ConsoleStatus, (TABLE,)
    )

    async def login(request: web.Request) -> web.Response:
        user = (await read_object(request)).get("user")
        if not isinstance(user, str) or not USER.match(user):
            raise BadRequest("user must be 1-64 letters, digits, '_', '.' or '-'")
        return web.json_response(await request.app[CONSOLE].login(user))

    user = {"type": "object", "required": ["user"], "properties": {"user": {"type": "string", "pattern": USER.pattern}}}
    answer = {"type": "object", "required": ["user", "lookup", "seconds"],
              "properties": {"user": {"type": "string"}, "lookup": {"enum": ["ok", "skipped"]}, "seconds": {"type": "number"}}}  # fmt: skip
    openapi.add(app, Operation("POST", "/login", "sign in: the user's preferences are looked up in the database", {
        200: Answer("signed in (lookup skipped when the database did not answer in time)", answer),
    }, body=user, body_required=True, tag="console"), login)  # fmt: skip
    return app
