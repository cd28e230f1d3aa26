"""metrics: the lab's CloudWatch. Nothing of its own lives in the lab's tables; it reads two:
the namespaces it accepts (``metric-groups``) and, to enrich each datapoint with its Auto
Scaling group, the groups the scaling service writes (``scaling-groups``).
Both are cached for ``metric_cache_ttl_s``. Its datapoints are its own (SQLite, WAL).

  POST /data  {"namespace", "name", "group", "value", "timestamp"?}   PutMetricData: 201 once stored
  GET  /data?namespace=&name=&group=&since=&limit=      GetMetricData: the group's series since a time
  GET  /status, /metrics, /healthz

A datapoint stored without its group is not in the group's series: a reader of that series sees
the gap. (A game day's players read their monitoring from here when it shares fate with the lab:
docs/rooms.md.)

An enrichment that cannot be refreshed leaves the datapoint without its group: a gap in the
group's series (2015: gaps from 2:35 AM, in the storm). A namespace that cannot be refreshed
fails the call (2015: PutMetricData errors from 5:51 AM, once DynamoDB's traffic was disabled).
AWS's fix, a switch: ``fix_write_through``: refresh only the groups seen lately (the smallest
set) and keep serving the last enrichment and namespace it had (a write-through cache).
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from aiohttp import web

from services import dependent
from services.cache import TtlCache
from services.dependent import Switch, fix_gauge
from services.scaling.app import GROUPS
from services.storage import Storage, StorageError
from stormcore import openapi, sqlite
from stormcore.metrics import MetricFactory
from stormcore.openapi import ERROR, Answer, Operation, obj
from stormcore.racks import RackUrls
from stormcore.settings import LabSettings
from stormcore.web import BadRequest, json_error, read_object
from stormcore.window import Window
from stormcore.wire import HostReadings, MetricsStatus

NAMESPACES = ("AWS/EC2", "Custom/app")
GROUPS_TABLE = "metric-groups"  # a namespace's row: its group
SCALING_TABLE = "scaling-groups"  # the groups' enrichment, read from the scaling service's table
TABLES = (GROUPS_TABLE, SCALING_TABLE)  # the tables this service routes to
NAME = re.compile(r"^[A-Za-z0-9_./-]{1,64}$")
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS datapoints (id INTEGER PRIMARY KEY AUTOINCREMENT, namespace TEXT NOT NULL,"
    " name TEXT NOT NULL, grp TEXT NOT NULL, value REAL NOT NULL, enriched INTEGER NOT NULL)",
)
COLUMNS = {"at": "REAL NOT NULL DEFAULT 0"}  # added after the first schema: a store written before gains them
INDEX = "CREATE INDEX IF NOT EXISTS datapoints_series ON datapoints (namespace, grp, name, at)"
PAST_S, AHEAD_S = 14 * 86_400.0, 2 * 3_600.0  # CloudWatch takes a timestamp up to two weeks old and two hours ahead
MAX_READ = 1000


def namespace_key(namespace: str) -> str:
    """A namespace's row key (``AWS/EC2`` has a slash, which a row key may not)."""
    return "ns-" + namespace.encode().hex()


QUOTA_BYTES = 64 * 1024 * 1024  # the datapoints on disk: puts past it are refused (507)


class DatapointStore:
    def __init__(self, path: Path, quota_bytes: int = QUOTA_BYTES) -> None:
        self._db = sqlite.connect(path, SCHEMA, max_bytes=quota_bytes)
        have = {row[1] for row in self._db.execute("PRAGMA table_info(datapoints)")}
        for column, kind in COLUMNS.items():
            if column not in have:
                self._db.execute(f"ALTER TABLE datapoints ADD COLUMN {column} {kind}")
        self._db.execute(INDEX)

    def put(self, namespace: str, name: str, group: str, value: float, enriched: bool, at: float) -> int:
        row = (namespace, name, group, value, int(enriched), at)
        sql = "INSERT INTO datapoints (namespace, name, grp, value, enriched, at) VALUES (?, ?, ?, ?, ?, ?)"
        cursor = sqlite.writing(self._db, sql, row)
        return int(cursor.lastrowid or 0)

    def series(self, namespace: str, name: str, group: str, since: float, limit: int) -> list[tuple[float, float]]:
        """The group's datapoints after ``since`` (epoch seconds), oldest first: (timestamp, value).
        One stored without its group is not in it."""
        sql = (
            "SELECT at, value FROM datapoints WHERE namespace = ? AND grp = ? AND name = ? AND at > ? AND enriched = 1 ORDER BY at LIMIT ?"
        )
        return [(float(a), float(v)) for a, v in self._db.execute(sql, (namespace, group, name, since, limit))]

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM datapoints").fetchone()[0])

    def close(self) -> None:
        self._db.close()


