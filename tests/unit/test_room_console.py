"""The facilitator's console over a room whose labs are stand-ins: each team's reading and curve,
the page, and the controls behind the facilitator's token."""

import pytest

from stormlab.engine.reading import Reading
from stormlab.rooms import room_web
from stormlab.scenarios.scenario import live_inject

CARD = {"teams": {"team-1": "/x/team-1", "team-2": "/x/team-2"}, "sizing": {"teams": 2, "nodes": 400, "speed": 1.0}}
TOKEN = "f" * 32


def snap(error, serving=400, invalid=()):
    return room_web.Seen(Reading(customer_error_ratio=error, nodes_serving=serving, nodes_total=400), list(invalid))


@pytest.fixture
async def console(aiohttp_client):
    errors = iter([(0.0, 0.0), (0.3, 0.0), (0.55, 0.0)])
    halted = []

    async def read():
        a, b = next(errors, (0.55, 0.0))
        return {"team-1": snap(a, 340), "team-2": snap(b, invalid=["the host is out of CPU for the lab"])}

    def halt():
        halted.append(True)
        return {"team-1": (2, []), "team-2": (0, ["linkproxy: refused"])}

    c = room_web.Console(CARD, read, room_web.Controls(halt=halt), TOKEN)
    c.halted = halted
    client = await aiohttp_client(room_web.app(c))
    return c, client


async def test_every_team_side_by_side_with_its_curve(console):
    c, client = console
    for _ in range(3):
        await c.sample()
    doc = await (await client.get("/room.json")).json()
    assert set(doc["teams"]) == {"team-1", "team-2"}
    curve_1 = [v for _, v in doc["history"]["team-1"]]  # the console's own sampling reads too
    assert curve_1[:3] == [0.0, 0.3, 0.55] and set(curve_1[3:]) <= {0.55}
    assert [t for t, _ in doc["history"]["team-2"]] == sorted(t for t, _ in doc["history"]["team-2"])
    page = await (await client.get("/")).text()
    assert "team-1" in page and "340/400" in page and "55.0%" in page and page.count("<polyline") == 2
    assert "INVALID: the host is out of CPU for the lab" in page  # each team judged on its own


async def test_the_controls_take_the_facilitators_token_only(console):
    c, client = console
    for auth in ({}, {"Authorization": "Bearer nope"}, {"Authorization": TOKEN}):
        resp = await client.post("/halt", headers=auth)
        assert resp.status == 401 and (await resp.json())["error"] == "unauthorized"
    assert c.halted == []  # nothing was done
    resp = await client.post("/halt", headers={"Authorization": f"Bearer {TOKEN}"})
    assert resp.status == 200
    assert await resp.json() == {"halted": {"team-1": 2, "team-2": 0}, "unanswered": {"team-2": ["linkproxy: refused"]}}
    assert c.halted == [True]


def test_a_curve_needs_two_readings_and_stays_in_its_box():
    assert room_web.curve([(0.0, 0.5)]) == ""
    svg = room_web.curve([(0.0, 0.0), (10.0, 1.5), (20.0, -1.0)], width=100, height=40)
    assert "0.0,40.0 50.0,0.0 100.0,40.0" in svg


async def test_the_game_side_by_side_the_leaderboard_and_the_games_controls(aiohttp_client):
    async def read():
        return {"team-1": snap(0.02), "team-2": snap(0.55, 250)}

    def view(pages, acks, moves, posts, recovered, minutes):
        card = {"pages": pages, "acks": acks, "moves": moves, "posts": posts}
        score = {"recovered": recovered, "customer_error_minutes": minutes, "injects_fired": 1, "injects_answered": int(recovered)}
        return {"roles": {"database": card}, "score": score}

    async def games():
        a, b = view(2, 1, 2, 1, True, 1.5), view(1, 0, 0, 0, False, 0.9)
        return {
            "team-1": {"running": True, "outcome": None, "view": a, "score": a["score"]},
            "team-2": {"running": True, "outcome": None, "view": b, "score": b["score"]},
        }

    calls = []
    controls = room_web.Controls(
        halt=lambda: {}, start=lambda autopilot: calls.append(("start", autopilot)) or {"teams": {"team-1": {}}, "scenario": "s.yaml"},
        end=lambda: calls.append(("end",)) or {"team-1": {"outcome": "failed"}},
    )  # fmt: skip
    c = room_web.Console(CARD, read, controls, TOKEN, games)
    client = await aiohttp_client(room_web.app(c))
    await c.sample()
    doc = await (await client.get("/room.json")).json()
    # recovered first, whatever the error-minutes: team-1 recovered with more, team-2 has not
    assert [b["team"] for b in doc["leaderboard"]] == ["team-1", "team-2"]
    panel = await (await client.get("/panel")).text()
    assert "<td>on</td><td>2</td><td>1</td><td>2</td><td>1</td><td>1 of 1</td>" in panel  # team-1's pages, acks, moves, posts, injects
    assert "<td>on</td><td>1</td><td>0</td><td>0</td><td>0</td><td>0 of 1</td>" in panel
    assert "no game scored yet" not in panel and panel == c.panel()
    page = await (await client.get("/")).text()
    assert "id='start'" in page and panel in page
    for path in ("/start", "/end"):
        assert (await client.post(path, headers={"Authorization": "Bearer nope"})).status == 401
    assert calls == []  # nothing was done without the token
    bad = await client.post("/start", json={"autopilot": "yes"}, headers={"Authorization": f"Bearer {TOKEN}"})
    assert bad.status == 400 and calls == []
    started = await client.post("/start", json={"autopilot": True}, headers={"Authorization": f"Bearer {TOKEN}"})
    assert await started.json() == {"started": ["team-1"], "scenario": "s.yaml"} and calls == [("start", True)]
    ended = await client.post("/end", headers={"Authorization": f"Bearer {TOKEN}"})
    assert await ended.json() == {"ended": {"team-1": "failed"}} and calls[-1] == ("end",)


