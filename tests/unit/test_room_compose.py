"""A training room on docker compose: each team's block of ports (disjoint, every port the compose
file publishes moved), its compose variables (the settings compose carries; one it cannot, refused),
its Alertmanager posting to its own desk, the environment its commands run with, and the room's
up and down driving a stand-in `docker compose` project by project."""

import json
import os
import re
import stat
import sys
from pathlib import Path

import pytest
import yaml

from stormcore.errors import LabError, UsageError
from stormcore.settings import LabSettings
from stormlab.cli import main
from stormlab.engine import compose
from stormlab.rooms import room, room_compose

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PORTS = {8700, 8702, 8704, 8705, 8706, 8707, 8708, 8709, 9090, 9093, 3000}  # one stack, its desk and the room's console


def test_every_team_has_a_block_of_ports_of_its_own_below_the_ephemeral_range():
    blocks = [set(room_compose.ports(n).values()) for n in range(1, room.MAX_TEAMS + 1)]
    seen: set[int] = set()
    for block in blocks:
        assert len(block) == len(room_compose.OFFSETS) and not block & seen and not block & DEFAULT_PORTS
        seen |= block
    assert max(seen) < 32768  # Linux hands out ephemeral ports from 32768: a free port a lab takes cannot be one of these
    assert room_compose.ports(1)["METADATA_PORT"] == 20020 and room_compose.ports(2)["DESK_PORT"] == 20049


def test_every_port_the_compose_file_publishes_is_moved_for_each_team():
    published = set(re.findall(r"\$\{(\w+_PORT):-\d+\}", (ROOT / "docker-compose.yml").read_text()))
    assert published and published <= set(room_compose.OFFSETS)


def test_a_teams_variables_are_its_project_its_ports_and_the_settings_compose_carries(tmp_path):
    settings = LabSettings().replace(racks=10, nodes_per_rack=40, capacity_cores=16.0)
    got = room_compose.variables("team-2", 2, settings, tmp_path / "team-2")
    assert got["COMPOSE_PROJECT_NAME"] == "stormlab-team-2"
    assert got["STORMLAB_ALERTMANAGER_DIR"] == str(tmp_path / "team-2" / "alertmanager")
    assert (got["METADATA_PORT"], got["PROMETHEUS_PORT"]) == ("20040", "20050") and "DESK_PORT" not in got and "PLAY_PORT" not in got
    assert (got["STORMLAB_RACKS"], got["STORMLAB_NODES_PER_RACK"], got["STORMLAB_SEED"]) == ("10", "40", "2015")
    assert set(k for k in got if k.startswith("STORMLAB_")) - {"STORMLAB_ALERTMANAGER_DIR"} <= room_compose.carried()
    assert "STORMLAB_TOKEN" not in got  # each stack makes its own


def test_a_setting_compose_does_not_pass_to_its_services_is_refused_not_dropped(tmp_path):
    with pytest.raises(UsageError, match=r"does not pass STORMLAB_CUSTOMER_RATE .* --backend local"):
        room_compose.variables("team-1", 1, LabSettings().replace(customer_rate=50.0), tmp_path)


def test_each_teams_alertmanager_posts_every_page_to_its_own_desk():
    text = (ROOT / "alertmanager/alertmanager.yml").read_text()
    mine = yaml.safe_load(room_compose.alertmanager_config(text, 20029))
    urls = [w["url"] for r in mine["receivers"] for w in r["webhook_configs"]]
    assert urls and set(urls) == {"http://stormlab-desk:20029/alertmanager"}
    assert mine["route"] == yaml.safe_load(text)["route"]
    with pytest.raises(LabError, match="no longer posts to stormlab-desk:8709"):
        room_compose.alertmanager_config(text.replace("8709", "8710"), 20029)


def test_a_teams_commands_run_with_its_variables_and_token_not_the_facilitators(tmp_path, monkeypatch):
    monkeypatch.setenv("STORMLAB_TOKEN", "the-facilitators-own")
    monkeypatch.setenv("STORMLAB_RACKS", "3")
    monkeypatch.setenv("STORMLAB_BASE_IMAGE", "local/debian-python")
    team_env = room_compose.variables("team-1", 1, LabSettings(), tmp_path)
    env = room_compose.environment(team_env, tmp_path)
    assert auth_token(env) is None and env["STORMLAB_RACKS"] == "10" and env["STORMLAB_BASE_IMAGE"] == "local/debian-python"
    (tmp_path / ".env").write_text("STORMLAB_TOKEN=team-1s\n")
    env = room_compose.environment(team_env, tmp_path)
    assert auth_token(env) == "team-1s" and env["STORMLAB_STATE_DIR"] == str(tmp_path)
    assert env["STORMLAB_COMPOSE_PROJECT"] == "stormlab-team-1" and env["PATH"] == os.environ["PATH"]
    # the observers read the team's stack on its ports
    state = compose.docker_state(tmp_path, env)
    assert state["components"]["metadata"]["url"] == "http://127.0.0.1:20020"
    assert compose.DockerStack(tmp_path, env).prometheus == "http://127.0.0.1:20030"
    assert os.environ["STORMLAB_TOKEN"] == "the-facilitators-own"  # a team's state does not touch this process's


