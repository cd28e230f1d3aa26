"""The room's debrief: every team's game beside the others' and beside the 2015 account, from
the teams' scored journals (two games of the flagship on the toy lab, in virtual time)."""

import json

from stormlab.rooms import room_debrief, room_web
from stormlab.scenarios import scoring
from stormlab.scenarios.reader import load
from tests.unit.test_accounts import SCENARIOS, journal_2025
from tests.unit.test_gameday_engine import flagship, run, toy
from tests.unit.test_room_console import CARD, TOKEN, snap


def played(autopilot: bool) -> dict:
    scenario = flagship()
    clock, lab = toy()
    _, journal = run(scenario, lab, clock, autopilot=autopilot)
    return scoring.scored(scenario, journal, period_s=10.0)


def test_every_team_beside_the_others_and_the_account(tmp_path):
    home = tmp_path / "room"
    assert room_debrief.write(home) is None  # no game scored: nothing to write
    for team, autopilot in (("team-1", True), ("team-2", False)):
        older = home / "games" / team / "20261203-080000-dynamodb-2015"
        newer = home / "games" / team / "20261203-090000-dynamodb-2015"
        for run_dir in (older, newer):
            run_dir.mkdir(parents=True)
        (older / "journal.json").write_text(json.dumps({"title": "an older game"}))  # the newest game is the one read
        (newer / "journal.json").write_text(json.dumps(played(autopilot)))
    journals = room_debrief.newest_journals(home / "games")
    assert list(journals) == ["team-1", "team-2"] and journals["team-1"]["title"] != "an older game"
    later = (home / "games" / "team-2" / "20261203-090000-dynamodb-2015" / "journal.json").stat().st_mtime + 60
    assert room_debrief.newest_journals(home / "games", since=later) == {}  # a game begun after them: none is its
    (home / "games" / "team-1" / "20261203-100000-dynamodb-2015").mkdir()
    (home / "games" / "team-1" / "20261203-100000-dynamodb-2015" / "journal.json").write_text("{not json")
    assert room_debrief.newest_journals(home / "games")["team-1"]["title"] != "an older game"  # the unreadable one left out
    rows = room_debrief.seed_table(journals)
    pause = next(r for r in rows if r["what"] == "AWS pauses requests to the metadata service")
    assert pause["min_2015"] == 167 and pause["teams"]["team-2"] == (None, None)  # team 2 never paused
    after, share = pause["teams"]["team-1"]
    assert after > 0 and 0 < share < 1  # team 1 paused between its blip and its recovery
    recovered = next(r for r in rows if r["what"].startswith("error rates low enough"))
    assert recovered["teams"]["team-1"][1] == 1.0 and recovered["teams"]["team-2"] == (None, None)
    page = room_debrief.write(home)
    assert page == home / room_debrief.PAGE and (home / room_debrief.CHART).stat().st_size > 10_000
    text = page.read_text()
    assert "<th>team-1</th><th>team-2</th>" in text and "<td>recovered</td><td>yes</td><td>no</td>" in text
    assert "AWS pauses requests to the metadata service" in text and "<td>167 min (0.57)</td>" in text
    assert "Beside the 2015 account" in text and "launch error-minutes" not in text  # 2015's games: no launches


def test_a_room_of_the_2025_game_is_set_beside_its_own_account():
    """Two teams' journals of scenarios/aws-2025-10.yaml (as tests/unit/test_accounts.py builds one)."""
    scenario = load((SCENARIOS / "aws-2025-10.yaml").read_text())
    samples = [{"t": 0.0, "launch_error_ratio": 0.0}, {"t": 60.0, "launch_error_ratio": 1.0}]
    journal = journal_2025() | {"samples": samples, "title": scenario.title, "outcome": "passed", "status_page": {}}
    scored = journal | {
        "score": scoring.score(scenario, journal),
        "seed_timeline": scoring.seed_timeline(scenario, journal),
        "account": {"date": "19-20 October 2025", "trigger": "dns-empty", "span": "23:48 to 05:28"},
    }
    text = room_debrief.page({"team-1": scored, "team-2": scored})
    assert "Beside the 2025 account" in text and "after the dns-empty, 2025" in text and "2015" not in text
    assert "<td>launch error-minutes</td><td>0.50</td><td>0.50</td>" in text
    assert "<td>02:25</td>" in text and "<td>157 min (0.46)</td>" in text


async def test_the_console_serves_the_debrief_once_a_game_has_ended(tmp_path, aiohttp_client):
    async def read():
        return {"team-1": snap(0.0), "team-2": snap(0.0)}

    c = room_web.Console(CARD, read, room_web.Controls(halt=dict), TOKEN, home=tmp_path)
    client = await aiohttp_client(room_web.app(c))
    missing = await client.get("/debrief")
    assert missing.status == 404 and "no game of this room has ended yet" in (await missing.json())["message"]
    (tmp_path / room_debrief.PAGE).write_text("<h1>the debrief</h1>")
    (tmp_path / room_debrief.CHART).write_bytes(b"\x89PNG")
    assert await (await client.get("/debrief")).text() == "<h1>the debrief</h1>"
    assert (await client.get("/debrief.png")).status == 200
