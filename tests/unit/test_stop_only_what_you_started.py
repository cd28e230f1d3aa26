"""Stop only what you started: a room's runners are known by their pid and start time, so a stale
game.json whose pid now belongs to someone else (an editor open on a scenario file, whose command
line says "scenario" too) is never signalled by `room end` or `room down`."""

import json
import os
import subprocess
import sys

from stormcore.procs import Child, start_ticks
from stormlab.rooms import room


def editor_on_a_scenario() -> subprocess.Popen:
    """A process that is nobody's runner, whose command line names a scenario all the same."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "vim", "scenarios/room-2015.yaml"])


def a_room_with_a_game(tmp_path, teams: dict[str, dict]) -> None:
    home = room.room_dir(tmp_path)
    for team in teams:
        (home / team).mkdir(parents=True)
    (home / room.CARD).write_text(json.dumps({"teams": {t: str(home / t) for t in teams}, "sizing": {"speed": 1}}))
    for team, entry in teams.items():
        entry["log"] = str(home / team / room.GAME_LOG)
    (home / room.GAME).write_text(json.dumps({"scenario": "s.yaml", "started_at": 0.0, "teams": teams}))


def test_room_end_leaves_a_process_that_took_a_stale_runners_pid(tmp_path):
    editor = editor_on_a_scenario()
    try:
        stale = {"pid": editor.pid, "started": start_ticks(editor.pid) - 1}  # the runner that had this pid is long gone
        a_room_with_a_game(tmp_path, {"team-1": stale})
        assert not room.runner_alive(stale)
        room.end(tmp_path, wait_s=1)
        assert editor.poll() is None, "room end signalled a process it did not start"
        a_room_with_a_game(tmp_path / "old", {"team-1": {"pid": editor.pid}})  # a game.json of before start times were kept
        room.end(tmp_path / "old", wait_s=1)
        assert editor.poll() is None
    finally:
        editor.kill()
        editor.wait()


def test_room_end_stops_the_very_runner_it_started(tmp_path):
    runner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "scenario"])
    try:
        a_room_with_a_game(tmp_path, {"team-1": Child.of(runner.pid).record()})
        assert room.runner_alive(Child.of(runner.pid).record())
        room.end(tmp_path, wait_s=5)
        assert runner.wait(timeout=5) is not None
    finally:
        runner.kill()
        runner.wait()


def test_a_child_is_its_pid_and_its_start_time():
    me = Child.of(os.getpid())
    assert me.alive() and Child.read(me.record()) == me
    assert not Child(me.pid, me.started + 1).alive() and not Child(me.pid, me.started + 1).send(0)
    assert Child.read({"pid": me.pid}) is None and Child.read({"pid": True, "started": 1}) is None and Child.read("x") is None
