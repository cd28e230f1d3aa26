"""scaling: the lab's Auto Scaling. Its groups and activities live in the lab's ``scaling-groups``
table, spread over the fleet like every table: in a storm the calls whose rows sit on
disqualified nodes fail (about the share of the table's partitions there), the rest go through.

  PUT  /groups/{group}  {"desired": N}   set a group's desired capacity: the group row is
                                         written to the table (503 when its node refuses) and an
                                         activity is queued
  GET  /status, /metrics, /healthz

A background scheduler queues launch/terminate activities (``activity_rate`` a second, whatever
the table does) and its workers finish each by writing it to the table, ``activity_work_s``
apiece. While those writes fail, the backlog grows; it drains long after the API is back. The
service's own clients set desired capacities ``cascade_rate`` times a second. AWS's fixes:
``scaling_workers`` (the backlog partitioned across them) and ``fix_prune_activities``.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from aiohttp import web

from services import dependent
from services.dependent import Switch, fix_gauge
from services.scaling.backlog import Activity, Backlog
from services.storage import Storage, StorageError
from stormcore import openapi
from stormcore.metrics import MetricFactory
from stormcore.openapi import ERROR, Answer, Operation
from stormcore.racks import RackUrls
from stormcore.settings import LabSettings
from stormcore.web import json_error, number, read_object
from stormcore.window import Window
from stormcore.wire import HostReadings, ScalingStatus

TABLE = "scaling-groups"
GROUPS = tuple(f"g-{i}" for i in range(8))
RETRY_S = 0.5  # a worker whose write failed tries again after this


class ScalingService:
    def __init__(self, settings: LabSettings, storage: Storage, f: MetricFactory) -> None:
        self.settings, self.storage = settings, storage
        self.backlog = Backlog(settings.scaling_workers, settings.fix_prune_activities)
        self.window = Window(span_s=10.0)
        self.ids = itertools.count(1)
        self.api = f.counter("stormlab_scaling_api_requests_total", "Scaling API calls (set desired capacity) by outcome", ("outcome",))
        self.activities = f.counter("stormlab_scaling_activities_total", "Scheduler activities by what became of them", ("outcome",))
        self.backlog_size = f.gauge("stormlab_scaling_backlog", "Activities waiting for a worker")
        self.backlog_age = f.gauge("stormlab_scaling_backlog_oldest_seconds", "Age of the oldest waiting activity")
        gauges = fix_gauge(f, "scaling", {"more-workers": settings.scaling_workers, "prune-activities": settings.fix_prune_activities})
        self.switches = {
            "scale-workers": Switch(gauges["more-workers"], settings.scaling_workers, self._resize),
            "prune-activities": Switch(gauges["prune-activities"], settings.fix_prune_activities, self._prune),
        }
        self._extra: set[asyncio.Task[None]] = set()  # workers started by a scale-workers lease
        self._live: set[int] = set()  # the indices that have a worker running: never two for one
        for outcome in ("ok", "failed"):
            self.api.labels(outcome)
        for outcome in ("queued", "done", "write_failed", "pruned"):
            self.activities.labels(outcome)
        self.calls = self.failed = self.done = 0

    def _prune(self, on: bool) -> None:
        self.backlog.prune = on

    def _resize(self, workers: int) -> None:
        """Workers beyond the new count stop after their activity; new ones start now."""
        before = self.backlog.workers
        self.backlog.resize(workers)
        for index in range(before, workers):
            if index in self._live:  # still finishing its activity from before a shrink: it carries on
                continue
            task = asyncio.get_running_loop().create_task(self.worker(index))
            self._extra.add(task)
            task.add_done_callback(self._extra.discard)

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def queue(self, group: str, desired: int) -> None:
        before = self.backlog.pruned
        self.backlog.add(Activity(next(self.ids), group, desired, self.now()))
        self.activities.labels("queued").inc()
        self.activities.labels("pruned").inc(self.backlog.pruned - before)
        self.backlog_size.set(len(self.backlog))

    async def set_desired(self, group: str, desired: int) -> None:
        """The API: the group's row goes to the table (the scheduler acts on it later)."""
        try:
            await self.storage.put(TABLE, f"group:{group}", {"group": group, "desired": desired})
        except StorageError:
            self.record(False)
            raise
        self.record(True)

    def record(self, ok: bool) -> None:
        self.api.labels("ok" if ok else "failed").inc()
        self.window.add(self.now(), 0.0 if ok else 1.0)
        self.calls += 1
        self.failed += 0 if ok else 1

    def worker(self, index: int) -> Coroutine[Any, Any, None]:
        """The worker for ``index`` (one at a time: it runs until the backlog has fewer workers)."""
        self._live.add(index)
        return self._work(index)

    async def _work(self, index: int) -> None:
        try:
            while index < self.backlog.workers:
                activity = self.backlog.take(index)
                if activity is None:
                    await asyncio.sleep(0.05)
                    continue
                try:
                    await asyncio.sleep(self.settings.activity_work_s)  # launching or terminating an instance
                    await self.storage.put(TABLE, f"activity:{activity.id}", {"group": activity.group, "desired": activity.desired})
                except StorageError:
                    self.activities.labels("write_failed").inc()
                    self.backlog.release(activity)
                    await asyncio.sleep(RETRY_S)
                    continue
                except BaseException:  # cancelled on it (the service stopping): not done, not busy
                    self.backlog.release(activity)
                    raise
                self.backlog.done(index, activity)
                self.activities.labels("done").inc()
                self.done += 1
                self.backlog_size.set(len(self.backlog))
        finally:
            self._live.discard(index)

    async def scheduler(self, rng: random.Random) -> None:
        """Activities the service itself decides on (replacements, scheduled changes)."""
        while True:
            await asyncio.sleep(1.0 / self.settings.activity_rate)
            self.queue(rng.choice(GROUPS), rng.randrange(1, 20))

    async def clients(self, rng: random.Random) -> None:
        while True:
            await asyncio.sleep(1.0 / self.settings.cascade_rate)
            try:
                await self.set_desired(rng.choice(GROUPS), rng.randrange(1, 20))
            except StorageError:
                pass

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        loops = [self.worker(i) for i in range(self.settings.scaling_workers)]
        if self.settings.activity_rate > 0:
            loops.append(self.scheduler(random.Random(f"{self.settings.seed}/scheduler")))
        if self.settings.cascade_rate > 0:
            loops.append(self.clients(random.Random(f"{self.settings.seed}/scaling")))
        return loops

    def close(self) -> None:
        for task in self._extra:
            task.cancel()

    async def status(self, host: HostReadings) -> ScalingStatus:
        now = self.now()
        self.backlog_age.set(self.backlog.oldest_age_s(now))
        return ScalingStatus(
            **host,
            api_error_ratio=self.window.mean(now),
            api_requests_total=self.calls,
            api_failures_total=self.failed,
            backlog=len(self.backlog),
            backlog_oldest_s=round(self.backlog.oldest_age_s(now), 3),
            activities_done=self.done,
            activities_pruned=self.backlog.pruned,
            workers=self.backlog.workers,
            fix_prune_activities=self.backlog.prune,
        )


