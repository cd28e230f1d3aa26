"""What a reachable room shows without a token: on loopback a game's readings are open to this host
(as before rooms were reachable); served to other machines (--listen, --tls), a desk shows its game
only to its own roles' tokens and the lab's, and the facilitator's console shows the teams only
with the facilitator's token. Moves and controls take their tokens everywhere, as always."""

import pytest

from stormcore.auth import join_token
from stormlab.responder import desk_web
from stormlab.rooms import room_web
from tests.unit.test_room_console import CARD, TOKEN, snap
from tests.unit.test_team import LAB_TOKEN, as_role, book  # noqa: F401 (book: the fixture)

READINGS = ("/game.json", "/status.json")


@pytest.mark.parametrize("guarded", [False, True])
async def test_a_desk_served_to_other_machines_shows_its_game_to_its_own_team_only(book, aiohttp_client, guarded):  # noqa: F811
    the_desk, ops = book
    client = await aiohttp_client(desk_web.app(the_desk, ops, LAB_TOKEN, guard_reads=guarded))
    for path in READINGS:
        anyone = await client.get(path)
        assert anyone.status == (401 if guarded else 200), path
        if guarded:
            assert "a role's token of this game" in (await anyone.json())["message"]
        other_team = await client.get(path, headers=as_role("a-token-of-another-team's-game"))
        assert other_team.status == (401 if guarded else 200), path
        for mine in ("db-token", "q-token", LAB_TOKEN):
            assert (await client.get(path, headers=as_role(mine))).status == 200, (path, mine)
    assert (await client.get("/play")).status == 200  # the console's shell holds nothing: its token opens the rest
    assert (await client.get("/")).status == 200  # the status page is the customers'


@pytest.mark.parametrize("guarded", [False, True])
async def test_a_room_served_to_other_machines_shows_its_teams_with_the_facilitator_s_token_only(aiohttp_client, guarded):
    async def read():
        return {"team-1": snap(0.42), "team-2": snap(0.0)}

    console = room_web.Console(CARD, read, room_web.Controls(halt=dict), TOKEN, guard_reads=guarded)
    await console.sample()
    client = await aiohttp_client(room_web.app(console))
    page = await (await client.get("/")).text()
    assert ("42.0%" in page) is not guarded  # the page itself carries no team's reading when guarded
    assert ("with the facilitator's token" in page) is guarded
    for path in ("/panel", "/room.json"):
        assert (await client.get(path)).status == (401 if guarded else 200), path
        assert (await client.get(path, headers=as_role("db-token"))).status == (401 if guarded else 200), path
        assert (await client.get(path, headers=as_role(TOKEN))).status == 200, path
    panel = await (await client.get("/panel", headers=as_role(TOKEN))).text()
    assert "42.0%" in panel


def test_one_bearer_check_for_the_lab_its_desks_and_its_rooms():
    from stormcore.auth import carries, whose

    assert carries("Bearer s3cret-token", "s3cret-token")
    assert not carries("Bearer s3cret-token ", "s3cret-token") and not carries("bearer s3cret-token", "s3cret-token")
    assert not carries("Bearer ", "") and not carries("", None)  # no token: nobody carries it
    roles = {"database": "db-token", "queues": "q-token", "nobody": None}
    assert whose("Bearer q-token", roles) == "queues" and whose("Bearer x", roles) is None and whose("Bearer ", roles) is None


LINKS = {"team-1": {"database": "https://10.0.0.5:9001/play#token=db1", "queues": "https://10.0.0.5:9001/play#token=q1"},
         "team-2": {}}  # fmt: skip


async def a_room(aiohttp_client, guarded=False, links=LINKS):
    async def read():
        return {"team-1": snap(0.0), "team-2": snap(0.0)}

    console = room_web.Console(CARD, read, room_web.Controls(halt=dict), TOKEN, guard_reads=guarded, links=lambda: links)
    console.base = "https://10.0.0.5:9000"
    return console, await aiohttp_client(room_web.app(console))


