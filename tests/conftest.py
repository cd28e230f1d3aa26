import asyncio

import pytest

from stormcore.settings import LabSettings


@pytest.fixture
def tiny_settings() -> LabSettings:
    """20 nodes in one rack, renewing every 0.2 s: serving within a fraction of a second."""
    return LabSettings(racks=1, nodes_per_rack=20, renewal_period_s=0.2, probe_interval_s=0.05, probe_timeout_s=0.2, customer_rate=0)


async def eventually(check, timeout_s: float = 5.0, interval_s: float = 0.05):
    """Poll an async check until it returns a truthy value (bounded in time)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        result = await check()
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        await asyncio.sleep(interval_s)
