"""Each fault's effect and its revert, measured (in-process servers on loopback)."""

import asyncio
import json

import aiohttp
import pytest

from chaos.linkproxy import create_app as proxy_app
from metadata_service.app import create_app as metadata_app
from tests.integration.test_endpoints import AUTH, TOKEN, link_get

BIG, SMALL = "r00n000", "r00n005"


@pytest.fixture
def event_log(tmp_path, monkeypatch):
    path = tmp_path / "events.jsonl"
    monkeypatch.setenv("STORMLAB_EVENT_LOG", str(path))
    return path


@pytest.fixture
async def meta(aiohttp_server, aiohttp_client, tiny_settings, event_log):
    server = await aiohttp_server(metadata_app(tiny_settings, token=TOKEN))
    return server, await aiohttp_client(server, headers=AUTH)


@pytest.fixture
async def links(aiohttp_client, meta, unused_tcp_port_factory):
    server, _ = meta
    ports = {0: ("127.0.0.1", unused_tcp_port_factory()), 1: ("127.0.0.1", unused_tcp_port_factory())}
    client = await aiohttp_client(proxy_app(("127.0.0.1", server.port), ports, token=TOKEN), headers=AUTH)
    return client, {r: p for r, (_, p) in ports.items()}


async def test_control_endpoints_need_the_token(aiohttp_client, meta, links):
    server, _ = meta
    for app_client in (await aiohttp_client(server),):
        for method, path in (("POST", "/faults"), ("GET", "/faults"), ("DELETE", "/faults")):
            resp = await app_client.request(method, path, headers={"Authorization": "Bearer wrong"})
            assert resp.status == 401 and (await resp.json())["error"] == "unauthorized"
    proxy, _ = links
    resp = await proxy.post("/faults", json={"fault": "blip", "racks": [0], "duration_s": 1}, headers={"Authorization": ""})
    assert resp.status == 401
    assert (await (await proxy.get("/faults")).json())["faults"] == []
    assert (await (await aiohttp_client(server)).get("/membership/r00n005")).status == 200  # renewals are not admin


@pytest.mark.parametrize("direction", ["to-metadata", "from-metadata"])
async def test_one_way_partition_drops_one_direction_and_reverts(links, direction):
    proxy, ports = links
    resp = await proxy.post("/faults", json={"fault": "partition", "racks": [0], "direction": direction, "duration_s": 0.8})
    assert resp.status == 201
    assert await link_get(ports[0]) == "timeout"
    assert await link_get(ports[1]) == 200
    await asyncio.sleep(0.8)
    assert await link_get(ports[0]) == 200


async def timed_get(port: int, path: str = "/healthz") -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}{path}", timeout=aiohttp.ClientTimeout(total=5)) as r:
        await r.read()
    return loop.time() - start


async def test_latency_delays_only_its_racks_and_reverts(links):
    proxy, ports = links
    base = await timed_get(ports[0])
    applied = await proxy.post("/faults", json={"fault": "latency", "racks": [0], "delay_s": 0.15, "duration_s": 1.5})
    assert applied.status == 201
    slow, other = await timed_get(ports[0]), await timed_get(ports[1])
    assert slow >= 0.3 > other  # delayed each way
    await asyncio.sleep(1.5)
    assert await timed_get(ports[0]) < base + 0.1


async def test_loss_is_felt_as_retransmission_delay(links):
    proxy, ports = links
    await proxy.post("/faults", json={"fault": "loss", "racks": [1], "probability": 0.999, "duration_s": 1.0})
    assert await link_get(ports[1], timeout=0.5) == "timeout"
    await asyncio.sleep(1.0)
    assert await timed_get(ports[1]) < 0.2


async def test_pause_metadata_turns_renewals_away_until_it_ends(meta):
    _, client = meta
    await client.post("/faults", json={"fault": "pause-metadata", "duration_s": 0.5})
    assert (await client.get(f"/membership/{SMALL}")).status == 503
    await asyncio.sleep(0.6)
    assert (await client.get(f"/membership/{SMALL}")).status == 200


async def test_overlapping_pauses_readmit_when_the_last_one_ends(meta):
    _, client = meta
    await client.post("/faults", json={"fault": "pause-metadata", "duration_s": 1.2})
    await client.post("/faults", json={"fault": "pause-metadata", "duration_s": 0.4})
    await asyncio.sleep(0.6)  # the shorter one is over, the longer one still holds
    assert (await client.get(f"/membership/{SMALL}")).status == 503
    await asyncio.sleep(0.8)
    assert (await client.get(f"/membership/{SMALL}")).status == 200


