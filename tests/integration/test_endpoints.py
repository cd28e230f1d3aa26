"""Every HTTP endpoint, given bad input, answers 4xx with a JSON error, changes nothing, keeps serving."""

import asyncio

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from chaos.linkproxy import create_app as proxy_app
from metadata_service.app import create_app as metadata_app
from storage_node.app import create_app as rack_app
from tests.conftest import eventually

TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

LEASE = b'"fault": "capacity", "duration_s": 5'
BAD_BODIES = [
    (b"{not json", 400),
    (b"[1, 2]", 400),
    (b'"cores"', 400),
    (b"{" + LEASE + b', "cores": "many"}', 400),
    (b"{" + LEASE + b', "cores": true}', 400),
    (b"{" + LEASE + b', "cores": -1}', 400),
    (b"{" + LEASE + b', "cores": 1e12}', 400),
    (b"{" + LEASE + b', "cores": null}', 400),
    (b"{" + LEASE + b"}", 400),
    (b'{"fault": "capacity", "cores": 80}', 400),  # a lease without a duration
    (b"{" + LEASE + b', "cores": ' + b"9" * 70_000 + b"}", 413),
]


async def assert_json_error(resp, status):
    assert resp.status == status, await resp.text()
    body = await resp.json()
    assert isinstance(body.get("error"), str) and body.get("message")
    return body


@pytest.fixture
async def metadata(aiohttp_client, tiny_settings):
    return await aiohttp_client(metadata_app(tiny_settings, token=TOKEN), headers=AUTH)


@pytest.mark.parametrize("body,status", BAD_BODIES)
async def test_capacity_rejects_bad_bodies_and_changes_nothing(metadata, body, status):
    resp = await metadata.post("/faults", data=body, headers={"Content-Type": "application/json"})
    await assert_json_error(resp, status)
    status_now = await (await metadata.get("/status")).json()
    assert status_now["cores"] == 40.0
    assert (await metadata.get("/healthz")).status == 200


GROWTH = b'"fault": "gsi-growth", "duration_s": 5'


@pytest.mark.parametrize(
    "body",
    [b"{" + GROWTH + b', "factor": 0}', b"{" + GROWTH + b', "factor": -3}', b"{" + GROWTH + b', "factor": 99}',
     b"{" + GROWTH + b', "factor": "2"}', b"{" + GROWTH + b', "tables": ["nope"]}', b"{" + GROWTH + b', "tables": []}', b"{{"],
)  # fmt: skip
async def test_gsi_growth_rejects_bad_bodies(metadata, body):
    resp = await metadata.post("/faults", data=body)
    await assert_json_error(resp, 400)
    assert (await (await metadata.get("/status")).json())["membership_version"] == 1


async def test_metadata_unknown_things_are_404_json(metadata):
    await assert_json_error(await metadata.get("/membership/r99n999"), 404)
    await assert_json_error(await metadata.get("/membership/not-a-node"), 404)
    await assert_json_error(await metadata.get("/no/such/route"), 404)
    await assert_json_error(await metadata.post("/admin/pause"), 404)  # every change is a lease on /faults
    await assert_json_error(await metadata.put("/faults"), 405)


async def lease(metadata, **body):
    resp = await metadata.post("/faults", json={"duration_s": 30, **body})
    assert resp.status == 201, await resp.text()


async def test_metadata_answers_membership_and_its_leases(metadata):
    resp = await metadata.get("/membership/r00n000")
    assert resp.status == 200 and len((await resp.json())["entries"]) == 138
    await lease(metadata, fault="gsi-growth", tables=["catalog"], factor=2)
    assert (await (await metadata.get("/status")).json())["membership_version"] > 1  # the memberships grew
    await lease(metadata, fault="capacity", cores=80, break_glass=True)
    assert (await (await metadata.get("/status")).json())["cores"] == 80
    await lease(metadata, fault="pause-metadata")
    paused = await metadata.get("/membership/r00n000")
    await assert_json_error(paused, 503)
    assert paused.headers["X-Stormlab-Refusal"] == "paused"  # why, in a header: the racks read it, not the body
    assert (await (await metadata.delete("/faults")).json())["halted"] == 3
    assert (await metadata.get("/membership/r00n000")).status == 200
    assert (await (await metadata.get("/status")).json())["cores"] == 40


@pytest.fixture
async def lab(aiohttp_server, aiohttp_client, tiny_settings, tmp_path):
    meta = await aiohttp_server(metadata_app(tiny_settings, token=TOKEN))
    rack = await aiohttp_client(rack_app(tiny_settings, 0, str(meta.make_url("")), tmp_path, token=TOKEN))

    async def all_serving():
        return (await (await rack.get("/status")).json())["nodes_serving"] == 20

    await eventually(all_serving)
    return await aiohttp_client(meta, headers=AUTH), rack