def auth_token(env):
    return env.get("STORMLAB_TOKEN")


def test_a_room_on_compose_runs_at_speed_1_and_its_stacks_ask_more_of_the_host():
    assert room.size(1, 400, None, cores=2, backend="compose").speed == 1.0
    with pytest.raises(UsageError, match="a room on compose runs at speed 1"):
        room.size(1, 400, 0.5, cores=2, backend="compose")
    # as measured here: two stacks of 400 nodes broke the loop-lag budget at one's herd on 2 cores; one fits
    assert room.teams_fit(400, 1.0, 2, "compose") == 1 < room.teams_fit(400, 1.0, 2)
    with pytest.raises(UsageError, match=r"over the 70% of the host's cores a valid compose room may use: at most 1 team here"):
        room.size(2, 400, 1.0, cores=2, backend="compose")
    assert room.size(3, 400, None, cores=8, backend="compose").fit >= 3
    with pytest.raises(UsageError, match="do not fit on 2 cores even at speed 1"):
        room.size(room.MAX_TEAMS, 1000, None, cores=2, backend="compose")


def test_a_teams_runner_plays_its_stack_with_the_desk_its_alertmanager_posts_to(tmp_path):
    argv = room.runner_argv(Path("s.yaml"), "team-1", 1.0, False, tmp_path, desk_port=20029)
    assert argv[argv.index("--backend") + 1] == "docker" and argv[argv.index("--desk-port") + 1] == "20029"
    local = room.runner_argv(Path("s.yaml"), "team-1", 2.0, False, tmp_path)
    assert local[local.index("--backend") + 1] == "local" and local[local.index("--desk-port") + 1] == "0"
    assert "--play-port" not in argv + local  # on loopback the desk's port serves the players too


def test_a_compose_room_served_to_a_class_gives_each_team_s_players_a_port_of_their_own(tmp_path):
    from stormlab.responder.reach import Reach

    team_env = room_compose.variables("team-2", 2, LabSettings(), tmp_path)
    desk, play = room_compose.desk_port(team_env), room_compose.play_port(team_env)
    assert (desk, play) == (20049, 20051) and play in room_compose.ports(2).values()  # checked free with the stack's ports
    argv = room.runner_argv(Path("s.yaml"), "team-2", 1.0, False, tmp_path, desk, Reach.given("10.0.0.5", None), play)
    assert argv[argv.index("--desk-port") + 1] == "20049" and argv[argv.index("--play-port") + 1] == "20051"
    assert argv[argv.index("--listen") + 1] == "10.0.0.5"


STAND_IN = """#!{python}
# a stand-in `docker compose`: each call's arguments and project, and answers as compose would
import json, os, sys
with open({log!r}, "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "project": os.environ.get("COMPOSE_PROJECT_NAME"),
                        "metadata_port": os.environ.get("METADATA_PORT"), "token": os.environ.get("STORMLAB_TOKEN"),
                        "alertmanager": os.environ.get("STORMLAB_ALERTMANAGER_DIR")}}) + "\\n")
if sys.argv[1:3] == ["exec", "-T"]:
    print("token-of-" + os.environ["COMPOSE_PROJECT_NAME"])
if sys.argv[1:2] == ["ps"]:
    print("c0ffee")
"""


def test_room_up_and_down_drive_one_compose_project_per_team(tmp_path, monkeypatch):
    log = tmp_path / "compose.jsonl"
    script = tmp_path / "compose"
    script.write_text(STAND_IN.format(python=sys.executable, log=str(log)))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(compose, "compose_cmd", lambda: [str(script)])
    monkeypatch.setattr(room_compose, "image_here", lambda name: False)
    monkeypatch.setattr(room_compose, "serving", lambda team_env: True)
    monkeypatch.setattr(room_compose, "check_ports", lambda number: None)
    monkeypatch.delenv("STORMLAB_TOKEN", raising=False)
    said: list[str] = []
    sizing = room.size(2, 400, None, cores=8, backend="compose")
    card = room.up(LabSettings().replace(racks=10, nodes_per_rack=40), sizing, tmp_path, said.append, backend="compose")
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    ups = sorted((c for c in calls if c["argv"][0] == "up"), key=lambda c: c["project"])  # started side by side
    assert [c["project"] for c in ups] == ["stormlab-team-1", "stormlab-team-2"]
    assert [c["metadata_port"] for c in ups] == ["20020", "20040"] and all(c["token"] is None for c in ups)
    assert "grafana" not in ups[0]["argv"] and "prometheus" in ups[0]["argv"] and any("Grafana's image" in s for s in said)
    for n, team in enumerate(("team-1", "team-2"), start=1):
        where = Path(card["teams"][team])
        assert (where / ".env").read_text() == f"STORMLAB_TOKEN=token-of-stormlab-{team}\n"
        assert stat.S_IMODE((where / ".env").stat().st_mode) == 0o600
        config = yaml.safe_load((where / "alertmanager" / "alertmanager.yml").read_text())
        assert (
            config["receivers"][0]["webhook_configs"][0]["url"] == f"http://stormlab-desk:{room_compose.ports(n)['DESK_PORT']}/alertmanager"
        )
    assert room.read_card(tmp_path)["backend"] == "compose"
    monkeypatch.setattr(room_compose, "state", lambda team_env, team_dir: {"settings": {}})
    log.write_text("")
    assert room.down(tmp_path) == ["team-1", "team-2"]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    downs = sorted((c for c in lines if c["argv"][0] == "down"), key=lambda c: c["project"])  # the stacks stop side by side
    assert [(c["project"], c["argv"]) for c in downs] == [
        (f"stormlab-{t}", ["down", "-v", "--remove-orphans"]) for t in ("team-1", "team-2")
    ]
    assert all(c["token"] == f"token-of-{c['project']}" for c in downs)  # each project's own
    assert room.read_card(tmp_path) is None and not (Path(card["teams"]["team-1"]) / ".env").exists()


