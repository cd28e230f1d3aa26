"""The virtual CPU's driver in virtual time: abandoned work that keeps running is bounded."""

import asyncio

import pytest

from stormcore.cpu_driver import CpuScheduler
from stormcore.vcpu import VirtualCpu
from tests.virtual_loop import VirtualLoop


@pytest.mark.parametrize("mode, cap, left", [("continue", 5, 5), ("continue", 100, 20), ("cancel", 5, 0)])
def test_requests_whose_clients_left_are_kept_up_to_the_cap(mode, cap, left):
    loop = VirtualLoop()
    try:

        async def clients_give_up():
            scheduler = CpuScheduler(VirtualCpu(cores=1.0, now=loop.time()), mode, cap)
            tasks = [asyncio.ensure_future(scheduler.run(100.0)) for _ in range(20)]  # big renewals
            await asyncio.sleep(0)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return scheduler

        scheduler = loop.run_until_complete(clients_give_up())
        assert scheduler.cpu.inflight == left and scheduler.abandoned == (left if mode == "continue" else 0)
        loop.advance(100.0 * left + 1)  # what is kept still finishes, as wasted work
        assert scheduler.cpu.inflight == 0 and scheduler.abandoned == 0
    finally:
        loop.close()
