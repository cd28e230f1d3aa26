"""Sizing a training room against the host (pure): how many labs of a fleet fit at a speed, what
speed auto picks, and the reason a room is refused; the room's game read from its runners' lines
(stand-in runners), and the room's commands refusing what they cannot do."""

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from stormcore.errors import UsageError
from stormcore.procs import Child
from stormcore.settings import LabSettings
from stormlab.cli import main
from stormlab.engine.speed import LADDER
from stormlab.rooms import room


def test_more_teams_fit_on_more_cores_smaller_fleets_and_slower_speeds():
    assert room.teams_fit(1000, 1.0, 4) >= 2 * room.teams_fit(1000, 1.0, 2) - 1
    assert room.teams_fit(400, 1.0, 2) > room.teams_fit(1000, 1.0, 2)
    assert room.teams_fit(1000, 0.5, 2) >= 2 * room.teams_fit(1000, 1.0, 2)
    assert room.lab_cores(1000, 0.5) == pytest.approx(room.lab_cores(1000, 1.0) / 2)


def test_the_sizing_holds_what_was_measured_here():
    """benchmarks/class_viewers.py on 2 cores (2026-12-05): four 400-node labs at speed 1 broke the
    loop-lag budget at their herd (every console open or none), three stayed valid, and four at
    speed 0.5 stayed valid with every console open: three fit at speed 1, auto slows four to 0.5."""
    assert room.teams_fit(400, 1.0, 2) == 3
    assert room.size(4, 400, None, cores=2).speed == 0.5
    with pytest.raises(UsageError, match=r"over the 70% of the host's cores a valid room may use: at most 3 teams here; at --speed 0.5"):
        room.size(4, 400, 1.0, cores=2)


def test_a_room_that_fits_is_sized_and_one_that_does_not_is_refused_with_what_would():
    fit = room.teams_fit(1000, 1.0, 2)
    assert fit >= 1
    sizing = room.size(fit, 1000, 1.0, cores=2)
    assert (sizing.teams, sizing.speed, sizing.fit) == (fit, 1.0, fit)
    assert sizing.cores <= 0.9 * 2
    with pytest.raises(UsageError, match=rf"at most {fit} team.* here; at --speed 0\.\d+ all {fit + 1} fit"):
        room.size(fit + 1, 1000, 1.0, cores=2)


def test_speed_auto_picks_the_fastest_speed_at_which_every_team_fits():
    fit = room.teams_fit(1000, 1.0, 2)
    assert room.size(fit, 1000, None, cores=2).speed == 1.0
    slower = room.size(fit + 1, 1000, None, cores=2)
    assert slower.speed < 1.0 and slower.speed in LADDER and room.teams_fit(1000, slower.speed * 2, 2) < fit + 1
    with pytest.raises(UsageError, match="do not fit on 2 cores even at speed"):
        room.size(room.MAX_TEAMS, 100_000, None, cores=2)


@pytest.mark.parametrize("teams", [0, -1, room.MAX_TEAMS + 1])
def test_a_number_of_teams_out_of_range_is_refused(teams):
    with pytest.raises(UsageError, match="--teams is a whole number"):
        room.size(teams, 1000, 1.0, cores=2)


