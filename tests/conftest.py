import asyncio
import signal
import time

import pytest

from stormcore.errors import LabError
from stormcore.settings import LabSettings


@pytest.fixture
def tiny_settings() -> LabSettings:
    """20 nodes in one rack, renewing every 0.2 s: serving within a fraction of a second."""
    return LabSettings(racks=1, nodes_per_rack=20, renewal_period_s=0.2, probe_interval_s=0.05, probe_timeout_s=0.2, customer_rate=0)


async def eventually(check, timeout_s: float = 5.0, interval_s: float = 0.05, what: str = "the condition"):
    """Poll an async check until it returns a truthy value (bounded in time); a check that raises
    OSError, TimeoutError or LabError (a process restarting, not answering yet) is asked again."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            result = await check()
        except (OSError, TimeoutError, LabError):
            result = None
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"{what} not met within {timeout_s:g}s")
        await asyncio.sleep(interval_s)


def ctrl_c_reaches_it() -> None:
    """A child's ``preexec_fn``: SIGINT at its default, so Python turns it into KeyboardInterrupt.
    A suite started as a background job (``cmd &``, as CI runners may) ignores SIGINT, and a
    child inherits that: a test that presses Ctrl-C would press nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def until(check, limit_s: float = 20.0, interval_s: float = 0.2, what: str = "the condition"):
    """The same, for a plain check: poll until it returns a truthy value, within ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            result = check()
        except (OSError, TimeoutError, LabError):
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {limit_s:g}s")
        time.sleep(interval_s)
