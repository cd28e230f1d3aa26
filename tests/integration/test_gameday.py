"""Game days against a real (small) lab: the ops runbook, and Ctrl-C during a scenario run
still running the rollbacks and leaving no fault behind."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos import journal
from stormlab.cli import main
from stormlab.scenarios import scoring
from stormlab.scenarios.cli import read
from tests.conftest import ctrl_c_reaches_it

SCENARIO = """\
title: interrupted
settings: {racks: 2, nodes_per_rack: 20, renewal_period_s: 1s}
steps:
  - {name: long blip, at: 1s, fault: blip, args: {racks: 2, duration: 5m}}
  - {name: long wait, wait: 5m}
rollback:
  - {name: note the rollback, action: note, args: {text: rolled back}}
"""


SCENARIO_2015 = read(Path(__file__).resolve().parents[2] / "scenarios" / "dynamodb-2015.yaml")


@pytest.fixture
def small_lab(lab, capsys):
    """`stormlab up` of the scenarios' lab (their settings: a running lab with others is refused)."""
    directory = lab(cli=True, customer_rate=200).directory
    capsys.readouterr()
    return directory


def active_faults(capsys) -> str:
    assert main(["chaos", "list"]) == 0
    return capsys.readouterr().out


@pytest.mark.timeout(120)
def test_ops_runbook_on_a_lab(small_lab, capsys):
    assert main(["ops", "status"]) == 0
    assert "diagnosis:" in capsys.readouterr().out
    assert main(["ops", "pause-metadata"]) == 0
    assert "pause-metadata" in active_faults(capsys)
    assert main(["ops", "set-capacity", "80"]) == 0  # paused: the admin path is free
    assert main(["ops", "set-capacity", "-3"]) == 2
    assert main(["ops", "resume", "--staged", "2", "--every", "1s"]) == 0
    assert main(["ops", "resume", "--staged", "0"]) == 2
    assert main(["ops", "note", "looked", "at", "the", "margin"]) == 0
    capsys.readouterr()
    journal = [json.loads(line) for line in (small_lab / "ops-journal.jsonl").read_text().splitlines()]
    assert [(e["action"], e["ok"]) for e in journal] == [
        ("status", True),
        ("pause-metadata", True),
        ("set-capacity", True),
        ("set-capacity", False),
        ("resume", True),
        ("resume", False),
        ("note", True),
    ]
    assert journal[-1]["message"] == "looked at the margin"
    assert main(["chaos", "halt"]) == 0


@pytest.mark.lab
@pytest.mark.timeout(120)
def test_the_operator_s_moves_are_ops_s_journaled_and_scored_and_chaos_breaks_the_world(small_lab, capsys):
    started, started_mono = time.time(), time.monotonic()
    assert main(["ops", "pause-metadata", "--duration", "30s"]) == 0
    assert main(["ops", "set-capacity", "60", "--duration", "30s"]) == 0
    assert main(["ops", "resume", "--staged", "2", "--every", "1s"]) == 0
    assert main(["ops", "set-capacity", "0", "--duration", "30s"]) == 2  # refused: journaled as failed
    assert main(["chaos", "blip", "--rack-set", "1", "--duration", "1s"]) == 0  # a fault, not a responder's move
    with pytest.raises(SystemExit) as refused:  # a move is not a fault: chaos has no command for it
        main(["chaos", "capacity", "--cores", "60", "--duration", "30s"])
    assert refused.value.code == 2 and "invalid choice: 'capacity'" in capsys.readouterr().err
    moves = journal.timeline(journal.read_journal(small_lab, started), started_mono, started)
    assert [(m["fault"], m["via"], m["ok"]) for m in moves] == [
        ("pause-metadata", "ops", True),
        ("capacity", "ops", True),
        ("resume-metadata", "ops", True),
        ("capacity", "ops", False),
    ]
    operator = {"name": "recovery", "kind": "operator", "started_s": 0.0, "recovered_after_s": 5.0}
    score = scoring.score(SCENARIO_2015, {"steps": [operator], "samples": [], "player_actions": moves})
    assert score["actions_taken"] == 4 and score["failed_actions"] == 1
    assert main(["chaos", "halt"]) == 0


@pytest.mark.lab
@pytest.mark.timeout(60)
def test_a_scenario_refuses_a_running_lab_with_other_settings(small_lab, tmp_path, capsys):
    path = tmp_path / "other.yaml"
    path.write_text(SCENARIO.replace("renewal_period_s: 1s", "renewal_period_s: 2s"))
    assert main(["scenario", "run", str(path), "--out", str(tmp_path / "runs")]) == 2
    assert "STORMLAB_RENEWAL_PERIOD_S=2.0" in capsys.readouterr().err
    assert "no active faults" in active_faults(capsys)


@pytest.mark.lab
@pytest.mark.timeout(180)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_a_scenario_runs_the_rollbacks_and_leaves_no_fault(small_lab, tmp_path, capsys, sig):
    path = tmp_path / "interrupted.yaml"
    path.write_text(SCENARIO)
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stormlab.cli",
            "scenario",
            "run",
            str(path),
            "--out",
            str(tmp_path / "runs"),
            "--leaderboard",
            str(tmp_path / "board.jsonl"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ.copy(),
        preexec_fn=ctrl_c_reaches_it,
    )
    try:
        deadline = time.monotonic() + 90
        lines = [""]
        while time.monotonic() < deadline:
            lines.append(run.stdout.readline())
            if "long blip" in lines[-1] or not lines[-1]:  # there, or the run ended without it
                break
        assert "long blip" in lines[-1], "".join(lines)
        assert "blip on rack-0,rack-1" in active_faults(capsys)
        run.send_signal(sig)
        out, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        run.stdout.close()
    assert run.returncode == 130, out
    assert "interrupted: rollbacks ran" in out
    assert "no active faults" in active_faults(capsys)
    [journal_path] = (tmp_path / "runs").glob("*/journal.json")
    journal = json.loads(journal_path.read_text())
    assert journal["outcome"] == "interrupted"
    assert [r["name"] for r in journal["rollbacks"]] == ["note the rollback", "halt every fault"]