@pytest.mark.parametrize("guarded", [False, True])
async def test_the_projected_join_page_shows_claim_codes_never_a_roles_token(aiohttp_client, guarded):
    """A photo of the projected screen was every team's keys: each role's QR code was its token,
    and the page was opened with the facilitator's token in the address bar. Now it is opened with
    a token that can only show it, cleared from the address bar before anything is drawn, and each
    role is a claim code."""
    console, client = await a_room(aiohttp_client, guarded)
    shell = await (await client.get("/join")).text()
    assert "token=db1" not in shell and "/join/links" in shell  # the page itself holds no token
    assert "history.replaceState" in shell.split("fetch(")[0]  # the fragment goes before the first fetch draws anything
    for header in ({}, as_role("db-token")):
        assert (await client.get("/join/links", headers=header)).status == 401
    shown = await (await client.get("/join/links", headers=as_role(join_token(TOKEN)))).text()
    assert shown.count("<svg") == 2 and "token=" not in shown  # no role's token, in text or (below) in a code
    codes = [s.code for s in console.seats.shown(LINKS)]
    assert all(f"https://10.0.0.5:9000/seat/{c}" in shown for c in codes)
    assert "team-2" in shown and "room play" in shown  # a team with no game yet says so
    # the join token opens nothing else
    for method, path in (("GET", "/room.json"), ("POST", "/halt"), ("POST", "/end"), ("GET", "/debrief")):
        answer = await client.request(method, path, headers=as_role(join_token(TOKEN)))
        assert answer.status in ((401,) if method == "POST" or guarded else (200, 404)), (method, path)


async def test_a_seat_is_the_first_browsers_and_the_facilitator_can_release_it(aiohttp_client):
    console, client = await a_room(aiohttp_client)
    await client.get("/join/links", headers=as_role(join_token(TOKEN)))
    code = console.seats.code_of[("team-1", "database")]
    look = await client.get(f"/seat/{code}")  # a look (a link preview, a scanner) takes nothing
    assert look.status == 200 and "take this seat" in await look.text() and "db1" not in await look.text()
    first = await client.post(f"/seat/{code}", allow_redirects=False)
    assert first.status == 303 and first.headers["Location"] == LINKS["team-1"]["database"]
    again = await client.post(f"/seat/{code}", allow_redirects=False)  # the same browser (its cookie): let in again
    assert again.status == 303
    client.session.cookie_jar.clear()  # another browser
    other = await client.post(f"/seat/{code}", allow_redirects=False)
    assert other.status == 409 and "taken" in await other.text() and "db1" not in await other.text()
    shown = await (await client.get("/join/links", headers=as_role(join_token(TOKEN)))).text()
    assert code not in shown and "taken" in shown  # a taken seat shows no code
    assert (await client.post("/seats/release", json={"team": "team-1", "role": "database"})).status == 401
    assert (
        await client.post("/seats/release", json={"team": "team-1", "role": "database"}, headers=as_role(join_token(TOKEN)))
    ).status == 401
    released = await client.post("/seats/release", json={"team": "team-1", "role": "database"}, headers=as_role(TOKEN))
    assert released.status == 200
    assert (await client.post(f"/seat/{code}", allow_redirects=False)).status == 404  # the old code is no seat's
    await client.get("/join/links", headers=as_role(TOKEN))
    new = console.seats.code_of[("team-1", "database")]
    assert new != code and (await client.post(f"/seat/{new}", allow_redirects=False)).status == 303
    for body in ({"team": "team-9", "role": "database"}, {"team": 1, "role": []}):
        assert (await client.post("/seats/release", json=body, headers=as_role(TOKEN))).status in (400, 404)
    assert (await client.get("/seat/not-a-code")).status == 404


@pytest.mark.parametrize("guarded", [False, True])
async def test_a_reachable_rooms_debrief_needs_the_facilitators_token(aiohttp_client, tmp_path, guarded):
    async def read():
        return {}

    (tmp_path / "debrief.html").write_text("<p>every team's game</p>")
    (tmp_path / "debrief.png").write_bytes(b"\x89PNG")
    console = room_web.Console(CARD, read, room_web.Controls(halt=dict), TOKEN, home=tmp_path, guard_reads=guarded)
    client = await aiohttp_client(room_web.app(console))
    for path in ("/debrief", "/debrief.png"):
        assert (await client.get(path)).status == (401 if guarded else 200), path
        assert (await client.get(path, headers=as_role(join_token(TOKEN)))).status == (401 if guarded else 200), path
        assert (await client.get(path, headers=as_role(TOKEN))).status == 200, path


def test_the_bearer_token_is_written_and_checked_in_one_place():
    """stormcore/auth.py alone writes "Bearer …" (headers) and checks it (carries, whose): no module
    of the lab, its desks or its rooms spells the scheme itself (the pages' JavaScript aside)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spelled = []
    for package in ("stormcore", "chaos", "services", "metadata_service", "storage_node", "stormlab"):
        for path in sorted((root / package).rglob("*.py")):
            if path.relative_to(root).as_posix() == "stormcore/auth.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                first = node.values[0] if isinstance(node, ast.JoinedStr) and node.values else node
                if isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.startswith("Bearer "):
                    spelled.append(f"{path.relative_to(root)}:{node.lineno}")
    assert spelled == []