async def test_staged_resume_readmits_in_steps(meta, tiny_settings):
    _, client = meta
    await client.post("/faults", json={"fault": "pause-metadata", "duration_s": 30})
    resp = await client.post("/faults", json={"fault": "resume-metadata", "staged": 4, "every_s": 0.5, "duration_s": 1.5})
    assert resp.status == 201
    nodes = [f"r00n{i:03d}" for i in range(5, 20)]

    async def admitted():
        statuses = await asyncio.gather(*(client.get(f"/membership/{n}") for n in nodes))
        return sum(r.status == 200 for r in statuses)

    first = await admitted()
    await asyncio.sleep(1.6)
    assert 0 < first < len(nodes) and await admitted() == len(nodes)
    # the pause lease ends later without undoing the operator's resume
    assert (await (await client.get("/status")).json())["paused"] is False


async def test_a_staged_resume_halted_early_lets_everyone_in_at_once(meta):
    _, client = meta
    await client.post("/faults", json={"fault": "pause-metadata", "duration_s": 1})
    resp = await client.post("/faults", json={"fault": "resume-metadata", "staged": 20, "every_s": 30})
    assert resp.status == 201
    nodes = [f"r00n{i:03d}" for i in range(20)]
    statuses = await asyncio.gather(*(client.get(f"/membership/{n}") for n in nodes))
    assert sum(r.status == 503 for r in statuses) > 10  # one group in twenty, for the next 10 minutes
    assert (await (await client.delete("/faults")).json())["halted"] == 2
    statuses = await asyncio.gather(*(client.get(f"/membership/{n}") for n in nodes))
    assert [r.status for r in statuses] == [200] * 20  # a halt ends every lease: the readmission is over


async def test_capacity_through_the_shared_path_fails_in_a_storm_and_break_glass_works(meta):
    server, client = meta
    storm = [asyncio.ensure_future(client.get(f"/membership/{BIG}")) for _ in range(200)]
    await asyncio.sleep(0.2)
    async with aiohttp.ClientSession(headers=AUTH) as s:
        with pytest.raises(asyncio.TimeoutError):
            await s.post(
                server.make_url("/faults"),
                json={"fault": "capacity", "cores": 400, "duration_s": 5},
                timeout=aiohttp.ClientTimeout(total=1.0),
            )
    await asyncio.sleep(0.1)
    assert (await (await client.get("/status")).json())["cores"] == 40.0
    resp = await client.post("/faults", json={"fault": "capacity", "cores": 400, "break_glass": True, "duration_s": 0.5})
    assert resp.status == 201 and (await (await client.get("/status")).json())["cores"] == 400.0
    await asyncio.sleep(0.6)
    assert (await (await client.get("/status")).json())["cores"] == 40.0
    for task in storm:
        task.cancel()
    await asyncio.gather(*storm, return_exceptions=True)


async def test_gsi_growth_shifts_the_membership_sizes_and_reverts(meta, event_log):
    _, client = meta
    before = (await (await client.get("/status")).json())["membership_sizes"]
    resp = await client.post("/faults", json={"fault": "gsi-growth", "tables": ["catalog"], "factor": 2, "ramp_s": 0.3, "duration_s": 0.8})
    assert resp.status == 201
    await asyncio.sleep(0.45)
    grown = (await (await client.get("/status")).json())["membership_sizes"]
    assert grown != before and max(map(int, grown)) > max(map(int, before))
    await asyncio.sleep(0.5)
    assert (await (await client.get("/status")).json())["membership_sizes"] == before
    events = [json.loads(line) for line in event_log.read_text().splitlines()]
    assert [(e["fault"], e["event"], e["outcome"]) for e in events] == [
        ("gsi-growth", "start", "applied"),
        ("gsi-growth", "end", "reverted"),
    ]


async def test_fault_state_is_in_metrics_and_grafana_gets_annotations(aiohttp_server, aiohttp_client, tiny_settings, monkeypatch):
    from aiohttp import web

    seen = []

    async def annotate(request):
        seen.append((request.headers["Authorization"], await request.json()))
        return web.json_response({"id": len(seen)})

    grafana = web.Application()
    grafana.router.add_post("/api/annotations", annotate)
    grafana_server = await aiohttp_server(grafana)
    monkeypatch.setenv("STORMLAB_GRAFANA_URL", str(grafana_server.make_url("")))
    monkeypatch.setenv("STORMLAB_GRAFANA_TOKEN", "g-token")
    client = await aiohttp_client(metadata_app(tiny_settings, token=TOKEN), headers=AUTH)
    await client.post("/faults", json={"fault": "pause-metadata", "duration_s": 0.3})
    text = await (await client.get("/metrics")).text()
    assert 'stormlab_chaos_fault_active{fault="pause-metadata",target="metadata"} 1.0' in text
    await asyncio.sleep(0.5)
    text = await (await client.get("/metrics")).text()
    assert 'stormlab_chaos_fault_active{fault="pause-metadata",target="metadata"} 0.0' in text
    assert 'stormlab_chaos_faults_total{fault="pause-metadata",outcome="reverted"} 1.0' in text
    assert [a for a, _ in seen] == ["Bearer g-token"] * 2
    assert [b["tags"][-1] for _, b in seen] == ["start", "end"]


