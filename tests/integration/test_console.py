"""The console on a real small lab: bad logins are refused; once the metadata service is paused,
a login waits out its long lookup timeout, unless the short-timeout fix is on."""

import asyncio

import aiohttp
import pytest

from tests.conftest import eventually

QUIET = {"customer_rate": 0, "cascade_rate": 0}  # only the test's own logins


async def login(s, url, user="ada"):
    async with s.post(f"{url}/login", json={"user": user}, timeout=aiohttp.ClientTimeout(total=5)) as r:
        return r.status, await r.json()


async def logins_during_a_pause(started) -> list[dict]:
    console = started.url("console")
    async with aiohttp.ClientSession() as s:

        async def looked_up() -> bool:
            return (await login(s, console))[1]["lookup"] == "ok"

        await eventually(looked_up, timeout_s=20, interval_s=0.2, what="a login whose lookup answers")
        started.lease({"fault": "pause-metadata", "duration_s": 12})
        await asyncio.sleep(2.5)  # every node refuses now
        return [(await login(s, console, f"user-{i}"))[1] for i in range(3)]


def run_pause(lab, **changes) -> list[dict]:
    started = lab(cascade=("console",), **QUIET | changes)
    try:
        return asyncio.run(logins_during_a_pause(started))
    finally:
        started.stop()  # one lab at a time: the logins are timed


@pytest.mark.lab
@pytest.mark.timeout(120)
def test_a_login_waits_out_the_long_lookup_timeout_and_fails_fast_with_the_fix(lab):
    slow = run_pause(lab, login_lookup_timeout_s=1.5)
    fast = run_pause(lab, login_lookup_timeout_s=1.5, fix_short_timeout=True)
    print({"2015": slow, "fixed": fast})
    assert all(r["lookup"] == "skipped" and r["seconds"] >= 1.4 for r in slow)  # logged in, but late
    assert all(r["lookup"] == "skipped" and r["seconds"] < 0.3 for r in fast)


@pytest.mark.timeout(60)
def test_a_login_refuses_bad_input(lab):
    console = lab(cascade=("console",), **QUIET).url("console")

    async def scenario():
        async with aiohttp.ClientSession() as s:
            for body in ({}, {"user": ""}, {"user": "a/b"}, {"user": 7}, {"user": "x" * 65}, [1]):
                async with s.post(f"{console}/login", json=body) as r:
                    assert r.status == 400 and "error" in await r.json(), body
            async with s.get(f"{console}/status") as r:
                assert (await r.json())["logins_total"] == 0

    asyncio.run(scenario())
