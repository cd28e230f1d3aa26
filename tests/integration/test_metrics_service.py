"""The metrics service on a real small lab: when the scaling table refuses, datapoints lose their
group (gaps) but are stored; once every node refuses, PutMetricData fails after the cache's TTL;
the write-through fix keeps both going; every datapoint it accepted is stored, across a SIGKILL."""

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
    "cascade_rate": 0,
    "activity_rate": 0,
    "metric_cache_ttl_s": 1.0,
}


async def put(s, url, i, group="g-1"):
    body = {"namespace": "AWS/EC2", "name": "CPUUtilization", "group": group, "value": float(i)}
    async with s.post(f"{url}/data", json=body, timeout=aiohttp.ClientTimeout(total=5)) as r:
        return r.status, await r.json()


async def lease(s, state, directory, body):
    url = state["metadata" if body["fault"] != "kill" else "supervisor"]
    async with s.post(f"{url}/faults", json=body, headers=headers(ensure_token(directory))) as r:
        assert r.status == 201, await r.text()


async def story(state, directory) -> dict:
    url = state["components"]["metrics"]["url"]
    where = {"metadata": state["components"]["metadata"]["url"], "supervisor": state["supervisor_url"]}
    out = {"accepted": 0}
    async with aiohttp.ClientSession() as s:
        for _ in range(100):
            status, answer = await put(s, url, 0)
            out["accepted"] += status == 201
            if status == 201 and answer["enriched"]:
                break
            await asyncio.sleep(0.2)
        await lease(s, where, directory, {"fault": "stuck-partition", "tables": ["scaling-groups"], "duration_s": 5})
        await asyncio.sleep(2.5)  # the enrichment is older than its TTL and cannot be refreshed
        stuck = [await put(s, url, i) for i in range(20)]
        out["stuck"] = [(code, a.get("enriched")) for code, a in stuck]
        await asyncio.sleep(3)
        await lease(s, where, directory, {"fault": "pause-metadata", "duration_s": 6})
        await asyncio.sleep(3)  # every node refuses: the namespace cannot be confirmed either
        paused = [await put(s, url, i) for i in range(20)]
        out["paused"] = [code for code, _ in paused]
        out["accepted"] += sum(code == 201 for code, _ in stuck + paused)
        await lease(s, where, directory, {"fault": "kill", "target": "metrics", "duration_s": 1})
        await asyncio.sleep(4)
        for _ in range(100):
            try:
                async with s.get(f"{url}/status") as r:
                    out["stored"] = (await r.json())["datapoints_stored"]
                    break
            except aiohttp.ClientError:
                await asyncio.sleep(0.2)
    return out


def run(tmp_path, monkeypatch, **changes) -> dict:
    directory = (tmp_path / "state").resolve()
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(directory))
    state = launcher.up(LabSettings(**SMALL | changes), base_port=0, directory=directory)
    wait_serving(state)
    try:
        return asyncio.run(story(state, directory))
    finally:
        assert launcher.down(directory)


@pytest.mark.timeout(180)
def test_gaps_when_the_scaling_table_refuses_errors_when_every_node_does_and_the_fix_keeps_both_going(tmp_path, monkeypatch):
    plain = run(tmp_path / "2015", monkeypatch)
    fixed = run(tmp_path / "fixed", monkeypatch, fix_write_through=True)
    print({"2015": plain, "fixed": fixed})
    assert all(code == 201 for code, _ in plain["stuck"]) and all(enriched is False for _, enriched in plain["stuck"])
    assert plain["paused"].count(503) >= 15
    assert fixed["stuck"] == [(201, True)] * 20 and fixed["paused"] == [201] * 20
    for result in (plain, fixed):  # every datapoint it accepted is stored, the SIGKILL included
        assert result["stored"] == result["accepted"], result


@pytest.mark.timeout(60)
def test_bad_datapoints_are_refused(tmp_path, monkeypatch):
    directory = (tmp_path / "state").resolve()
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(directory))
    state = launcher.up(LabSettings(**SMALL), base_port=0, directory=directory)
    wait_serving(state)
    url = state["components"]["metrics"]["url"]
    good = {"namespace": "AWS/EC2", "name": "CPU", "group": "g-1", "value": 1.0}

    async def scenario():
        async with aiohttp.ClientSession() as s:
            for bad in (
                {**good, "value": "1"},
                {**good, "value": True},
                {**good, "value": 1e999},
                {**good, "group": ""},
                {**good, "name": "a b"},
                {k: v for k, v in good.items() if k != "namespace"},
                [good],
            ):
                async with s.post(f"{url}/data", json=bad) as r:
                    assert r.status == 400 and "error" in await r.json(), bad
            async with s.get(f"{url}/status") as r:
                assert (await r.json())["datapoints_stored"] == 0

    try:
        asyncio.run(scenario())
    finally:
        assert launcher.down(directory)