SERVICE = web.AppKey("scaling", ScalingService)


def create_app(settings: LabSettings, metadata_url: str, rack_urls: RackUrls, data_dir: Path) -> web.Application:
    app = dependent.create_app(
        settings,
        metadata_url,
        rack_urls,
        data_dir,
        SERVICE,
        lambda storage, f: ScalingService(settings, storage, f),
        ScalingStatus,
        (TABLE,),
    )

    async def set_desired(request: web.Request) -> web.Response:
        group = request.match_info["group"]
        if group not in GROUPS:
            raise web.HTTPNotFound(text=f"no group {group!r}; groups: {', '.join(GROUPS)}")
        desired = int(number(await read_object(request), "desired", 0, 10_000, integer=True))
        try:
            await request.app[SERVICE].set_desired(group, desired)
        except StorageError as exc:
            return json_error(503, "table_unavailable", f"the group's row could not be written: {exc}")
        return web.json_response({"group": group, "desired": desired})

    where = ({"name": "group", "in": "path", "required": True, "schema": {"type": "string", "examples": list(GROUPS)}},)
    desired = {"type": "object", "required": ["desired"], "properties": {"desired": {"type": "integer", "minimum": 0, "maximum": 10_000}}}
    done = {"type": "object", "required": ["group", "desired"], "properties": {"group": {"type": "string"}, "desired": {"type": "integer"}}}
    openapi.add(app, Operation("PUT", "/groups/{group}", "SetDesiredCapacity: the group's row is written to the database", {
        200: Answer("written; the scaling activity waits for a worker", done),
        404: Answer("no such group", ERROR),
        503: Answer("the group's row could not be written", ERROR),
    }, parameters=where, body=desired, body_required=True, tag="scaling"), set_desired)  # fmt: skip
    return app