def stand_in_runner() -> subprocess.Popen:
    """A process that looks like a team's runner (its command line names the scenario) and waits."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "scenario"])


def test_each_teams_game_is_read_from_its_runners_lines_and_the_game_ends_with_its_runners(tmp_path):
    home = room.room_dir(tmp_path)
    teams = {t: home / t for t in ("team-1", "team-2")}
    for where in teams.values():
        where.mkdir(parents=True)
    (home / room.CARD).write_text(json.dumps({"teams": {t: str(w) for t, w in teams.items()}, "sizing": {"speed": 1}}))
    done = {"event": "done", "outcome": "passed", "score": {"recovered": True}, "roles": {"database": {"moves": 3}}, "report": "r.html"}
    lines = [{"event": "settled"}, {"event": "desk", "url": "http://127.0.0.1:1"}, done]
    (teams["team-1"] / room.GAME_LOG).write_text("\n".join(json.dumps(e) for e in lines) + '\n{"event": "prog')  # a line half written
    (teams["team-2"] / room.GAME_LOG).write_text('{"event": "desk", "url": "http://127.0.0.1:2"}\n')
    finished = subprocess.Popen([sys.executable, "-c", "pass", "scenario"])
    finished.wait()
    waiting = stand_in_runner()
    try:
        gone = {"pid": finished.pid, "started": 1}  # reaped: its start time is no process's now
        game = {"scenario": "s.yaml", "teams": {"team-1": gone, "team-2": Child.of(waiting.pid).record()}}
        for team, where in teams.items():
            game["teams"][team]["log"] = str(where / room.GAME_LOG)
        (home / room.GAME).write_text(json.dumps(game))
        assert [e["event"] for e in room.events(teams["team-1"] / room.GAME_LOG)] == ["settled", "desk", "done"]
        state = room.game_state(tmp_path)
        assert state["team-1"] == {"running": False, "desk": None, "outcome": "passed", "score": {"recovered": True},
                                   "roles": {"database": {"moves": 3}}, "report": "r.html"}  # fmt: skip
        assert state["team-2"] == {"running": True, "desk": "http://127.0.0.1:2", "outcome": None}
        assert not room.runner_alive({"pid": os.getpid()})  # a pid alone is nobody we started
        ended = room.end(tmp_path, wait_s=10)  # SIGTERM: the stand-in ends as a runner would, its rollbacks run
        assert ended["team-2"]["running"] is False and waiting.wait(timeout=5) is not None
        assert ended["team-2"]["said"].startswith('{"event": "desk"')  # no outcome: its last words
    finally:
        waiting.kill()
        waiting.wait()


def test_the_rooms_commands_refuse_what_they_cannot_do_and_start_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(tmp_path / "state"))
    scenario = str(Path(__file__).parents[2] / "scenarios" / "room-2015.yaml")
    assert main(["room", "up", "--teams", "2", "--scenario", scenario, "--racks", "3"]) == 2  # the scenario decides the racks
    assert "with --scenario the labs take its settings: drop --racks (change one with --set KEY=VALUE)" in capsys.readouterr().err
    assert main(["room", "up", "--teams", "2", "--scenario", str(tmp_path / "none.yaml")]) == 2
    for command in (["play"], ["end"], ["hold"], ["continue"], ["debrief"], ["inject", "--to", "team", "hello"], ["console"]):
        assert main(["room", *command]) == 1, command  # no room is up
        assert "no room is up" in (said := capsys.readouterr().err) or "no game was started" in said, said
    assert not (tmp_path / "state" / "room" / room.CARD).exists()


def test_a_hold_goes_to_every_teams_desk_with_its_lab_token_and_a_team_without_a_game_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("STORMLAB_TOKEN", "a-token-exported-where-the-room-runs")  # not the teams': each lab has its own
    heard = []

    class StandInDesk(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            heard.append((self.path, self.headers["Authorization"], body))
            answer = json.dumps({"changed": True, "held": body["on"], "t": 42.0, "started": True}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), StandInDesk)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    home = room.room_dir(tmp_path)
    teams = {t: home / t for t in ("team-1", "team-2")}
    for where in teams.values():
        where.mkdir(parents=True)
    (home / room.CARD).write_text(json.dumps({"teams": {t: str(w) for t, w in teams.items()}, "sizing": {"speed": 1}}))
    (teams["team-1"] / ".env").write_text("STORMLAB_TOKEN=team-1s-own-lab-token\n")
    url = f"http://127.0.0.1:{server.server_address[1]}"
    (teams["team-1"] / room.GAME_LOG).write_text(json.dumps({"event": "desk", "url": url}) + "\n")
    (teams["team-2"] / room.GAME_LOG).write_text("")  # its runner has not served its desk yet
    runners = [stand_in_runner(), stand_in_runner()]
    try:
        played = zip(teams.items(), runners, strict=True)
        game = {"scenario": "s.yaml", "teams": {t: Child.of(r.pid).record() | {"log": str(w / room.GAME_LOG)} for (t, w), r in played}}
        (home / room.GAME).write_text(json.dumps(game))
        told = room.hold(True, tmp_path)
        assert told == {"team-1": {"changed": True, "held": True, "t": 42.0, "started": True}, "team-2": "no game on in this lab"}
        assert room.hold(False, tmp_path)["team-1"]["held"] is False
        assert heard == [
            ("/hold", "Bearer team-1s-own-lab-token", {"on": True}),
            ("/hold", "Bearer team-1s-own-lab-token", {"on": False}),
        ]
    finally:
        server.shutdown()
        server.server_close()
        for r in runners:
            r.kill()
            r.wait()


def test_each_teams_lab_gets_its_own_token_even_with_one_exported(tmp_path, monkeypatch):
    """A room started where STORMLAB_TOKEN is exported gave every team's lab that one token: a
    team's players could reach every other team's lab. Each team's is its own, in its directory."""
    exported = "one-token-exported-in-the-organisers-shell"
    monkeypatch.setenv("STORMLAB_TOKEN", exported)
    started = {}

    def up(settings, base_port, directory, token):
        started[directory.name] = token

    monkeypatch.setattr(room.launcher, "up", up)
    room.up(LabSettings(racks=1, nodes_per_rack=10), room.size(2, 10, 1.0, cores=2), tmp_path, say=lambda *a: None)
    assert set(started) == {"team-1", "team-2"} and len(set(started.values())) == 2 and exported not in started.values()
    for team, token in started.items():
        env = room.room_dir(tmp_path) / team / ".env"
        assert env.read_text() == f"STORMLAB_TOKEN={token}\n" and env.stat().st_mode & 0o777 == 0o600


