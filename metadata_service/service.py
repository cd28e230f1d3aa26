"""The metadata service's state: the membership store, the virtual CPU and who may renew.

Routes (``app.py``) and faults (``faults.py``) both act on one :class:`MetadataService`; neither
reaches into the other.
"""

from __future__ import annotations

import asyncio
from collections import deque

from metadata_service.admission import Admission
from metadata_service.membership import MembershipStore
from metadata_service.metrics import MetadataMetrics
from stormcore.cpu_driver import CpuScheduler
from stormcore.fleet import cell_cores
from stormcore.settings import LabSettings
from stormcore.vcpu import VirtualCpu
from stormcore.window import Window

ARRIVALS_KEPT = 20_000


class MetadataService:
    def __init__(self, settings: LabSettings, store: MembershipStore, metrics: MetadataMetrics, cell: int = 0) -> None:
        self.settings, self.store, self.metrics, self.cell = settings, store, metrics, cell
        self.admission = Admission()
        self.cpu = VirtualCpu(cell_cores(cell, settings))
        self.scheduler: CpuScheduler | None = None
        self.latency = Window(span_s=10.0)
        # when each membership request arrived (unix seconds) and whose: the herd's shape after a
        # heal, read back at /arrivals (the last ARRIVALS_KEPT, a few seconds of a storm)
        self.arrivals: deque[tuple[float, str]] = deque(maxlen=ARRIVALS_KEPT)
        self._busy_reported = 0.0
        self._wasted_reported = 0.0
        metrics.version.set(store.version)

    def start(self) -> None:
        """Bind the virtual CPU to the running event loop."""
        self.scheduler = CpuScheduler(self.cpu, self.settings.abandoned_work, self.settings.abandoned_cap)

    @property
    def wasted_s(self) -> float:
        return self.scheduler.wasted_s if self.scheduler else 0.0

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def sync_metrics(self) -> None:
        """Bring counters up to the model's totals (called before each scrape and status)."""
        if self.scheduler is not None:
            self.scheduler.poll()
        busy, wasted = self.cpu.busy_core_seconds, self.wasted_s
        self.metrics.busy.inc(busy - self._busy_reported)
        self.metrics.wasted.inc(wasted - self._wasted_reported)
        self._busy_reported, self._wasted_reported = busy, wasted
        self.metrics.inflight.set(self.cpu.inflight)
        self.metrics.cores.set(self.cpu.cores)
        self.metrics.paused.set(1 if self.admission.paused else 0)

    def store_changed(self) -> None:
        self.metrics.version.set(self.store.version)

    async def on_cpu(self, kind: str, work_s: float) -> None:
        """Serve ``work_s`` on the virtual CPU, counting the request as abandoned if its client leaves."""
        assert self.scheduler is not None, "the service has not started"
        started = self.now()
        try:
            await self.scheduler.run(work_s)
        except asyncio.CancelledError:
            self.metrics.requests.labels(kind, "abandoned").inc()
            raise
        elapsed = self.now() - started
        self.metrics.processing.labels(kind).observe(elapsed)
        self.metrics.requests.labels(kind, "ok").inc()
        if kind == "membership":
            self.latency.add(self.now(), elapsed)

    async def set_capacity(self, cores: float, bypass: bool) -> None:
        """The admin path of 2015: through the same virtual CPU as the renewals, unless ``bypass``."""
        if not bypass and not self.settings.admin_apart:
            await self.on_cpu("admin", self.settings.admin_cost_s)
        assert self.scheduler is not None
        self.scheduler.set_cores(cores)

    def pause(self) -> int:
        epoch = self.admission.pause()
        self.metrics.paused.set(1)
        return epoch

    def resume(self, groups: int = 1, every_s: float = 0.0) -> int:
        epoch = self.admission.resume(self.now(), groups, every_s)
        self.metrics.paused.set(0)
        return epoch