async def test_overlapping_capacity_leases_restore_the_capacity_before_them(meta):
    _, client = meta

    async def cores():
        return (await (await client.get("/status")).json())["cores"]

    await client.post("/faults", json={"fault": "capacity", "cores": 80, "break_glass": True, "duration_s": 0.3})
    await client.post("/faults", json={"fault": "capacity", "cores": 120, "break_glass": True, "duration_s": 0.6})
    assert await cores() == 120
    await asyncio.sleep(0.35)
    assert await cores() == 120
    await asyncio.sleep(0.35)
    assert await cores() == 40


async def test_a_multi_rack_fault_is_one_metric_series_per_rack(links):
    proxy, _ = links
    await proxy.post("/faults", json={"fault": "blip", "racks": [0, 1], "duration_s": 0.3})
    text = await (await proxy.get("/metrics")).text()
    assert 'stormlab_chaos_fault_active{fault="blip",target="rack-0"} 1.0' in text
    assert 'stormlab_chaos_fault_active{fault="blip",target="rack-1"} 1.0' in text
    assert "rack-0,rack-1" not in text
    await asyncio.sleep(0.4)
    text = await (await proxy.get("/metrics")).text()
    assert 'stormlab_chaos_fault_active{fault="blip",target="rack-0"} 0.0' in text


async def test_stuck_partition_drops_its_tables_from_memberships_until_it_ends(meta):
    _, client = meta
    routes = json.loads(await (await client.get("/partition-map")).read())
    [holder, *_] = routes["tables"]["metric-groups"]["owners"]

    async def tables_held() -> set[str]:
        return {e["table"] for e in (await (await client.get(f"/membership/{holder}")).json())["entries"]}

    assert "metric-groups" in await tables_held()
    bad = await client.post("/faults", json={"fault": "stuck-partition", "tables": ["nope"], "duration_s": 1})
    assert bad.status == 400
    # the lease outlasts the next answer: the holder may be a large instance, whose 138 entries
    # take 0.63 s of the service's time
    resp = await client.post("/faults", json={"fault": "stuck-partition", "tables": ["metric-groups"], "duration_s": 2.0})
    assert resp.status == 201
    held = await tables_held()
    assert "metric-groups" not in held and held  # the node keeps its other tables
    stuck = json.loads(await (await client.get("/partition-map")).read())["tables"]["metric-groups"]
    assert stuck["status"] == "updating"
    await asyncio.sleep(2.2)
    assert "metric-groups" in await tables_held()
    assert json.loads(await (await client.get("/partition-map")).read())["tables"]["metric-groups"]["status"] == "active"


@pytest.fixture
async def paths(aiohttp_client, meta, unused_tcp_port_factory):
    """A proxy with the queues service's paths to two racks and the scaling service's to one (the
    metadata service stands in for the racks: any HTTP server does)."""
    server, _ = meta
    target = ("127.0.0.1", server.port)
    links = {r: ("127.0.0.1", unused_tcp_port_factory()) for r in (0, 1)}
    routes = {"queues": {0: (("127.0.0.1", unused_tcp_port_factory()), target), 1: (("127.0.0.1", unused_tcp_port_factory()), target)}}
    routes["scaling"] = {0: (("127.0.0.1", unused_tcp_port_factory()), target)}
    client = await aiohttp_client(proxy_app(target, links, token=TOKEN, paths=routes), headers=AUTH)
    ports = {(s, r): listen[1] for s, racks in routes.items() for r, (listen, _) in racks.items()}
    return client, ports, {r: p for r, (_, p) in links.items()}


async def test_isolate_cuts_one_service_off_from_its_racks_and_reverts(paths):
    proxy, ports, links = paths
    resp = await proxy.post("/faults", json={"fault": "isolate", "target": "queues", "racks": [0], "duration_s": 0.8})
    assert resp.status == 201 and (await resp.json())["target"] == "queues"
    assert await link_get(ports[("queues", 0)]) == "timeout"
    assert await link_get(ports[("queues", 1)]) == 200  # its other rack
    assert await link_get(ports[("scaling", 0)]) == 200  # another service, same rack
    assert await link_get(links[0]) == 200  # the rack's own path to the metadata service
    await asyncio.sleep(0.8)
    assert await link_get(ports[("queues", 0)]) == 200