def test_room_env_unsets_an_exported_token_for_the_teams_own(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(tmp_path))
    home = room.room_dir(tmp_path)
    home.mkdir(parents=True)
    (home / room.CARD).write_text(json.dumps({"teams": {"team-1": str(home / "team-1")}, "sizing": {"speed": 1}}))
    assert main(["room", "env", "team-1"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "unset STORMLAB_TOKEN STORMLAB_TOKEN_FILE" and "STORMLAB_TOKEN=" not in out


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--listen", "0.0.0.0"], "say which address the players use with --public-url"),
        (["--listen", "class.local"], "--listen takes an address of this host"),
        (["--listen", "10.0.0.5", "--public-url", "http://x:8080"], "no port"),
        (["--tls", "--tls-cert", "c.pem", "--tls-key", "k.pem"], "--tls makes a certificate"),
        (["--tls", "--public-url", "http://x"], "should start https://"),
        (["--tls-cert", "c.pem"], "go together"),
    ],
)
def test_a_room_that_players_could_not_reach_is_refused_before_any_lab_starts(tmp_path, monkeypatch, capsys, flags, said):
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(room.launcher, "up", lambda *a, **k: pytest.fail("a lab started"))
    assert main(["room", "up", "--teams", "1", "--racks", "2", "--nodes-per-rack", "4", *flags]) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "state" / "room" / room.CARD).exists()


def test_a_reachable_room_hands_its_address_to_each_team_s_runner_and_a_local_one_nothing():
    from stormlab.responder.reach import Reach

    local = room.runner_argv(Path("s.yaml"), "team-1", 1.0, False, Path("/r"), None, Reach())
    assert "--listen" not in local
    reachable = room.runner_argv(Path("s.yaml"), "team-1", 1.0, False, Path("/r"), None, Reach.given("10.0.0.5", "http://203.0.113.7"))
    at = reachable.index("--listen")
    assert reachable[at : at + 4] == ["--listen", "10.0.0.5", "--public-url", "http://203.0.113.7"]


def test_a_team_s_game_is_read_through_its_desk_s_loopback_port_when_it_has_one(tmp_path):
    home = room.room_dir(tmp_path)
    where = home / "team-1"
    where.mkdir(parents=True)
    (home / room.CARD).write_text(json.dumps({"teams": {"team-1": str(where)}, "sizing": {"speed": 1}}))
    (where / room.GAME_LOG).write_text(
        json.dumps({"event": "desk", "url": "https://203.0.113.7:9001", "local": "http://127.0.0.1:40001"}) + "\n"
    )
    waiting = stand_in_runner()
    try:
        game = {"scenario": "s.yaml", "teams": {"team-1": Child.of(waiting.pid).record() | {"log": str(where / room.GAME_LOG)}}}
        (home / room.GAME).write_text(json.dumps(game))
        assert room.game_state(tmp_path)["team-1"]["desk"] == "http://127.0.0.1:40001"
    finally:
        waiting.kill()
        waiting.wait()