def item(node="r00n005", table=None, partition=None, key="k1"):
    return f"/nodes/{node}/tables/{table}/partitions/{partition}/items/{key}"


async def test_rack_item_api_validates_and_round_trips(lab):
    meta, rack = lab
    routes = await (await rack.get("/status?nodes=1")).json()
    assert routes["nodes_total"] == 20
    pmap = await (await meta.get("/partition-map")).json()
    table, spec = next((t, s) for t, s in pmap["tables"].items() if "r00n005" in s["owners"])
    partition = spec["owners"].index("r00n005")
    other = next(p for p, owner in enumerate(spec["owners"]) if owner != "r00n005")

    await assert_json_error(await rack.get(item("r09n000", table, partition)), 404)
    await assert_json_error(await rack.get(item("r00n005", table, "abc")), 400)
    await assert_json_error(await rack.get(item("r00n005", table, "-1")), 400)
    await assert_json_error(await rack.get(item("r00n005", table, partition, "k" * 300)), 400)
    await assert_json_error(await rack.get(item("r00n005", table, other)), 409)
    for body, status in [(b"{oops", 400), (b"[]", 400), (b'{"val": 1}', 400), (b"x" * 70_000, 413)]:
        await assert_json_error(await rack.put(item("r00n005", table, partition), data=body), status)
    await assert_json_error(await rack.put(item("r00n005", table, partition) + "?index=x", json={"value": 1}), 400)
    await assert_json_error(await rack.get(item("r00n005", table, partition, "never-written")), 404)

    resp = await rack.put(item("r00n005", table, partition), json={"value": {"n": 1}})
    assert resp.status == 200 and (await resp.json())["stored"] is True
    got = await (await rack.get(item("r00n005", table, partition))).json()
    assert got["value"] == {"n": 1}


async def test_disqualified_node_refuses_with_503_and_a_reason(lab):
    meta, rack = lab
    await lease(meta, fault="pause-metadata")

    async def refused():
        return (await (await rack.get("/status")).json())["nodes_disqualified"] == 20

    await eventually(refused)
    body = await assert_json_error(await rack.get(item("r00n005", "orders", 0)), 503)
    assert body["error"] == "disqualified" and "paused" in body["message"]
    renewals = await (await rack.get("/metrics")).text()
    assert 'stormlab_renewals_total{attempt="retry",outcome="paused",rack="0"}' in renewals  # the header's reason, counted
    assert (await meta.delete("/faults")).status == 200

    async def back():
        return (await (await rack.get("/status")).json())["nodes_serving"] == 20

    await eventually(back)


@pytest.fixture
async def proxy(aiohttp_server, aiohttp_client, tiny_settings, unused_tcp_port_factory):
    meta = await aiohttp_server(metadata_app(tiny_settings, token=TOKEN))
    links = {0: ("127.0.0.1", unused_tcp_port_factory()), 1: ("127.0.0.1", unused_tcp_port_factory())}
    client = await aiohttp_client(proxy_app(("127.0.0.1", meta.port), links, token=TOKEN), headers=AUTH)
    return client, links


@pytest.mark.parametrize(
    "body",
    [
        b"{bad",
        b"[]",
        b'{"racks": [0]}',
        b'{"racks": "0", "duration_s": 1}',
        b'{"racks": [], "duration_s": 1}',
        b'{"racks": [7], "duration_s": 1}',
        b'{"racks": [0, 0], "duration_s": 1}',
        b'{"racks": [true], "duration_s": 1}',
        b'{"racks": [0], "duration_s": -5}',
        b'{"racks": [0], "duration_s": 1e9}',
        b'{"racks": [0], "duration_s": "5s"}',
        b'{"fault": "meteor", "racks": [0], "duration_s": 1}',
    ],
)
async def test_proxy_rejects_bad_faults_and_changes_nothing(proxy, body):
    client, _ = proxy
    await assert_json_error(await client.post("/faults", data=body), 400)
    assert (await (await client.get("/faults")).json())["faults"] == []


async def link_get(port, path="/healthz", timeout=0.3):
    async with aiohttp.ClientSession() as s:
        try:
            async with s.get(f"http://127.0.0.1:{port}{path}", timeout=aiohttp.ClientTimeout(total=timeout)) as r:
                return r.status
        except TimeoutError:
            return "timeout"


