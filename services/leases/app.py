"""leases: the lab's lease manager (EC2's DropletWorkflow Manager, DWFM), the aws-2025-10 profile.

It holds a lease on each of ``lease_droplets`` droplets, dealt out among ``lease_hosts`` hosts.
Each host keeps a FIFO queue of work and ``lease_workers`` workers sharing its
``lease_host_cores`` virtual cores (processor sharing, stormcore.vcpu): every droplet asks
once a ``lease_check_period_s`` for a check (a read of its row in the lab's storage, which plays
DynamoDB) or, holding no lease, for a lease (a write, then ``lease_establish_cost_s`` of CPU).
An item finished past ``lease_timeout_s`` after it was queued is thrown away and queued again
(services/leases/host.py decides every item). The customers launch ``launch_rate`` instances a
second, each placed on a random droplet: it needs the droplet's lease.

The storage racks are dialled by a DNS name (services/leases/endpoint.py): the fault
``dns-empty`` empties its record, so new connections fail to resolve and the checks fail; the
leases lapse after ``lease_ttl_s``. When the record is back, every droplet asks for a lease at
once. The operators' moves are leases on this process: ``throttle-work``, ``restart-host``,
``queue-limit`` (AWS's fix); ``stormlab ops repair-endpoint`` ends the ``dns-empty`` leases.

  GET  /status, /metrics, /healthz
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from aiohttp import web

from chaos.control import Plan
from services import dependent
from services.dependent import Switch, fix_gauge
from services.leases.endpoint import EMPTY, OK, Endpoint, EndpointStorage
from services.leases.host import CHECK, LAUNCH_OUTCOMES, LAUNCHED, OUTCOMES, Fleet, hosts_of
from services.storage import StorageError
from stormcore.cpu_driver import CpuScheduler
from stormcore.metrics import POLICY_BROKEN, POLICY_BROKEN_DOC, MetricFactory
from stormcore.racks import RackUrls
from stormcore.retry import CALLS
from stormcore.settings import LabSettings
from stormcore.vcpu import VirtualCpu
from stormcore.web import BadRequest
from stormcore.window import Window
from stormcore.wire import HostReadings, LeasesStatus

TABLE = "sessions"  # the lease records' table: one of the lab's (a table of its own would move the 2015 storm's layout)
TICK_S = 0.1  # wall seconds between the droplets' asks and the launches
RATE_SPAN_S = 10.0  # wall seconds behind each rate in /status


class LeaseService:
    def __init__(self, settings: LabSettings, storage: EndpointStorage, f: MetricFactory) -> None:
        self.settings, self.storage, self.endpoint = settings, storage, storage.endpoint
        self.loop = asyncio.get_running_loop()
        now = self.now()
        s = settings
        self.fleet = Fleet(s.lease_droplets, s.lease_hosts)
        self.policy_broken = f.counter(POLICY_BROKEN, POLICY_BROKEN_DOC, ("call",))
        for call in CALLS:
            self.policy_broken.labels(call)
        self.hosts = hosts_of(s, now, now + s.lease_ttl_s, strict=False, told=lambda call: self.policy_broken.labels(call).inc())
        self.cpus = [CpuScheduler(VirtualCpu(s.lease_host_cores, now), "cancel") for _ in self.hosts]
        self.wake = [asyncio.Event() for _ in self.hosts]
        self.busy = [0 for _ in self.hosts]
        self.restarts = [0 for _ in self.hosts]
        self.crews: list[set[asyncio.Task[None]]] = [set() for _ in self.hosts]
        self.window = Window(span_s=RATE_SPAN_S)
        self.marks: deque[tuple[float, int, int]] = deque()  # (t, established, timed out) each tick
        self.launched = self.launch_failed = 0
        self.launches = f.counter("stormlab_launches_total", "Customers' instance launches by outcome", ("outcome",))
        self.work = f.counter(
            "stormlab_lease_work_total", "Lease manager work items a worker finished, by kind and outcome", ("kind", "outcome")
        )
        self.throttled = f.counter(
            "stormlab_lease_asks_throttled_total", "Droplets' asks for a lease refused by the throttle or the queue limit"
        )
        self.restarted = f.counter("stormlab_lease_host_restarts_total", "Lease manager hosts restarted (their queues dropped)", ("host",))
        self.active = f.gauge("stormlab_leases_active", "Droplets holding an active lease")
        self.queued = f.gauge("stormlab_lease_queue", "Work items waiting in a lease manager host's queue", ("host",))
        self.flight = f.gauge("stormlab_lease_in_flight", "Work items a lease manager host's workers are on", ("host",))
        self.empty = f.gauge("stormlab_lease_endpoint_empty", "1 while the database endpoint's DNS record is empty (the fault)")
        self.wasted = f.gauge("stormlab_lease_wasted_core_seconds", "Core-seconds spent on work that timed out (profile time)")
        for outcome in LAUNCH_OUTCOMES:
            self.launches.labels(outcome)
        for kind in (CHECK, "establish"):
            for outcome in OUTCOMES:
                self.work.labels(kind, outcome)
        gauges = fix_gauge(f, "leases", {"throttle": s.lease_admit_rate, "queue-limit": s.lease_queue_limit})
        self.switches = {
            "throttle-work": Switch(gauges["throttle"], s.profile_time().lease_admit_rate, self._throttle),
            "queue-limit": Switch(gauges["queue-limit"], s.lease_queue_limit, self._queue_limit),
            "dns-empty": Switch(self.empty, False, self._record),
        }
        self.actions = {"restart-host": self.restart_plan}

    def now(self) -> float:
        return self.loop.time()

    # -- the operators' moves ----------------------------------------------------------------
    def _throttle(self, rate: float) -> None:
        """``rate`` is in profile time (the catalog's); the hosts count wall seconds."""
        for host in self.hosts:
            host.throttle(self.settings.pace.per_wall(float(rate)), self.now())

    def _queue_limit(self, limit: int) -> None:
        for host in self.hosts:
            host.set_queue_limit(int(limit))

    def _record(self, empty: bool) -> None:
        self.endpoint.record = EMPTY if empty else OK

    def restart_plan(self, values: dict[str, Any]) -> Plan:
        index = int(values["host"])
        if index >= len(self.hosts):
            raise BadRequest(f"restart-host: the lease manager has hosts 0 to {len(self.hosts) - 1}, not {index}")
        return Plan("leases", lambda: self.restart(index), lambda: None, {"host": index})

    def restart(self, index: int) -> None:
        """Host ``index`` restarts: its workers stop (their CPU work dropped), its queue goes, new
        workers start on an empty queue."""
        for task in self.crews[index]:
            task.cancel()
        self.hosts[index].restart(self.busy[index])
        self.restarts[index] += 1
        self.restarted.labels(str(index)).inc()
        self.crews[index] = set()
        self._start_crew(index)

    # -- the workers -------------------------------------------------------------------------
    def _start_crew(self, index: int) -> None:
        for _ in range(self.settings.lease_workers):
            task = self.loop.create_task(self.worker(index))
            self.crews[index].add(task)
            task.add_done_callback(self.crews[index].discard)

    async def worker(self, index: int) -> None:
        host, cpu = self.hosts[index], self.cpus[index]
        while True:
            item = host.take()
            if item is None:
                self.wake[index].clear()
                await self.wake[index].wait()
                continue
            generation = host.generation
            self.busy[index] += 1
            try:
                ok = await self.database(index, item.kind, item.droplet)
                if ok:
                    await cpu.run(host.rules.cost(item.kind))
            finally:
                self.busy[index] -= 1
            outcome = host.finish(item, self.now(), ok, generation)
            self.work.labels(item.kind, outcome).inc()

    async def database(self, index: int, kind: str, droplet: int) -> bool:
        """The item's call to the database: a check reads the droplet's row, a lease writes it."""
        key = f"droplet-{droplet}"
        try:
            if kind == CHECK:
                await self.storage.get(TABLE, key)
            else:
                await self.storage.put(TABLE, key, {"host": index, "at": round(time.time(), 3)})
        except StorageError:
            return False
        return True

    # -- the droplets and the customers ------------------------------------------------------
    async def ticks(self, rng: random.Random) -> None:
        """The droplets' asks, each at its moment of the period, and the customers' launches."""
        since, debt = self.now(), 0.0
        while True:
            await asyncio.sleep(TICK_S)
            now = self.now()
            for index, host in enumerate(self.hosts):
                before = host.counts.throttled
                host.release(now)
                for droplet in host.due(since, now):
                    host.ask(droplet, now)
                self.throttled.inc(host.counts.throttled - before)
                if host.queue:
                    self.wake[index].set()
            debt += self.settings.launch_rate * (now - since)
            while debt >= 1.0:
                debt -= 1.0
                self.launch(rng.randrange(self.settings.lease_droplets), now)
            self.marks.append((now, *self._totals()))
            while self.marks and self.marks[0][0] < now - RATE_SPAN_S:
                self.marks.popleft()
            since = now

    def launch(self, droplet: int, now: float) -> str:
        outcome = self.hosts[self.fleet.host_of(droplet)].launch(droplet, now)
        self.launches.labels(outcome).inc()
        self.window.add(now, 0.0 if outcome == LAUNCHED else 1.0)
        self.launched += 1
        self.launch_failed += outcome != LAUNCHED
        return outcome

    def _totals(self) -> tuple[int, int]:
        return sum(h.counts.established for h in self.hosts), sum(h.counts.timed_out for h in self.hosts)

    def _rates(self) -> tuple[float, float]:
        """Leases established and items timed out a profile second, over the last RATE_SPAN_S."""
        if len(self.marks) < 2:
            return 0.0, 0.0
        (t0, e0, o0), (t1, e1, o1) = self.marks[0], self.marks[-1]
        span = self.settings.pace.profile(t1 - t0) or 1.0
        return (e1 - e0) / span, (o1 - o0) / span

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        for index in range(len(self.hosts)):
            self._start_crew(index)
        return [self.ticks(random.Random(f"{self.settings.seed}/launches")), self.storage.recycle()]

    def close(self) -> None:
        for crew in self.crews:
            for task in crew:
                task.cancel()

    async def status(self, host: HostReadings) -> LeasesStatus:
        now = self.now()
        established, timed_out = self._rates()
        active = [h.active(now) for h in self.hosts]
        self.active.set(sum(active))
        for index, h in enumerate(self.hosts):
            self.queued.labels(str(index)).set(len(h.queue))
            self.flight.labels(str(index)).set(self.busy[index])
        self.wasted.set(self.settings.pace.profile(sum(h.counts.wasted_s for h in self.hosts)))
        return LeasesStatus(
            **host,
            launch_error_ratio=self.window.mean(now),
            launches_total=self.launched,
            launch_failures_total=self.launch_failed,
            droplets=self.settings.lease_droplets,
            leases_active=sum(active),
            established_per_s=round(established, 3),
            timed_out_per_s=round(timed_out, 3),
            queued=sum(len(h.queue) for h in self.hosts),
            in_flight=sum(self.busy),
            endpoint=self.endpoint.record,
            admit_rate=round(self.settings.pace.per_profile(self.hosts[0].admit_rate), 6),
            queue_limit=self.hosts[0].rules.queue_limit,
            hosts=[
                {"host": i, "queued": len(h.queue), "in_flight": self.busy[i], "leases": active[i], "restarts": self.restarts[i]}
                for i, h in enumerate(self.hosts)
            ],
        )


SERVICE = web.AppKey("leases", LeaseService)


def create_app(settings: LabSettings, metadata_url: str, rack_urls: RackUrls, data_dir: Path) -> web.Application:
    endpoint = Endpoint()
    return dependent.create_app(
        settings,
        metadata_url,
        rack_urls,
        data_dir,
        SERVICE,
        lambda storage, f: LeaseService(settings, storage, f),  # type: ignore[arg-type]
        LeasesStatus,
        (TABLE,),
        storage_type=lambda *args: EndpointStorage(endpoint, *args),
    )
