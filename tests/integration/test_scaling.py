"""The scaling service on a real small lab: its API refuses bad input; its table lives on the
big-membership nodes, so when they refuse, API writes fail and the scheduler's backlog grows,
then drains at the workers' pace; more workers and pruning drain it faster."""

import asyncio

import aiohttp
import pytest

from stormcore.auth import ensure_token, headers
from stormcore.settings import LabSettings
from stormlab.engine import launcher
from tests.integration.lab import wait_serving

SMALL = {
    "racks": 2,
    "nodes_per_rack": 20,
    "renewal_period_s": 1.0,
    "customer_rate": 0,
    "cascade_rate": 5,
    "activity_rate": 5,
    "activity_work_s": 0.15,
}


def start(tmp_path, monkeypatch, **changes):
    directory = (tmp_path / "state").resolve()
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(directory))
    state = launcher.up(LabSettings(**SMALL | changes), base_port=0, directory=directory)
    wait_serving(state)
    return state, directory


async def status(s, url):
    async with s.get(f"{url}/status") as r:
        return await r.json()


async def until(check, limit_s=30.0):
    for _ in range(int(limit_s / 0.2)):
        if await check():
            return
        await asyncio.sleep(0.2)
    raise AssertionError("condition not met in time")


async def outage_then_drain(state, directory, seconds: float) -> dict:
    """Pause the metadata service for ``seconds`` (every node refuses), then time the drain."""
    scaling = state["components"]["scaling"]["url"]
    async with aiohttp.ClientSession() as s:
        await until(lambda: calm(s, scaling))
        async with s.post(
            f"{state['components']['metadata']['url']}/faults",
            json={"fault": "pause-metadata", "duration_s": seconds},
            headers=headers(ensure_token(directory)),
        ) as r:
            assert r.status == 201
        await asyncio.sleep(seconds)
        peak = (await status(s, scaling))["backlog"]
        loop = asyncio.get_running_loop()
        back = loop.time()
        await until(lambda: drained(s, scaling), limit_s=120)
        return {"peak_backlog": peak, "drain_s": loop.time() - back, **(await status(s, scaling))}


async def drained(s, url) -> bool:
    return (await status(s, url))["backlog"] <= 2


async def calm(s, url) -> bool:
    st = await status(s, url)
    return st["backlog"] <= 2 and (st["api_error_ratio"] or 0) < 0.05 and st["api_requests_total"] > 10


@pytest.mark.timeout(120)
def test_bad_input_gets_a_json_4xx(tmp_path, monkeypatch):
    state, directory = start(tmp_path, monkeypatch, cascade_rate=0, activity_rate=0)
    scaling = state["components"]["scaling"]["url"]

    async def scenario():
        async with aiohttp.ClientSession() as s:
            for path, body, code in [
                ("/groups/g-99", {"desired": 1}, 404),
                ("/groups/g-1", {"desired": -1}, 400),
                ("/groups/g-1", {"desired": "3"}, 400),
                ("/groups/g-1", {"desired": 1.5}, 400),
                ("/groups/g-1", [1], 400),
                ("/groups/g-1", {}, 400),
            ]:
                async with s.put(scaling + path, json=body) as r:
                    answer = await r.json()
                    assert r.status == code and "error" in answer, (path, body, r.status, answer)
            assert (await status(s, scaling))["backlog"] == 0

    try:
        asyncio.run(scenario())
    finally:
        assert launcher.down(directory)


@pytest.mark.timeout(240)
def test_the_backlog_grows_while_writes_fail_and_drains_faster_with_the_fixes(tmp_path, monkeypatch):
    results = {}
    for name, fixes in (("2015", {}), ("fixed", {"scaling_workers": 4, "fix_prune_activities": True})):
        state, directory = start(tmp_path / name, monkeypatch, **fixes)
        try:
            results[name] = asyncio.run(outage_then_drain(state, directory, 8.0))
        finally:
            assert launcher.down(directory)
    print({k: {m: v[m] for m in ("peak_backlog", "drain_s", "activities_pruned")} for k, v in results.items()})
    assert results["2015"]["peak_backlog"] >= 20  # ~5 activities a second arrived with nowhere to go
    assert results["2015"]["api_failures_total"] > 0
    assert results["2015"]["drain_s"] >= 4 * results["fixed"]["drain_s"]
