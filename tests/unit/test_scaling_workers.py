"""scale-workers released and taken again while a worker is still on its activity: one worker
per index, so no activity is worked (and written) twice."""

import asyncio
import collections

from services.scaling.app import ScalingService
from stormcore.metrics import MetricFactory
from stormcore.settings import LabSettings


class Table:
    def __init__(self) -> None:
        self.writes: collections.Counter[str] = collections.Counter()

    async def put(self, table, key, row, **_):
        self.writes[key] += 1


async def test_a_scale_workers_lease_released_and_taken_again_runs_one_worker_per_index():
    settings = LabSettings(scaling_workers=1, activity_work_s=0.05, activity_rate=0, cascade_rate=0)
    table = Table()
    service = ScalingService(settings, table, MetricFactory())  # type: ignore[arg-type]
    tasks = [asyncio.create_task(c) for c in service.loops()]
    try:
        switch = service.switches["scale-workers"]
        for _ in range(3):  # held, released within one activity, held again
            switch.hold("lease", 4)
            for i in range(40):
                service.queue(f"g-{i % 8}", i)
            await asyncio.sleep(0.07)  # the new workers are each on an activity
            switch.release("lease")
            await asyncio.sleep(0.01)
        switch.hold("lease", 4)
        for _ in range(200):
            if not len(service.backlog):
                break
            await asyncio.sleep(0.05)
        assert len(service.backlog) == 0
        twice = {key: n for key, n in table.writes.items() if n > 1}
        assert twice == {} and len(table.writes) == 120
    finally:
        for task in tasks + list(service._extra):
            task.cancel()
        await asyncio.gather(*tasks, *service._extra, return_exceptions=True)
