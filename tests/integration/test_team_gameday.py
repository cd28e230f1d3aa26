"""A team's game day through the CLI: the runner pages the database and queues on-calls from the
alert rules (evaluated by the runner itself, no Docker), two scripted players acknowledge,
move and post to the status page as their roles, and the report scores each role."""

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from chaos import journal
from stormcore.auth import read_token
from stormlab.cli import main
from stormlab.responder import desk
from tests.conftest import until

# The Monday tail pages the database (one table fails while the aggregate looks fine); the
# database's pause then starves the queues of their metadata, which pages the queues. The tail
# lasts well past TableSLOBurn's `for` (60 s) plus the table's climb through loadgen's window, so
# a loaded host still pages before the tail reverts by itself.
SCENARIO = """\
title: a team's Monday
settings: {racks: 2, nodes_per_rack: 20, renewal_period_s: 1s, gsi_growth: off}
steady_state:
  - {probe: customer_error_ratio, below: 0.01}
steady_state_within: 20s
steps:
  - {name: the tail, at: 2s, fault: stuck-partition, args: {tables: metric-groups, duration: 150s}}
  - {name: one table fails, expect: {probe: table_error_ratio, table: metric-groups, above: 0.05, for: 4s, within: 40s}}
  - name: the team
    operator:
      time_limit: 5m
      recovered: {probe: worst_table_error_ratio, below: 0.01, for: 6s}
stop_when:
  - {probe: customer_error_ratio, above: 0.99, for: 2m}
scoring: {onset: one table fails}
"""


def wait_for_page(state: Path, role: str, limit_s: float = 120.0) -> dict:
    return until(lambda: desk.unacked(state, role), limit_s, interval_s=0.5, what=f"a page for {role}")[-1]


