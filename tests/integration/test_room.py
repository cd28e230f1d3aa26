"""A training room on this host: two teams' labs, one profile and one seed, sharing nothing. A
blip in one team's lab storms that lab only; `room down` leaves nothing running."""

import json
import os

import pytest

from stormcore.labstate import running
from stormlab.cli import main
from tests.conftest import until
from tests.integration.conftest import SMALL, alive


def room_status(capsys) -> dict:
    capsys.readouterr()
    assert main(["room", "status", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.lab
@pytest.mark.timeout(150)
def test_a_blip_in_one_teams_lab_leaves_the_other_untouched(tmp_path, monkeypatch, capsys):
    home = (tmp_path / "state").resolve()
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(home))
    small = ["--racks", "2", "--nodes-per-rack", "20", "--renewal-period", "1s", "--customer-rate", "20"]
    assert SMALL["racks"] == 2 and SMALL["nodes_per_rack"] == 20  # the integration tests' small lab, as flags
    pids: list[int] = []
    try:
        assert main(["room", "up", "--teams", "2", *small]) == 0
        out = capsys.readouterr().out
        assert "room: 2 teams of 40 nodes at speed 1" in out and "team-2: STORMLAB_STATE_DIR=" in out
        a, b = home / "room" / "team-1", home / "room" / "team-2"
        states = [running(a), running(b)]
        assert all(states)
        pids = [s["supervisor_pid"] for s in states] + [c["pid"] for s in states for c in s["components"].values()]
        ports = [set(c["port"] for c in s["components"].values()) for s in states]
        assert not ports[0] & ports[1]  # nothing shared: not a port
        assert running(home) is None  # and no lab of the state directory itself

        def serving(team: str) -> bool:
            t = room_status(capsys)["teams"][team]
            return bool(t) and t["nodes_serving"] == t["nodes_total"] == 40

        until(lambda: serving("team-1") and serving("team-2"), limit_s=40, what="both teams' nodes serving")

        def quiet() -> bool:  # the customers' last 10 s without the start-up's failures
            return all((t["customer_error_ratio"] or 0.0) < 0.01 for t in room_status(capsys)["teams"].values())

        until(quiet, limit_s=30, what="both teams' customers served")
        assert main(["room", "up", "--teams", "1", *small]) == 1  # one room at a time
        assert "a room is already up" in capsys.readouterr().err

        monkeypatch.setenv("STORMLAB_STATE_DIR", str(a))  # team 1 plays its lab: a blip of both racks
        assert main(["chaos", "blip", "--rack-set", "2", "--duration", "4s"]) == 0
        monkeypatch.setenv("STORMLAB_STATE_DIR", str(home))
        worst_b = 0.0

        def storming() -> bool:
            nonlocal worst_b
            teams = room_status(capsys)["teams"]
            worst_b = max(worst_b, teams["team-2"]["customer_error_ratio"] or 0.0)
            return (teams["team-1"]["customer_error_ratio"] or 0.0) > 0.3

        until(storming, limit_s=20, what="team 1's customers failing")
        until(lambda: serving("team-1"), limit_s=40, what="team 1 serving again")
        seen = room_status(capsys)["teams"]
        worst_b = max(worst_b, seen["team-2"]["customer_error_ratio"] or 0.0)
        assert worst_b < 0.01 and seen["team-2"]["nodes_disqualified"] == 0  # team 2 never knew
        capsys.readouterr()
        assert main(["room", "status"]) == 0
        assert "team-2: 40/40 nodes serving" in capsys.readouterr().out

        for team, fault in ((a, ["blip", "--rack-set", "1"]), (b, ["latency", "--rack-set", "1", "--delay", "10ms"])):
            monkeypatch.setenv("STORMLAB_STATE_DIR", str(team))  # a fault left running in each lab …
            assert main(["chaos", *fault, "--duration", "10m"]) == 0
        monkeypatch.setenv("STORMLAB_STATE_DIR", str(home))
        capsys.readouterr()
        assert main(["room", "halt"]) == 0  # … ended in every lab at once
        assert "team-1: halted 1 fault(s)" in (out := capsys.readouterr().out) and "team-2: halted 1 fault(s)" in out
        for team in (a, b):
            monkeypatch.setenv("STORMLAB_STATE_DIR", str(team))
            assert main(["chaos", "list"]) == 0 and "no active faults" in capsys.readouterr().out
        monkeypatch.setenv("STORMLAB_STATE_DIR", str(home))
    finally:
        monkeypatch.setenv("STORMLAB_STATE_DIR", str(home))  # the room's, whichever team's lab the test was in
        assert main(["room", "down"]) == 0
    assert "stopped 2 team labs (team-1, team-2)" in capsys.readouterr().out
    assert [p for p in pids if alive(p)] == []
    assert not (home / "room" / "room.json").exists() and not (home / "room" / "facilitator").exists()
    assert running(home / "room" / "team-1") is None
    assert main(["room", "down"]) == 0 and "no room was up" in capsys.readouterr().out
    assert main(["room", "status"]) == 1
    assert os.environ["STORMLAB_STATE_DIR"] == str(home)
