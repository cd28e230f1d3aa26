"""The metrics service on a real small lab: when the scaling table refuses, datapoints lose their
group (gaps) but are stored; once every node refuses, PutMetricData fails after the cache's TTL;
the write-through fix keeps both going; every datapoint it accepted is stored, across a SIGKILL."""

import asyncio

import aiohttp
import pytest

from tests.integration.conftest import side_by_side

QUIET = {"customer_rate": 0, "cascade_rate": 0, "metric_cache_ttl_s": 1.0}  # only the test's own datapoints


async def put(s, url, i, group="g-1"):
    body = {"namespace": "AWS/EC2", "name": "CPUUtilization", "group": group, "value": float(i)}
    async with s.post(f"{url}/data", json=body, timeout=aiohttp.ClientTimeout(total=5)) as r:
        return r.status, await r.json()


async def story(started) -> dict:
    url = started.url("metrics")
    out = {"accepted": 0}
    async with aiohttp.ClientSession() as s:
        for _ in range(100):
            status, answer = await put(s, url, 0)
            out["accepted"] += status == 201
            if status == 201 and answer["enriched"]:
                break
            await asyncio.sleep(0.2)
        started.lease({"fault": "stuck-partition", "tables": ["scaling-groups"], "duration_s": 5})
        await asyncio.sleep(2.5)  # the enrichment is older than its TTL and cannot be refreshed
        stuck = [await put(s, url, i) for i in range(20)]
        out["stuck"] = [(code, a.get("enriched")) for code, a in stuck]
        await asyncio.sleep(3)
        started.lease({"fault": "pause-metadata", "duration_s": 6})
        await asyncio.sleep(3)  # every node refuses: the namespace cannot be confirmed either
        paused = [await put(s, url, i) for i in range(20)]
        out["paused"] = [code for code, _ in paused]
        out["accepted"] += sum(code == 201 for code, _ in stuck + paused)
        query = {"namespace": "AWS/EC2", "name": "CPUUtilization", "group": "g-1"}
        async with s.get(f"{url}/data", params=query) as r:  # GetMetricData: the group's series, its gaps left out
            out["series"] = len((await r.json())["datapoints"])
        out["enriched"] = 1 + sum(1 for code, a in stuck + paused if code == 201 and a["enriched"])
        started.lease({"fault": "kill", "target": "metrics", "duration_s": 1})
        await asyncio.sleep(4)
        for _ in range(100):
            try:
                async with s.get(f"{url}/status") as r:
                    out["stored"] = (await r.json())["datapoints_stored"]
                    break
            except aiohttp.ClientError:
                await asyncio.sleep(0.2)
    return out


@pytest.mark.lab
@pytest.mark.timeout(180)
def test_gaps_when_the_scaling_table_refuses_errors_when_every_node_does_and_the_fix_keeps_both_going(lab):
    # the labs told at once (each its own metrics service, store and leases; the story's timings are
    # the cache's TTL and the leases', seconds apart, not the host's)
    fixes = {"plain": {}, "fixed": {"fix_write_through": True}}
    started = {name: lab(cascade=("metrics",), **QUIET | changes) for name, changes in fixes.items()}
    told = side_by_side({name: story(s) for name, s in started.items()})
    plain, fixed = told["plain"], told["fixed"]
    print({"2015": plain, "fixed": fixed})
    assert all(code == 201 for code, _ in plain["stuck"]) and all(enriched is False for _, enriched in plain["stuck"])
    assert plain["paused"].count(503) >= 15
    assert fixed["stuck"] == [(201, True)] * 20 and fixed["paused"] == [201] * 20
    for result in (plain, fixed):  # every datapoint it accepted is stored, the SIGKILL included
        assert result["stored"] == result["accepted"], result
        assert result["series"] == result["enriched"], result  # a reader of the group's series sees only its enriched datapoints
    assert plain["series"] < 10 < fixed["series"]  # 2015: the stuck table's datapoints lost their group; fixed: they kept it


@pytest.mark.timeout(60)
def test_bad_datapoints_are_refused(lab):
    url = lab(cascade=("metrics",), **QUIET).url("metrics")
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
                {**good, "timestamp": "now"},
                {**good, "timestamp": 0},  # 1970: older than CloudWatch keeps
                {**good, "timestamp": 1e12},
                [good],
            ):
                async with s.post(f"{url}/data", json=bad) as r:
                    assert r.status == 400 and "error" in await r.json(), bad
            series = {"namespace": "AWS/EC2", "name": "CPU", "group": "g-1"}
            for bad_query in (
                {k: v for k, v in series.items() if k != "group"},
                {**series, "since": "yesterday"},
                {**series, "since": "nan"},
                {**series, "limit": "0"},
                {**series, "limit": "100000"},
            ):
                async with s.get(f"{url}/data", params=bad_query) as r:
                    assert r.status == 400 and "error" in await r.json(), bad_query
            async with s.get(f"{url}/status") as r:
                assert (await r.json())["datapoints_stored"] == 0

    asyncio.run(scenario())