@pytest.mark.lab
@pytest.mark.timeout(400)
def test_two_roles_play_a_game_day_through_the_cli(tmp_path, monkeypatch, capsys):
    state = tmp_path / "state"
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(state))
    path = tmp_path / "team.yaml"
    path.write_text(SCENARIO)
    out_dir, board = tmp_path / "runs", tmp_path / "board.jsonl"
    argv = ["scenario", "run", str(path), "--speed", "2", "--base-port", "0", "--desk-port", "0"]
    argv += ["--out", str(out_dir), "--leaderboard", str(board), "--team", "blue", "--json"]
    run = subprocess.Popen(
        [sys.executable, "-m", "stormlab.cli", *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ.copy()
    )
    try:
        # database: paged by TableSLOBurn; acknowledges, tells customers, pauses the metadata service
        paged = wait_for_page(state, "database")
        secrets = {(state / "game" / role).read_text().strip() for role in ("database", "queues")} | {read_token(state / ".env")}
        assert paged["alert"] == "TableSLOBurn", paged
        # a role is an identity while the game is on: no role, or a token the desk did not issue, moves nothing
        assert main(["ops", "pause-metadata"]) == 2
        monkeypatch.setenv("STORMLAB_ROLE_TOKEN", "a-token-nobody-issued")
        assert main(["ops", "--as", "database", "pause-metadata"]) == 2
        monkeypatch.delenv("STORMLAB_ROLE_TOKEN")
        assert main(["ops", "--as", "queues", "pause-metadata"]) == 2  # not the queues' move
        assert main(["ops", "--as", "database", "ack"]) == 0
        assert main(["ops", "--as", "database", "ack"]) == 2  # nothing left to acknowledge
        text = "Elevated errors for customers of metric-groups; other tables are fine. Investigating."
        assert main(["ops", "--as", "database", "post-status", "--severity", "partial-outage", text]) == 0
        assert main(["ops", "--as", "database", "pause-metadata", "--duration", "90s"]) == 0
        # queues: the pause starves them of their queue metadata; paged by QueuesFailing
        paged = wait_for_page(state, "queues")
        assert paged["alert"] == "QueuesFailing", paged
        assert main(["ops", "--as", "queues", "ack", "QueuesFailing"]) == 0
        assert main(["ops", "--as", "queues", "enable", "stale-cache", "--duration", "5m"]) == 0
        time.sleep(4)
        assert main(["ops", "--as", "database", "resume"]) == 0
        # and ends the tail itself: the game is won when the table recovers, not when the fault's lease runs out
        assert main(["ops", "--as", "database", "restore-partition"]) == 0
        out, _ = run.communicate(timeout=240)
    finally:
        if run.poll() is None:
            run.terminate()
            run.communicate(timeout=60)
        if run.stdout and not run.stdout.closed:
            run.stdout.close()  # a failure above must not leave the pipe to the next test's garbage collection
    capsys.readouterr()
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert all(line.startswith("{") for line in out.splitlines() if line.strip()), out  # --json: nothing but JSON lines
    kinds = {e["event"] for e in events}
    assert {"settled", "desk", "roles", "step", "progress", "page", "done"} <= kinds, kinds
    assert next(e for e in events if e["event"] == "roles")["roles"] == sorted(["database", "queues", "scaling", "metrics", "console"])
    assert not (state / "game").exists()  # the tokens went with the game
    assert not any(secret in out for secret in secrets)  # its lines went to a terminal here; in a room, to game.log
    leaked = [
        str(path)
        for path in tmp_path.rglob("*")
        if path.is_file() and path.stat().st_mode & 0o077 and any(secret.encode() in path.read_bytes() for secret in secrets)
    ]
    assert leaked == [], f"a token in a file others can read: {leaked}"
    progress = next(e for e in events if e["event"] == "progress")
    assert {"step", "waiting_for", "value", "left_s"} <= set(progress)
    done = events[-1]
    assert done["event"] == "done" and done["outcome"] == "passed", out

    [journal_path] = out_dir.glob("*/journal.json")
    journal = json.loads(journal_path.read_text())
    assert {p["alert"] for p in journal["pages"] if p["status"] == "firing"} >= {"TableSLOBurn", "QueuesFailing"}
    roles = journal["roles"]
    assert roles["database"]["first_page"] == "TableSLOBurn"
    assert roles["database"]["acks"] == 1 and roles["queues"]["acks"] == 1
    assert roles["database"]["moves"] == 3 and roles["queues"]["moves"] == 1
    for role in ("database", "queues"):
        assert 0 <= roles[role]["time_to_ack_s"] <= roles[role]["time_to_detect_s"] < 60, roles
    queue_moves = [a for a in journal["player_actions"] if a.get("role") == "queues"]
    assert [(a["action"], a["ok"]) for a in queue_moves] == [("ack", True), ("enable", True)]  # the refused move is not one
    assert all(a["via"] == "ops" and a["role"] for a in journal["player_actions"])  # every move the desk made had a role
    tail = next(s for s in journal["steps"] if s["name"] == "the tail")
    assert journal["score"]["time_to_detect_s"] is not None and journal["score"]["onset_s"] > tail["at_s"]  # not the start-up's errors
    posted = journal["status_page"]
    assert posted["posts"] == 1 and posted["tables_named"] == ["metric-groups"] and posted["impact_named"]
    assert posted["time_to_post_s"] is not None and posted["time_to_post_s"] >= 0
    assert [s["kind"] for s in journal["steps"]].count("steady-after") == 1 and journal["steps"][-1]["passed"]

    report = (journal_path.parent / "report.html").read_text()
    assert (journal_path.parent / "roles.png").exists()
    for shown in ("TableSLOBurn", "QueuesFailing", "stale-cache", "partial-outage", "metric-groups", "time to detect", "2:19 AM"):
        assert shown in report, shown
    [entry] = [json.loads(line) for line in board.read_text().splitlines()]
    assert entry["team"] == "blue" and {"database", "queues"} <= set(entry["roles"])  # the pause pages scaling and metrics too
    assert entry["roles"]["queues"]["moves"] == 1


def status_of(state: dict, name: str) -> dict:
    with urllib.request.urlopen(f"{state['components'][name]['url']}/status", timeout=5) as resp:
        return json.loads(resp.read())


@pytest.mark.timeout(120)
def test_the_fixes_switch_on_in_the_running_services_and_off_with_their_lease(lab, capsys):
    started = lab(cascade=("queues", "scaling", "console"), serving=False)
    state = started.state
    assert status_of(state, "scaling")["workers"] == 1 and not status_of(state, "queues")["fix_stale_cache"]
    assert main(["ops", "--as", "scaling", "scale-workers", "4"]) == 0
    assert main(["ops", "--as", "queues", "enable", "stale-cache"]) == 0
    assert main(["ops", "--as", "console", "enable", "short-timeout", "--duration", "1s"]) == 0
    assert main(["ops", "--as", "console", "enable", "stale-cache"]) == 2  # the queues' fix
    assert main(["ops", "--as", "scaling", "scale-workers", "0"]) == 2
    assert status_of(state, "scaling")["workers"] == 4 and status_of(state, "queues")["fix_stale_cache"]
    assert status_of(state, "console")["lookup_timeout_s"] == 0.1
    time.sleep(1.5)  # the console's lease ends by itself
    assert status_of(state, "console")["lookup_timeout_s"] == 1.5
    capsys.readouterr()
    assert main(["chaos", "list"]) == 0
    listed = capsys.readouterr().out
    assert "scale-workers" in listed and "stale-cache" in listed and "short-timeout" not in listed
    assert main(["chaos", "halt"]) == 0
    assert status_of(state, "scaling")["workers"] == 1 and not status_of(state, "queues")["fix_stale_cache"]
    roles = [(e["role"], e["action"], e["ok"]) for e in journal.read_journal(started.directory)]
    assert roles == [  # a move out of range is journaled as failed; another role's move is not a move at all
        ("scaling", "scale-workers", True),
        ("queues", "enable", True),
        ("console", "enable", True),
        ("scaling", "scale-workers", False),
    ]
