"""`chaos halt HOLDER#ID`: one lease ended by its number, reverted by its holder, the others kept;
a malformed or unknown id ends nothing (DELETE /faults?id=N)."""

from aiohttp import web
from prometheus_client import CollectorRegistry

from chaos.control import LeaseRunner, Plan, Recorder, add_fault_routes
from stormcore.web import json_errors


async def test_one_lease_is_ended_by_its_id_and_the_others_are_kept(aiohttp_client):
    reverted: list[str] = []

    async def blip(values):
        target = f"rack-{values['racks'][0]}"
        return Plan(target, lambda: None, lambda: reverted.append(target), {})

    runner = LeaseRunner(Recorder(CollectorRegistry(), ("blip",), "linkproxy"), max_duration_s=600)
    app = web.Application(middlewares=[json_errors])
    add_fault_routes(app, runner, {"blip": blip}, racks_total=10)
    client = await aiohttp_client(app)
    ids = []
    for rack in (0, 1, 2):
        answer = await client.post("/faults", json={"fault": "blip", "racks": [rack], "duration_s": 60})
        assert answer.status == 201
        ids.append((await answer.json())["id"])
    answer = await client.delete(f"/faults?id={ids[1]}")
    assert answer.status == 200 and (await answer.json()) == {"halted": 1}
    assert reverted == ["rack-1"]
    listed = await (await client.get("/faults")).json()
    assert sorted(f["id"] for f in listed["faults"]) == [ids[0], ids[2]]
    answer = await client.delete(f"/faults?id={ids[1]}")  # ended already: nothing to end
    assert answer.status == 404 and "no lease" in (await answer.json())["message"]
    for bad in ("?id=x", "?id=-1", "?id=1&fault=blip", "?id=1&id=2", "?id=" + "9" * 40):
        answer = await client.delete("/faults" + bad)
        assert answer.status == 400, bad
    assert reverted == ["rack-1"] and len(runner.book) == 2  # nothing else ended
    assert (await (await client.delete("/faults")).json()) == {"halted": 2}
    assert sorted(reverted) == ["rack-0", "rack-1", "rack-2"]