async def test_isolate_takes_every_rack_by_default(paths):
    proxy, ports, _ = paths
    resp = await proxy.post("/faults", json={"fault": "isolate", "target": "queues", "duration_s": 1.5})
    assert resp.status == 201 and (await resp.json())["racks"] == [0, 1]
    # both paths tried at once, well inside the lease (one after the other, a slow machine let
    # the second try land after a shorter lease had ended)
    tried = await asyncio.gather(*(link_get(ports[("queues", r)], timeout=0.3) for r in (0, 1)))
    assert tried == ["timeout", "timeout"]
    await asyncio.sleep(1.5)
    assert [await link_get(ports[("queues", r)]) for r in (0, 1)] == [200, 200]  # the lease ended: both back


@pytest.mark.parametrize(
    "body",
    [
        {"target": "nope"},
        {"target": "queues", "racks": [5]},
        {"target": "queues", "racks": "0"},
        {"target": "console"},  # a service with no path through this proxy
        {"target": "scaling", "racks": [1]},
        {"racks": [0]},
    ],
)
async def test_isolate_refuses_what_it_cannot_do(paths, body):
    proxy, ports, _ = paths
    resp = await proxy.post("/faults", json={"fault": "isolate", "duration_s": 1, **body})
    assert resp.status == 400 and "message" in await resp.json()
    assert (await (await proxy.get("/faults")).json())["faults"] == []
    assert await link_get(ports[("queues", 0)]) == 200


async def test_a_blip_says_what_it_dropped_and_one_that_met_no_traffic_says_no_effect(links, event_log):
    proxy, ports = links
    hit = await proxy.post("/faults", json={"fault": "blip", "racks": [0], "duration_s": 0.6})
    idle = await proxy.post("/faults", json={"fault": "blip", "racks": [1], "duration_s": 0.6})
    assert hit.status == idle.status == 201
    assert await link_get(ports[0]) == "timeout"  # rack 0's request is dropped; rack 1 sends nothing
    held = {f["target"]: f["effect"] for f in (await (await proxy.get("/faults")).json())["faults"]}
    assert held["rack-0"]["dropped_bytes"] > 0 and held["rack-1"] == {"dropped_bytes": 0}  # so far
    await asyncio.sleep(0.8)
    listing = await (await proxy.get("/faults")).json()
    ended = {e["target"]: e for e in listing["ended"]}
    assert listing["faults"] == []
    assert ended["rack-0"]["no_effect"] is False and ended["rack-0"]["effect"]["dropped_bytes"] > 0
    assert ended["rack-1"]["no_effect"] is True and ended["rack-1"]["effect"] == {"dropped_bytes": 0}
    ends = {e["target"]: e for e in map(json.loads, event_log.read_text().splitlines()) if e["event"] == "end"}
    assert (ends["rack-0"]["no_effect"], ends["rack-1"]["no_effect"]) == (False, True)
    metrics = await (await proxy.get("/metrics")).text()
    assert 'stormlab_chaos_no_effect_total{fault="blip"} 1.0' in metrics


async def test_latency_counts_the_bytes_it_held_back(links):
    proxy, ports = links
    resp = await proxy.post("/faults", json={"fault": "latency", "racks": [0], "delay_s": 0.05, "duration_s": 0.5})
    assert resp.status == 201
    await timed_get(ports[0])
    [lease] = (await (await proxy.get("/faults")).json())["faults"]
    assert lease["effect"]["delayed_bytes"] > 0
    await asyncio.sleep(0.5)
    [ended] = (await (await proxy.get("/faults")).json())["ended"]
    assert ended["no_effect"] is False and ended["effect"]["delayed_bytes"] >= lease["effect"]["delayed_bytes"]


async def test_a_repair_ends_only_the_leases_of_its_fault_and_an_unknown_fault_ends_nothing(meta):
    _, client = meta
    stuck = await client.post("/faults", json={"fault": "stuck-partition", "tables": ["metric-groups"], "duration_s": 240})
    paused = await client.post("/faults", json={"fault": "pause-metadata", "duration_s": 240})
    assert stuck.status == paused.status == 201
    # an unknown fault, a misspelt parameter (which would otherwise end every lease), two faults at once
    for query in ({"fault": "no-such-fault"}, {"faults": "stuck-partition"}, [("fault", "stuck-partition"), ("fault", "pause-metadata")]):
        refused = await client.delete("/faults", params=query)
        assert refused.status == 400, query
        assert len((await (await client.get("/faults")).json())["faults"]) == 2, query
    restored = await client.delete("/faults", params={"fault": "stuck-partition"})  # `stormlab ops restore-partition`
    assert (await restored.json()) == {"halted": 1}
    [left] = (await (await client.get("/faults")).json())["faults"]
    assert left["fault"] == "pause-metadata"
    assert (await (await client.get("/status")).json())["paused"]  # the other lease holds on
    restored_table = json.loads(await (await client.get("/partition-map")).read())["tables"]["metric-groups"]
    assert restored_table["status"] != "updating"  # the partition takes its share again
    assert (await (await client.delete("/faults", params={"fault": "stuck-partition"})).json()) == {"halted": 0}