async def test_a_console_without_a_scenario_has_nothing_to_start(console):
    c, client = console
    assert "id='start'" not in await (await client.get("/")).text()
    resp = await client.post("/start", headers={"Authorization": f"Bearer {TOKEN}"})
    assert resp.status == 409 and "without --scenario" in (await resp.json())["message"]


async def test_an_inject_typed_at_the_console_goes_to_the_teams_asked(aiohttp_client):
    sent = []

    def inject(body, team):
        live_inject(body, "check")  # as room.inject: a body that is not an inject is refused before anything is sent
        sent.append((team, body["to"]))
        return {t: {"name": "live-1"} for t in ([team] if team else CARD["teams"])}

    async def read():
        return {"team-1": snap(0.5), "team-2": snap(0.5)}

    c = room_web.Console(CARD, read, room_web.Controls(halt=dict, inject=inject), TOKEN)
    client = await aiohttp_client(room_web.app(c))
    facilitator = {"Authorization": f"Bearer {TOKEN}"}
    body = {"to": "database", "message": "An executive asks what customers see."}
    assert (await client.post("/inject", json=body)).status == 401
    for bad in ({**body, "team": "team-9"}, {**body, "to": "dba"}, {**body, "team": 3}):
        assert (await client.post("/inject", json=bad, headers=facilitator)).status == 400
    assert sent == []
    answer = await (await client.post("/inject", json={**body, "team": "team-2"}, headers=facilitator)).json()
    assert answer == {"sent": {"team-2": {"name": "live-1"}}}
    answer = await (await client.post("/inject", json=body, headers=facilitator)).json()
    assert set(answer["sent"]) == {"team-1", "team-2"} and sent == [("team-2", "database"), (None, "database")]
    assert 'id="inject"' in await (await client.get("/")).text()


async def test_the_hold_takes_the_facilitators_token_and_a_held_game_says_so(aiohttp_client):
    told = []

    async def read():
        return {"team-1": snap(0.5), "team-2": snap(0.5)}

    async def games():
        view = {"roles": {}, "score": {}, "held": True}
        return {"team-1": {"running": True, "view": view}, "team-2": {"running": True, "view": {"roles": {}, "held": False}}}

    controls = room_web.Controls(halt=dict, hold=lambda on: told.append(on) or {"team-1": {"held": on}})
    c = room_web.Console(CARD, read, controls, TOKEN, games)
    client = await aiohttp_client(room_web.app(c))
    facilitator = {"Authorization": f"Bearer {TOKEN}"}
    assert (await client.post("/hold", json={"on": True})).status == 401
    for bad in ({}, {"on": "true"}, {"on": None}):
        assert (await client.post("/hold", json=bad, headers=facilitator)).status == 400
    assert told == []
    answer = await (await client.post("/hold", json={"on": True}, headers=facilitator)).json()
    assert answer == {"told": {"team-1": {"held": True}}} and told == [True]
    await client.post("/hold", json={"on": False}, headers=facilitator)
    assert told == [True, False]
    await c.sample()
    panel = await (await client.get("/panel")).text()
    assert "<td>held</td>" in panel and "<td>on</td>" in panel  # team-1 held, team-2 on
    page = await (await client.get("/")).text()
    assert 'id="hold"' in page and 'id="continue"' in page
