"""Each incident's account beside a run: the trigger, the moments, the fractions (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stormcore.settings import INCIDENTS
from stormlab.scenarios import debrief, leaderboard, report, report_html, scoring
from stormlab.scenarios.reader import load
from stormlab.scenarios.scenario import ScenarioError

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def journal_2025() -> dict:
    """A run of scenarios/aws-2025-10.yaml as the runner journals it: the record empties at 10 s,
    is put back at 130 s, the throttle comes at 200 s, every lease is back at 340 s."""
    throttle = {"kind": "action", "name": "throttle incoming work", "action": "throttle", "at_s": 200.0, "passed": True}
    return {
        "steps": [
            {"kind": "fault", "name": "the endpoint's record is empty", "fault": "dns-empty", "at_s": 10.0, "passed": True},
            {"kind": "expect", "name": "launches fail", "at_s": 10.0, "met_after_s": 70.0, "passed": True, "mean": 0.99,
             "expect": "launch_error_ratio above 0.9"},
            {"kind": "action", "name": "the record is put back by hand", "action": "repair-endpoint", "at_s": 130.0, "passed": True},
            {"kind": "expect", "name": "the congestive collapse", "at_s": 130.0, "met_after_s": 60.0, "passed": True, "mean": 1.0,
             "expect": "launch_error_ratio above 0.9 for 60s"},
            {"kind": "operator", "name": "recovery", "started_s": 195.0, "recovered_after_s": 145.0, "passed": True,
             "autopilot": [throttle]},
        ],
        "player_actions": [
            {"t": 130.0, "action": "repair-endpoint", "args": {}, "ok": True},
            {"t": 200.0, "action": "throttle", "args": {"rate": 10}, "ok": True},
        ],
        "samples": [],
    }  # fmt: skip


def test_the_2025_account_is_timed_from_the_empty_record_to_every_lease_back():
    scenario = load((SCENARIOS / "aws-2025-10.yaml").read_text())
    journal = journal_2025()
    assert scoring.blip_and_recovery(scenario, journal) == (10.0, 340.0)
    assert scoring.run_pace(scenario, journal) == pytest.approx(340 * 60 / 330)
    rows = {r["in_2015"]: r for r in scoring.seed_timeline(scenario, journal)}
    assert [rows[t]["fraction_2015"] for t in ("23:48", "02:25", "04:14", "05:28")] == [0.0, 0.46, 0.78, 1.0]
    assert [rows[t]["lab_after_blip_s"] for t in ("23:48", "02:25", "04:14", "05:28")] == [0.0, 120.0, 190.0, 330.0]
    assert rows["02:25"]["fraction_lab"] == round(120 / 330, 2) and rows["05:28"]["fraction_lab"] == 1.0
    compared = {c["what"]: c for c in scoring.compare(scenario, journal)}
    assert compared["launch errors after the repair, before the moves"]["lab"] == "100.0%"
    assert compared["record empty to repaired"]["lab"] == "120 s"
    assert compared["throttle to every lease back"]["lab"] == "140 s"
    assert not any(c["cascade"] for c in compared.values())  # the lease manager is this account's own story, not a cascade


def test_the_report_and_the_debrief_name_the_account_they_set_beside_the_run():
    scenario = load((SCENARIOS / "aws-2025-10.yaml").read_text())
    journal = journal_2025()
    account = {"date": "19-20 October 2025", "trigger": "dns-empty", "span": "23:48 to 05:28"}
    scored = journal | {
        "comparison": scoring.compare(scenario, journal),
        "seed_timeline": scoring.seed_timeline(scenario, journal),
        "pace": scoring.run_pace(scenario, journal),
        "account": account,
    }
    assert debrief.year(scored) == "2025" and debrief.year({}) == "2015"
    lines = debrief._compared(scored["comparison"], debrief.year(scored))
    assert all("  2025: " in line for line in lines) and not any("2015" in line for line in lines)
    html = report_html.debrief(scored | {"roles": {}, "status_page": {}}, None)
    assert "19-20 October 2025" in html and "23:48 to 05:28" in html and "after the dns-empty" in html


def test_every_incident_has_its_account():
    assert set(scoring.ACCOUNTS) == set(INCIDENTS)
    for account in scoring.ACCOUNTS.values():
        assert account.rows[0][3] == f"fault:{account.trigger}" and account.rows[0][0] == 0  # the trigger starts the clock
        assert any(mark == "recovered" and minutes == account.recovered_min for minutes, _, _, mark in account.rows)


def test_the_2015_account_is_unchanged_by_the_second():
    scenario = load((SCENARIOS / "dynamodb-2015.yaml").read_text())
    account = scoring.account_of(scenario)
    assert account.trigger == "blip" and account.recovered_min == 291 and len(account.rows) == 7


def test_a_comparison_gives_the_account_figure_once():
    head = "title: t\nprofile: aws-2025-10\nsteps:\n  - {name: a, at: 1s, fault: dns-empty, args: {duration: 10s}}\n"
    ok = load(head + 'compare:\n  - {what: x, in_account: "2 h", span_account: 2h, measure: "elapsed:a..a"}\n', "ok.yaml")
    assert ok.compare[0].in_2015 == "2 h" and ok.compare[0].span_2015_s == 7200
    with pytest.raises(ScenarioError, match="once"):
        load(head + 'compare:\n  - {what: x, in_account: "2 h", in_2015: "2 h", measure: "elapsed:a..a"}\n', "both.yaml")
    with pytest.raises(ScenarioError, match="once"):
        load(head + 'compare:\n  - {what: x, measure: "elapsed:a..a"}\n', "none.yaml")


def test_the_2025_game_is_scored_by_its_launches_and_ranked_among_its_own_runs(tmp_path):
    scenario = load((SCENARIOS / "aws-2025-10.yaml").read_text())
    samples = [{"t": 0.0, "launch_error_ratio": 0.0}, {"t": 60.0, "launch_error_ratio": 1.0}, {"t": 120.0, "launch_error_ratio": 1.0}]
    score = scoring.score(scenario, journal_2025() | {"samples": samples})
    assert score["launch_error_minutes"] == 1.5 and score["customer_error_minutes"] == 0.0
    assert "launch_error_minutes" not in scoring.score(scenario, journal_2025())  # no launches measured: not scored
    board = tmp_path / "board.jsonl"
    for title, minutes in (("2015", 0.1), ("2025", 3.0), ("2025", 1.5)):
        leaderboard.append(board, {"scenario": title, "recovered": True, "customer_error_minutes": 0.0, "launch_error_minutes": minutes})
    mine = leaderboard.of_scenario(
        leaderboard.append(board, {"scenario": "2025", "recovered": True, "customer_error_minutes": 0.0}), "2025"
    )
    assert [e.get("launch_error_minutes") for e in mine] == [None, 1.5, 3.0]  # the 2015 run is not on 2025's board


def test_a_faults_window_in_the_report_ends_when_a_move_ended_it():
    journal = journal_2025()
    journal["steps"][0] |= {"duration_s": 600.0}
    journal["samples"] = [{"t": 0.0}, {"t": 400.0}]
    assert report.fault_windows(journal) == [(10.0, 130.0, "dns-empty")]  # repaired by hand at 130 s, not at its lease's end
    journal["player_actions"] = []
    assert report.fault_windows(journal) == [(10.0, 400.0, "dns-empty")]  # nobody repaired it: to the end of the run