class MetricsService:
    def __init__(self, settings: LabSettings, storage: Storage, store: sqlite.Worker[DatapointStore], f: MetricFactory) -> None:
        self.settings, self.storage, self.store = settings, storage, store
        fix = settings.fix_write_through
        self.namespaces = TtlCache(settings.metric_cache_ttl_s, fix, ride_out=True)  # rides out a storm, as SQS's
        self.groups = TtlCache(settings.metric_cache_ttl_s, fix)
        self.seen: dict[str, float] = {}  # group -> last datapoint
        self.errors, self.gaps = Window(span_s=10.0), Window(span_s=10.0)
        self.puts = f.counter("stormlab_metric_puts_total", "PutMetricData calls by outcome", ("outcome",))
        self.refreshes = f.counter("stormlab_metric_refreshes_total", "Group enrichment refreshes by outcome", ("outcome",))
        gauges = fix_gauge(f, "metrics", {"write-through": fix})
        self.switches = {"write-through": Switch(gauges["write-through"], fix, self._write_through)}
        for outcome in ("stored", "gap", "error"):
            self.puts.labels(outcome)
        for outcome in ("ok", "failed"):
            self.refreshes.labels(outcome)
        self.total = self.failed = self.gapped = 0

    def _write_through(self, on: bool) -> None:
        self.namespaces.serve_stale = self.groups.serve_stale = on

    @property
    def write_through(self) -> bool:
        return self.switches["write-through"].value

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def namespace_ok(self, namespace: str) -> bool:
        if self.namespaces.fresh(namespace, self.now()):
            return True
        try:
            row = await self.storage.get(GROUPS_TABLE, namespace_key(namespace))
            if row is None:  # a namespace's first use registers it
                row = {"namespace": namespace}
                await self.storage.put(GROUPS_TABLE, namespace_key(namespace), row)
        except StorageError:
            return self.namespaces.refresh_failed(namespace)
        self.namespaces.store(namespace, row, self.now())
        return True

    async def put(self, namespace: str, name: str, group: str, value: float, at: float | None = None) -> bool:
        """Store one datapoint (``at``: its timestamp, epoch seconds; now if None); returns whether
        it carries its group (False: a gap)."""
        if group in GROUPS:  # only the scaling service's groups are enriched: the set stays bounded
            self.seen[group] = self.now()
        if not await self.namespace_ok(namespace):
            self.record("error")
            raise StorageError("refused", f"namespace {namespace} could not be confirmed")
        enriched = self.groups.usable(group, self.now())
        await self.store.run(self.store.store.put, namespace, name, group, value, enriched, time.time() if at is None else at)
        self.record("stored" if enriched else "gap")
        return enriched

    def record(self, outcome: str) -> None:
        self.puts.labels(outcome).inc()
        now = self.now()
        self.errors.add(now, 1.0 if outcome == "error" else 0.0)
        if outcome != "error":
            self.gaps.add(now, 1.0 if outcome == "gap" else 0.0)
        self.total += 1
        self.failed += outcome == "error"
        self.gapped += outcome == "gap"

    async def refresh(self) -> None:
        """Every half TTL: the groups' enrichment from the scaling service's table."""
        while True:
            await asyncio.sleep(self.settings.metric_cache_ttl_s / 2)
            now = self.now()
            lately = [g for g, at in self.seen.items() if now - at < self.settings.metric_cache_ttl_s]
            for group in lately if self.write_through else GROUPS:
                try:
                    row = await self.storage.get(SCALING_TABLE, f"group:{group}")
                except StorageError:
                    self.refreshes.labels("failed").inc()
                    continue
                self.refreshes.labels("ok").inc()
                self.groups.store(group, row or {"group": group}, self.now())

    async def clients(self, rng: random.Random) -> None:
        while True:
            await asyncio.sleep(1.0 / self.settings.cascade_rate)
            try:
                await self.put(rng.choice(NAMESPACES), "CPUUtilization", rng.choice(GROUPS), rng.uniform(0, 100))
            except (StorageError, sqlite.StoreFull):
                pass

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        loops = [self.refresh()]
        if self.settings.cascade_rate > 0:
            loops.append(self.clients(random.Random(f"{self.settings.seed}/metrics")))
        return loops

    def close(self) -> None:
        self.store.close(self.store.store.close)

    async def status(self, host: HostReadings) -> MetricsStatus:
        now = self.now()
        return MetricsStatus(
            **host,
            put_error_ratio=self.errors.mean(now),
            gap_ratio=self.gaps.mean(now),
            puts_total=self.total,
            put_failures_total=self.failed,
            gaps_total=self.gapped,
            datapoints_stored=await self.store.run(self.store.store.count),
            fix_write_through=self.write_through,
        )