async def test_blip_black_holes_only_the_chosen_racks_and_reverts_by_itself(proxy):
    client, links = proxy
    assert await link_get(links[0][1]) == 200 and await link_get(links[1][1]) == 200
    resp = await client.post("/faults", json={"fault": "blip", "racks": [0], "duration_s": 1.0})
    assert resp.status == 201
    assert await link_get(links[0][1]) == "timeout"
    assert await link_get(links[1][1], "/membership/r00n005") == 200
    listed = (await (await client.get("/faults")).json())["faults"]
    assert listed[0]["racks"] == [0] and 0 < listed[0]["left_s"] <= 1.0
    await asyncio.sleep(1.0)
    assert await link_get(links[0][1]) == 200
    assert (await (await client.get("/faults")).json())["faults"] == []


async def test_halt_reverts_at_once(proxy):
    client, links = proxy
    await client.post("/faults", json={"fault": "blip", "racks": [0, 1], "duration_s": 60})
    assert await link_get(links[1][1]) == "timeout"
    assert (await (await client.delete("/faults")).json())["halted"] == 1
    assert await link_get(links[1][1]) == 200


async def test_partition_map_is_only_sent_again_when_it_changed(metadata):
    first = await metadata.get("/partition-map")
    etag = first.headers["ETag"]
    assert first.status == 200 and (await first.json())["version"] == 1
    assert (await metadata.get("/partition-map", headers={"If-None-Match": etag})).status == 304
    await lease(metadata, fault="gsi-growth", tables=["catalog"], factor=2)
    again = await metadata.get("/partition-map", headers={"If-None-Match": etag})
    assert again.status == 200 and again.headers["ETag"] != etag


async def test_a_service_reads_the_map_of_its_own_tables_only(metadata):
    mine = await metadata.get("/partition-map?tables=queue-metadata")
    assert mine.status == 200 and list((await mine.json())["tables"]) == ["queue-metadata"]
    assert (await metadata.get("/partition-map?tables=queue-metadata", headers={"If-None-Match": mine.headers["ETag"]})).status == 304
    for bad in ("nope", "queue-metadata,nope", "", ","):
        await assert_json_error(await metadata.get(f"/partition-map?tables={bad}"), 400)


async def test_status_lag_window_is_validated(metadata):
    assert (await metadata.get("/status?lag_window_s=60")).status == 200
    await assert_json_error(await metadata.get("/status?lag_window_s=soon"), 400)


@pytest.mark.parametrize("garbage", [b"[1, 2]", b'{"node": 3}', b"not json", b'{"node": "r00n001", "version": "x"}'])
async def test_a_membership_of_the_wrong_shape_is_a_failed_renewal_not_a_dead_loop(lab, monkeypatch, garbage):
    from metadata_service.app import SERVICE

    meta, rack = lab
    store = meta.server.app[SERVICE].store
    real = store.membership
    monkeypatch.setattr(store, "membership", lambda node: garbage)

    async def serving():
        return (await (await rack.get("/status")).json())["nodes_serving"]

    await eventually(lambda: _is(serving, 0))  # every node misses its renewals and stops serving
    families = text_string_to_metric_families(await (await rack.get("/metrics")).text())
    renewals = next(f for f in families if f.name == "stormlab_renewals")
    assert sum(s.value for s in renewals.samples if s.name.endswith("_total") and s.labels["outcome"] == "error") >= 20
    monkeypatch.setattr(store, "membership", real)
    await eventually(lambda: _is(serving, 20))  # their loops are alive: they renew and serve again


async def _is(check, value):
    return await check() == value


async def test_a_write_past_the_racks_quota_is_a_507_and_changes_nothing(lab):
    from storage_node.app import STORE

    meta, rack = lab
    db = rack.server.app[STORE]._store._db
    db.execute(f"PRAGMA max_page_count = {int(db.execute('PRAGMA page_count').fetchone()[0]) + 1}")  # one page more
    pmap = await (await meta.get("/partition-map")).json()
    table, spec = next((t, s) for t, s in pmap["tables"].items() if "r00n005" in s["owners"])
    partition = spec["owners"].index("r00n005")
    statuses = [(await rack.put(item("r00n005", table, partition, f"q{i}"), json={"value": "v" * 200})).status for i in range(100)]
    assert statuses[0] == 200 and 507 in statuses and set(statuses) == {200, 507}
    refused = statuses.index(507)
    await assert_json_error(await rack.put(item("r00n005", table, partition, "q-new"), json={"value": "v" * 200}), 507)
    assert (await rack.get(item("r00n005", table, partition, f"q{refused}"))).status == 404  # not written
    assert (await rack.get(item("r00n005", table, partition, "q0"))).status == 200