def test_a_team_that_cannot_start_stops_the_teams_that_did(tmp_path, monkeypatch):
    script = tmp_path / "compose"
    fails = "1 if os.environ['COMPOSE_PROJECT_NAME'].endswith('2') and sys.argv[1] == 'up' else 0"
    script.write_text(f"#!{sys.executable}\nimport os, sys\nsys.exit({fails})\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(compose, "compose_cmd", lambda: [str(script)])
    monkeypatch.setattr(room_compose, "image_here", lambda name: True)
    monkeypatch.setattr(room_compose, "serving", lambda team_env: True)
    monkeypatch.setattr(room_compose, "check_ports", lambda number: None)
    monkeypatch.setattr(room_compose, "read_stack_token", lambda team_env, team_dir: "t")
    stopped = []
    monkeypatch.setattr(room_compose, "down_team", lambda team_env, team_dir: stopped.append(team_env["COMPOSE_PROJECT_NAME"]) or True)
    with pytest.raises(LabError, match="stormlab-team-2: `up` exited 1"):
        room.up(LabSettings(), room.size(2, 400, None, cores=8, backend="compose"), tmp_path, lambda s: None, backend="compose")
    assert stopped == ["stormlab-team-1", "stormlab-team-2"] and room.read_card(tmp_path) is None


def test_room_env_prints_what_makes_a_teams_commands_act_on_its_own_stack(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(tmp_path))
    home = room.room_dir(tmp_path)
    home.mkdir()
    teams = {t: str(home / t) for t in ("team-1", "team-2")}
    variables = {t: room_compose.variables(t, n, LabSettings(), home / t) for n, t in enumerate(teams, start=1)}
    (home / room.CARD).write_text(json.dumps({"backend": "compose", "teams": teams, "compose": variables, "sizing": {"speed": 1}}))
    assert main(["room", "env", "team-2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "unset STORMLAB_TOKEN STORMLAB_TOKEN_FILE"  # the team's own token, from its directory
    exports = dict(line.removeprefix("export ").split("=", 1) for line in lines[1:])
    assert exports["STORMLAB_STATE_DIR"] == teams["team-2"] and exports["STORMLAB_BACKEND"] == "docker"
    assert exports["COMPOSE_PROJECT_NAME"] == exports["STORMLAB_COMPOSE_PROJECT"] == "stormlab-team-2"
    assert exports["METADATA_PORT"] == "20040" and exports["PROMETHEUS_PORT"] == "20050"
    assert main(["room", "env", "team-3"]) == 2
    assert "no team 'team-3' in this room; teams: team-1, team-2" in capsys.readouterr().err


def test_a_policy_of_the_users_is_refused_on_compose_its_racks_run_the_images_code(tmp_path):
    with pytest.raises(UsageError, match=r"--retry-policy my_policy.py:Mine: a policy of yours lives on this host"):
        room_compose.variables("team-1", 1, LabSettings().replace(retry_policy="python:my_policy.py:Mine"), tmp_path)


def test_without_docker_a_compose_room_says_so_and_leaves_no_card(tmp_path, monkeypatch):
    monkeypatch.setattr(compose, "compose_cmd", lambda: [str(tmp_path / "no-such-docker-compose")])
    monkeypatch.setattr(room_compose, "check_ports", lambda number: None)
    monkeypatch.setenv("PATH", str(tmp_path))  # no docker either
    with pytest.raises(LabError, match="a room on compose needs Docker"):
        room.up(LabSettings(), room.size(1, 400, None, cores=2, backend="compose"), tmp_path, lambda s: None, backend="compose")
    assert room.read_card(tmp_path) is None