SERVICE = web.AppKey("metrics", MetricsService)


def create_app(settings: LabSettings, metadata_url: str, rack_urls: RackUrls, data_dir: Path) -> web.Application:
    def make(storage: Storage, f: MetricFactory) -> MetricsService:
        store = sqlite.Worker(lambda: DatapointStore(data_dir / "metrics.sqlite3"), "datapoints")
        return MetricsService(settings, storage, store, f)

    app = dependent.create_app(settings, metadata_url, rack_urls, data_dir, SERVICE, make, MetricsStatus, TABLES)

    async def put(request: web.Request) -> web.Response:
        body = await read_object(request)
        fields = {k: body.get(k) for k in ("namespace", "name", "group")}
        if not all(isinstance(v, str) and NAME.match(v) for v in fields.values()):
            raise BadRequest("namespace, name and group must be 1-64 letters, digits or _ . / -")
        namespace, name, group = (str(fields[k]) for k in ("namespace", "name", "group"))
        value = body.get("value")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or abs(value) > 1e300:
            raise BadRequest("value must be a finite number")
        at = body.get("timestamp")
        now = time.time()
        if at is not None and (isinstance(at, bool) or not isinstance(at, (int, float)) or not now - PAST_S <= at <= now + AHEAD_S):
            raise BadRequest("timestamp must be epoch seconds, at most two weeks old and two hours ahead")
        try:
            enriched = await request.app[SERVICE].put(namespace, name, group, float(value), None if at is None else float(at))
        except StorageError as exc:
            return json_error(503, "namespace_unavailable", str(exc))
        except sqlite.StoreFull as exc:
            return json_error(507, "store_full", f"the datapoints' store is full: {exc}")
        return web.json_response({"stored": True, "enriched": enriched}, status=201)

    async def get(request: web.Request) -> web.Response:
        q = request.query
        fields = {k: q.get(k, "") for k in ("namespace", "name", "group")}
        if not all(NAME.match(v) for v in fields.values()):
            raise BadRequest("namespace, name and group must be 1-64 letters, digits or _ . / -")
        try:
            since, limit = float(q.get("since", "0")), int(q.get("limit", "300"))
        except ValueError:
            raise BadRequest("since is epoch seconds, limit a whole number") from None
        if not math.isfinite(since) or not 1 <= limit <= MAX_READ:
            raise BadRequest(f"since must be finite, limit 1-{MAX_READ}")
        store = request.app[SERVICE].store
        found = await store.run(store.store.series, fields["namespace"], fields["name"], fields["group"], since, limit)
        return web.json_response({"datapoints": [{"timestamp": at, "value": v} for at, v in found]})

    name = {"type": "string", "pattern": NAME.pattern}
    datapoint = obj(namespace=name, name=name, group=name, value={"type": "number", "minimum": -1e300, "maximum": 1e300})
    datapoint["properties"]["timestamp"] = {"type": ["number", "null"], "description": "epoch seconds (absent or null: now)"}
    stored = {
        "type": "object",
        "required": ["stored", "enriched"],
        "properties": {"stored": {"const": True}, "enriched": {"type": "boolean"}},
    }
    openapi.add(app, Operation("POST", "/data", "PutMetricData: a datapoint, enriched with its group's row when it can be read", {
        201: Answer("stored (enriched false: stored without its group)", stored),
        503: Answer("the namespace's metadata could not be read", ERROR),
        507: Answer("the datapoints' store is at its quota on disk (64 MiB): nothing stored", ERROR),
    }, body=datapoint, body_required=True, tag="metrics"), put)  # fmt: skip
    query: list[dict[str, Any]] = [{"name": k, "in": "query", "required": True, "schema": name} for k in ("namespace", "name", "group")]
    query += [
        {"name": "since", "in": "query", "schema": {"type": "number"}, "description": "epoch seconds: datapoints after it (default 0)"},
        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": MAX_READ}, "description": "default 300"},
    ]
    series = obj(datapoints={"type": "array", "items": obj(timestamp={"type": "number"}, value={"type": "number"})})
    openapi.add(app, Operation("GET", "/data", "GetMetricData: a group's series since a time (not a datapoint stored without it)", {
        200: Answer("the datapoints, oldest first", series),
    }, parameters=tuple(query), tag="metrics"), get)  # fmt: skip
    return app
