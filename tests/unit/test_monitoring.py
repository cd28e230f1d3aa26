"""The players' monitoring: direct, or through the lab's own metrics service (shared fate), where a
reading it refused or stored without its group is a gap in what the players see."""

import pytest
from aiohttp import web

from stormlab.engine.reading import Reading
from stormlab.responder import monitoring
from stormlab.scenarios.reader import load
from stormlab.scenarios.scenario import ScenarioError


def test_a_reading_whose_datapoint_is_missing_is_a_gap():
    readings = [(1.0, 100.0), (2.0, 101.0), (3.0, 102.0)]
    seen = {"customer_error_ratio": {100.0: 0.5, 102.0: 0.6}}
    shown = monitoring.view(readings, seen, "shared-fate")
    assert shown["series"]["customer_error_ratio"] == [[1.0, 0.5], [2.0, None], [3.0, 0.6]]
    assert shown["series"]["nodes_disqualified"] == [[1.0, None], [2.0, None], [3.0, None]]  # never stored
    watched = len(monitoring.WATCHED)
    assert shown["gaps"] == round((1 + 3 * (watched - 1)) / (3 * watched), 3)
    assert {p["group"] for p in shown["probes"]} == set(monitoring.GROUP_OF.values()) and len(set(monitoring.GROUP_OF.values())) == watched
    direct = monitoring.direct([Reading(t=1.0, customer_error_ratio=0.5, nodes_disqualified=0)])
    assert direct["mode"] == "direct" and direct["series"]["customer_error_ratio"] == [[1.0, 0.5]]


def test_the_scenario_says_which_monitoring_its_players_read():
    base = "title: t\nsteps:\n  - {name: wait, wait: 1s}\n"
    assert load(base).monitoring == "direct"
    assert load(base + "monitoring: shared-fate\n").monitoring == "shared-fate"
    with pytest.raises(ScenarioError, match="monitoring: one of direct, shared-fate"):
        load(base + "monitoring: cloudwatch\n")


async def test_shared_fate_shows_what_the_metrics_service_kept(aiohttp_server):
    """A stand-in metrics service that refuses the second reading (PutMetricData failing, the
    fleet held back) and keeps the others: the players' view has a gap there, and only there."""
    kept: list[dict] = []
    calls = {"n": 0}

    async def put(request):
        body = await request.json()
        calls["n"] += 1
        if round(body["timestamp"]) == 2:
            return web.json_response({"error": "namespace_unavailable"}, status=503)
        kept.append(body)
        return web.json_response({"stored": True, "enriched": True}, status=201)

    async def get(request):
        q = request.query
        found = [
            {"timestamp": b["timestamp"], "value": b["value"]}
            for b in kept
            if (b["namespace"], b["name"], b["group"]) == (q["namespace"], q["name"], q["group"]) and b["timestamp"] > float(q["since"])
        ]
        return web.json_response({"datapoints": found})

    app = web.Application()
    app.router.add_post("/data", put)
    app.router.add_get("/data", get)
    server = await aiohttp_server(app)
    shared = monitoring.SharedFate(str(server.make_url("/")))
    try:
        for t in (1.0, 2.0, 3.0):
            await shared.publish(Reading(t=t, customer_error_ratio=t / 10, nodes_disqualified=150), at=t)
        shown = await shared.read()
    finally:
        await shared.close()
    assert shown["mode"] == "shared-fate"
    assert shown["series"]["customer_error_ratio"] == [[1.0, 0.1], [2.0, None], [3.0, 0.3]]
    assert shown["series"]["nodes_disqualified"] == [[1.0, 150.0], [2.0, None], [3.0, 150.0]]
    assert shown["series"]["queue_error_ratio"] == [[1.0, None], [2.0, None], [3.0, None]]  # not in the readings: nothing sent
    assert shared.published == 6 and shared.refused == 2 and calls["n"] == 6
