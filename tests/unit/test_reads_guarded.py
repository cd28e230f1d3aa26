"""What a reachable room shows without a token: on loopback a game's readings are open to this host
(as before rooms were reachable); served to other machines (--listen, --tls), a desk shows its game
only to its own roles' tokens and the lab's, and the facilitator's console shows the teams only
with the facilitator's token. Moves and controls take their tokens everywhere, as always."""

import pytest

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


@pytest.mark.parametrize("guarded", [False, True])
async def test_the_join_page_shows_every_role_s_link_and_code_to_the_facilitator_alone(aiohttp_client, guarded):
    async def read():
        return {"team-1": snap(0.0), "team-2": snap(0.0)}

    links = {"team-1": {"database": "https://10.0.0.5:9001/play#token=db1", "queues": "https://10.0.0.5:9001/play#token=q1"},
             "team-2": {}}  # fmt: skip
    console = room_web.Console(CARD, read, room_web.Controls(halt=dict), TOKEN, guard_reads=guarded, links=lambda: links)
    client = await aiohttp_client(room_web.app(console))
    shell = await (await client.get("/join")).text()
    assert "token=db1" not in shell and "/join/links" in shell  # the page itself holds no token
    for header in ({}, as_role("db-token")):
        assert (await client.get("/join/links", headers=header)).status == 401  # on loopback too: every token is in them
    shown = await (await client.get("/join/links", headers=as_role(TOKEN))).text()
    assert shown.count("<svg") == 2 and "https://10.0.0.5:9001/play#token=db1" in shown and "token=q1" in shown
    assert "team-2" in shown and "room play" in shown  # a team with no game yet says so


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
