"""End to end: a training room on docker compose, a project per team. Two teams' stacks come up on
their own blocks of ports, each with its own token and an Alertmanager that posts to its own desk;
a blip through team 1's chaos (its `room env`) fails team 1's customers while team 2's stay under 1%; a
fault left in each stack ends with `room halt`; `room down` leaves no container, network or volume
of either project.

Small fleets (4 racks x 10 nodes a team): this is about what the teams share (nothing), not the
storm, which tests/e2e/test_compose.py measures. The room is started through `room.up` with its
sizing given: `room up --backend compose` sizes a room of 2 on this 2-core host as over its budget
at the herd (docs/rooms.md), and no herd is played here.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from stormcore.settings import LabSettings
from stormlab.rooms import cli as room_cli
from stormlab.rooms import room, room_compose
from tests import inprocess

TEAMS = ("team-1", "team-2")

pytestmark = pytest.mark.timeout(900)


def stormlab(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`stormlab ARGS` in a shell with ``env``: a player's after `eval "$(stormlab room env TEAM)"`, or the organiser's."""
    done = inprocess.stormlab(list(args), env)
    print(f"{done.stdout}{done.stderr}")
    return done


def leftovers(project: str) -> list[str]:
    label = f"label=com.docker.compose.project={project}"
    found = []
    for cmd in (["ps", "-a"], ["network", "ls"], ["volume", "ls"]):
        found += subprocess.run(["docker", *cmd, "--filter", label, "-q"], capture_output=True, text=True).stdout.split()
    return found


@pytest.fixture(scope="module")
def the_room(tmp_path_factory):
    state = tmp_path_factory.mktemp("room") / "state"
    env = dict(os.environ, STORMLAB_STATE_DIR=str(state))
    for key in ("STORMLAB_TOKEN", "STORMLAB_TOKEN_FILE", "STORMLAB_BACKEND", "COMPOSE_PROJECT_NAME"):
        env.pop(key, None)
    settings = LabSettings().replace(racks=4, nodes_per_rack=10)
    sizing = room.Sizing(teams=2, nodes=40, speed=1.0, host_cores=os.cpu_count() or 1, fit=2, cores=0.0)
    started = time.monotonic()
    try:
        card = room.up(settings, sizing, state, say=print, backend="compose")
        print(f"the room's two stacks up in {time.monotonic() - started:.1f} s")
        yield card, env
    finally:
        stormlab("room", "down", env=env)
        for n, team in enumerate(TEAMS, start=1):  # whatever the test did, nothing of the room stays
            if leftovers(room_compose.project(team)):
                room_compose.down_team(room_compose.variables(team, n, settings, state / team), state / team)


def status(env: dict[str, str]) -> dict:
    done = stormlab("room", "status", "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["teams"]


def team_env(env: dict[str, str], team: str) -> dict[str, str]:
    """What `eval "$(stormlab room env TEAM)"` gives a player's shell."""
    done = stormlab("room", "env", team, env=env)
    assert done.returncode == 0, done.stderr
    unset, *lines = done.stdout.splitlines()
    assert unset == "unset STORMLAB_TOKEN STORMLAB_TOKEN_FILE"  # the team's own token, never one exported where the room runs
    exports = dict(line.removeprefix("export ").split("=", 1) for line in lines)
    return {k: v for k, v in env.items() if k not in ("STORMLAB_TOKEN", "STORMLAB_TOKEN_FILE")} | exports


def test_a_room_on_compose_shares_nothing_between_its_teams(the_room):
    card, env = the_room
    assert card["backend"] == "compose"
    tokens = {t: (Path(card["teams"][t]) / ".env").read_text() for t in TEAMS}
    assert tokens["team-1"] != tokens["team-2"]  # each stack made its own
    for n in range(1, len(TEAMS) + 1):
        ports = room_compose.ports(n)
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['ALERTMANAGER_PORT']}/api/v2/status", timeout=10) as resp:
            config = json.loads(resp.read())["config"]["original"]
        assert f"http://stormlab-desk:{ports['DESK_PORT']}/alertmanager" in config, config  # its pages go to its own desk
    seen = status(env)
    assert {t: (s["nodes_serving"], s["nodes_total"]) for t, s in seen.items()} == {t: (40, 40) for t in TEAMS}
    assert all(s["customer_error_ratio"] < 0.01 for s in seen.values())

    # a blip through team 1's own chaos container: team 1's customers fail, team 2's never do
    one = team_env(env, "team-1")
    blip = stormlab("chaos", "blip", "--rack-set", "0,1", "--duration", "8s", env=one)
    assert blip.returncode == 0 and "stormlab-team-1_rack_1" in blip.stdout and "team-2" not in blip.stdout
    worst, after = {t: 0.0 for t in TEAMS}, 0  # readings since team 1's customers failed
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline and after < 5:  # team 2 read through team 1's worst
        for team, s in asyncio.run(room_cli.readings(card)).items():  # what `room status` reads, in this process
            worst[team] = max(worst[team], (s.reading.customer_error_ratio if s else None) or 0.0)
        after += worst["team-1"] > 0.1
        time.sleep(1)
    print(f"the worst customers' error through team 1's blip: {worst}")
    assert worst["team-1"] > 0.1 and worst["team-2"] < 0.01

    # a fault left in each stack (a blip of three racks for ten minutes) ends with one halt of the room;
    # each team's own `chaos list` is then empty
    for mine in (one, team_env(env, "team-2")):
        assert stormlab("chaos", "blip", "--rack-set", "3", "--duration", "10m", env=mine).returncode == 0
    halted = stormlab("room", "halt", env=env)
    assert halted.returncode == 0 and "team-1: halted 3 fault(s)" in halted.stdout and "team-2: halted 3 fault(s)" in halted.stdout
    assert "no active faults" in stormlab("chaos", "list", env=one).stdout

    # down: nothing of either project stays
    assert stormlab("room", "down", env=env).returncode == 0
    assert {t: leftovers(room_compose.project(t)) for t in TEAMS} == {t: [] for t in TEAMS}
