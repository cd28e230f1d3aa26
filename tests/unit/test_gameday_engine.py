"""The scenario runner in virtual time against a toy lab: sequencing, expectations, the
operator phase, rollbacks on failure and on cancel, scoring and the seed-vs-lab table."""

import asyncio
import dataclasses
from pathlib import Path

import pytest

from stormcore.settings import parse_duration
from stormlab.engine.reading import Reading
from stormlab.responder.moves import ACTIONS
from stormlab.scenarios import report_html, scoring
from stormlab.scenarios.reader import load
from stormlab.scenarios.runner import Runner
from stormlab.scenarios.scenario import schedule

ROOT = Path(__file__).resolve().parents[2]


class VirtualClock:
    def __init__(self):
        self.t = 0.0

    def now(self):
        return self.t

    async def sleep(self, seconds):
        self.t += seconds
        await asyncio.sleep(0)


class ToyLab:
    """A storm that holds until paused, given capacity and readmitted; just enough physics to
    drive the runner (the real storm is in the integration tests and the CI scenario run)."""

    def __init__(self, clock):
        self.clock, self.cores, self.paused, self.storm_at, self.stuck_until = clock, 40, False, None, -1.0
        self.growth, self.actions, self.halted, self.resumed_at = False, [], 0, None

    @property
    def stuck(self):
        return self.clock.now() < self.stuck_until

    async def sample(self):
        t = self.clock.now()
        storm = self.storm_at is not None and t >= self.storm_at + 10
        if self.resumed_at is not None and t >= self.resumed_at + 20:
            storm = False
        error = 1.0 if self.paused else 0.55 if storm else 0.002 if self.stuck else 0.0
        return Reading.from_json(
            {
                "customer_error_ratio": error,
                "nodes_total": 1000,
                "nodes_serving": 1000,
                "nodes_disqualified": 150 if storm else 0,
                "metadata_inflight": 0 if self.paused else 180 if storm else 10,
                "metadata_processing_p99_s": 0.7 if self.growth else 0.2,
                "allowance_s": 1.0,
                "metadata_paused": self.paused,
                "table_error_ratio": {
                    "metric-groups": 1.0 if self.stuck else 0.0,
                    "orders": error,
                    "scaling-groups": 0.3 if storm else 0.0,
                },
                "renewal_attempts_total": {"first": t, "retry": 0},
                # the queues ride the storm out on their cache: they fail only while the fleet is held back
                "queue_error_ratio": 0.6 if self.paused or (self.resumed_at is not None and t < self.resumed_at + 10) else 0.0,
                # the scaling table's rows on disqualified nodes: its API fails in part in the storm, its backlog drains after
                "scaling_api_error_ratio": 1.0 if self.paused else 0.3 if storm else 0.0,
                "metric_gap_ratio": 0.3 if storm else 0.0,
                "metric_put_error_ratio": 0.5 if self.paused or (self.resumed_at is not None and t < self.resumed_at + 10) else 0.0,
                "login_p50_s": 1.5 if self.paused or (self.resumed_at is not None and t < self.resumed_at + 10) else 0.01,
                "login_p99_s": 1.5 if self.paused or storm or (self.resumed_at is not None and t < self.resumed_at + 10) else 0.01,
                "scaling_backlog": 0 if self.storm_at is None or (self.resumed_at is not None and t > self.resumed_at + 60) else 40,
            }
        )

    async def fault(self, fault, args, speed):
        if fault == "blip":
            self.storm_at = self.clock.now()
        elif fault == "gsi-growth":
            self.growth = True
        elif fault == "stuck-partition":
            self.stuck_until = self.clock.now() + parse_duration(args["duration"])
        return {"ok": True, "message": fault, "duration_s": 5.0}

    async def action(self, action, args, speed):
        ok = True
        if action == "set-capacity":
            ok = self.paused or self.storm_at is None
            self.cores = float(args["cores"]) if ok else self.cores
        elif action == "pause-metadata":
            self.paused = True
        elif action == "resume":
            self.paused, self.resumed_at = False, self.clock.now() if self.cores >= 80 else None
        elif action == "restore-partition":
            ok, self.stuck_until = self.stuck, -1.0
        self.actions.append(
            {
                "at": self.clock.now(),
                "t": self.clock.now(),
                "action": action,
                "args": args,
                "ok": ok,
                "message": action,
                "fault": ACTIONS[action].fault,
                "role": None,
            }
        )
        return {"ok": ok, "message": action}

    async def rollback(self):
        self.halted += 1
        self.stuck_until = -1.0

    def player_actions(self):
        return self.actions


def run(scenario, lab, clock, autopilot=True, seed=2015):
    runner = Runner(scenario, schedule(scenario, seed), lab, clock, autopilot=autopilot, echo=lambda line: None)
    return runner, asyncio.run(runner.run())


def flagship():
    return load((ROOT / "scenarios/dynamodb-2015.yaml").read_text())


OPENING = """\
  - {name: the blip, at: 20s, fault: blip, args: {racks: "0", duration: 5s}}
  - {name: storm onset, expect: {probe: customer_error_ratio, above: 0.3, within: 30s}}
  - name: the team
    operator:
"""  # a game's first steps: the blip, the onset expected, the team's phase (its limit and recovery follow)


def toy():
    clock = VirtualClock()
    return clock, ToyLab(clock)


def test_the_autopilot_plays_the_runbook_and_every_expectation_is_measured():
    clock, lab = toy()
    runner, journal = run(flagship(), lab, clock)
    failed = [s["name"] for s in journal["steps"] if not s["passed"]]
    assert journal["outcome"] == "passed", failed
    operator = next(s for s in journal["steps"] if s["kind"] == "operator")
    made = [a["name"] for a in operator["autopilot"] if not a.get("watched")]
    assert made == [
        "look first",
        "add capacity through the shared admin path",
        "add capacity through the shared admin path",  # tried again: the rules give it two tries
        "pause requests to the metadata service",
        "add capacity",
        "staged resume",
    ]
    capacity = operator["autopilot"][1]
    assert capacity["ok"] is False and capacity["passed"] is True  # the failure was the expectation
    watched = {a["name"]: a for a in operator["autopilot"] if a.get("watched")}
    assert set(watched) == {"retries stop", "the queues fail", "PutMetricData fails", "logins slow down"}
    assert all(w["passed"] for w in watched.values())
    assert lab.halted == 1 and journal["rollbacks"][-1]["name"] == "halt every fault"
    assert len(journal["samples"]) > 100 and all("t" in s for s in journal["samples"])


def test_score_and_comparison_come_from_the_measurements():
    clock, lab = toy()
    scenario = flagship()
    _, journal = run(scenario, lab, clock)
    score = scoring.score(scenario, journal)
    assert score["recovered"] and score["actions_taken"] == 6 and score["failed_actions"] == 2  # two tries, and Monday's restore
    assert score["time_to_detect_s"] is not None and score["time_to_detect_s"] >= 0
    assert score["time_to_mitigate_s"] > score["time_to_detect_s"]
    assert score["customer_error_minutes"] > 0
    rows = {r["what"]: r["lab"] for r in scoring.compare(scenario, journal)}
    assert rows["customer error plateau"] == "55.0%"
    assert rows["blip to storm"] == "10 s"
    assert rows["Monday: aggregate error"] == "0.2%"
    assert rows["pause to recovery"].endswith(" s")
    # the cascade's figures are windows over the event (mean and worst), not one reading
    assert rows["scaling API errors in the storm"] == "mean 30.0%, worst 30.0%"
    table = "its table's partitions on refusing nodes in the storm (scaling-groups' customers failing)"
    assert rows[table] == "mean 30.0%, worst 30.0%"  # one table's customers, over the same window
    assert rows["queue errors during the storm"] == "mean 0.0%, worst 0.0%"
    assert (
        rows["login p99 while the fleet is held back"].startswith("mean ")
        and "worst 1.5 s" in rows["login p99 while the fleet is held back"]
    )
    full = {r["what"]: r for r in scoring.compare(scenario, journal)}
    pace = scoring.run_pace(scenario, journal)  # derived: 2015's blip to recovery (291 min) over this run's
    blip, recovered = scoring.blip_and_recovery(scenario, journal)
    assert pace == pytest.approx(291 * 60 / (recovered - blip))
    drain = full["scaling backlog drain after recovery"]
    assert drain["cascade"] and drain["at_lab_pace"] == f"{222 * 60 / pace:.0f} s"  # 3 h 42 min at this run's pace
    assert not full["blip to storm"]["cascade"] and full["blip to storm"]["at_lab_pace"] == f"{18 * 60 / pace:.0f} s"
    assert full["customer error plateau"]["at_lab_pace"] is None
    timeline = {r["in_2015"]: r for r in scoring.seed_timeline(scenario, journal)}
    assert timeline["7:10 AM"]["fraction_2015"] == timeline["7:10 AM"]["fraction_lab"] == 1.0  # the span itself
    assert timeline["5:06 AM"]["fraction_2015"] == 0.57 and 0 < timeline["5:06 AM"]["fraction_lab"] < 1
    assert timeline["10:52 AM"]["fraction_2015"] == 1.76 and timeline["10:52 AM"]["fraction_lab"] > 1  # the backlog drains after
    in_cascade = {r["what"] for r in full.values() if r["cascade"]}
    assert in_cascade >= {"queue errors during the storm", "login p99 while the fleet is held back", table}


def test_without_the_autopilot_nobody_acts_and_the_time_limit_fails_the_run():
    clock, lab = toy()
    _, journal = run(flagship(), lab, clock, autopilot=False)
    operator = next(s for s in journal["steps"] if s["kind"] == "operator")
    assert not operator["passed"] and operator["recovered_after_s"] is None
    assert journal["outcome"] == "failed" and lab.halted == 1


def test_a_failed_steady_state_stops_before_any_fault():
    clock, lab = toy()
    lab.paused = True  # customers already failing
    _, journal = run(flagship(), lab, clock)
    assert journal["outcome"] == "failed" and lab.storm_at is None and lab.halted == 1
    assert all(s["kind"] == "steady" for s in journal["steps"])


def test_cancelling_the_run_still_rolls_back():
    clock, lab = toy()
    scenario = flagship()
    runner = Runner(scenario, schedule(scenario, 1), lab, clock, autopilot=True, echo=lambda line: None)

    async def interrupt():
        task = asyncio.create_task(runner.run())
        while lab.storm_at is None:
            await asyncio.sleep(0)
        task.cancel()  # what Ctrl-C does to asyncio.run's main task
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(interrupt())
    assert lab.halted == 1 and runner.rollbacks[-1]["name"] == "halt every fault"
    assert runner.journal("interrupted")["outcome"] == "interrupted"


def test_the_journal_records_the_seeded_fault_schedule():
    def faults(seed):
        clock, lab = toy()
        _, journal = run(flagship(), lab, clock, seed=seed)
        return [(s["name"], s["at_s"], s["args"]) for s in journal["schedule"] if s["kind"] == "fault"]

    assert faults(3) == faults(3)
    assert faults(3) != faults(4)


def test_the_report_takes_moves_with_empty_messages_and_any_text():
    clock, lab = toy()
    scenario = flagship()
    _, journal = run(scenario, lab, clock)
    journal["player_actions"] = [
        {"t": 1.0, "action": "note", "args": {"text": ""}, "message": "", "ok": True},
        {"t": 2.0, "action": "note", "args": {"text": "<b>"}, "message": "  \n", "ok": True},
        {"t": 3.0, "action": "note", "args": {"text": "x"}, "message": "<script>", "ok": True},
    ]
    text = report_html.page(scoring.scored(scenario, journal, period_s=10.0), [], None)
    assert text.count("(no message)") == 2 and "&lt;script&gt;" in text and "<script>" not in text


def test_a_game_day_judged_invalid_says_so_in_its_report():
    clock, lab = toy()
    scenario = flagship()
    _, journal = run(scenario, lab, clock)
    quiet = scoring.validity(journal, period_s=10.0)
    assert quiet["valid"] is True and quiet["invalid_reasons"] == []
    blip_at = next(r["at_s"] for r in scoring.records(journal) if r.get("fault") == "blip")
    journal["samples"] = [  # a rack's loop stalls 10 s after the blip
        dict(sample) | {"loop_lag_p99_s": 0.3 if blip_at + 9 <= sample["t"] <= blip_at + 11 else 0.002, "loop_lag_by": "rack-07"}
        for sample in journal["samples"]
    ]
    journal["validity"] = scoring.validity(journal, period_s=10.0)
    (reason,) = journal["validity"]["invalid_reasons"]
    assert reason.startswith("at the herd") and "rack-07" in reason and "300 ms" in reason
    text = report_html.page(scoring.scored(scenario, journal, period_s=10.0), [], None)
    assert "INVALID RUN" in text and "rack-07" in text


def test_a_blip_that_met_no_traffic_fails_its_step_and_the_run_and_the_report_says_why():
    clock, lab = toy()
    toy_fault = lab.fault

    async def leased(fault, args, speed):  # each fault says which lease it took, as the labs do
        return await toy_fault(fault, args, speed) | {"lease": {"holder": "linkproxy", "id": fault}}

    lab.fault = leased
    _, journal = run(flagship(), lab, clock)
    assert journal["outcome"] == "passed"
    did = {"blip": {"dropped_bytes": 0}, "gsi-growth": None}  # the blip cut nothing; growth is not counted
    judged = scoring.judged_effects(journal, lambda lease: None if did.get(lease["id"]) is None else {
        "effect": did[lease["id"]], "no_effect": not any(did[lease["id"]].values())})  # fmt: skip
    blip = next(r for r in scoring.records(judged) if r.get("fault") == "blip")
    assert judged["outcome"] == "failed" and blip["passed"] is False and "NO EFFECT" in blip["detail"]
    assert judged["findings"] == [f"{blip['name']} (blip) had no effect: it met no traffic to drop or hold back"]
    growth = next(r for r in scoring.records(judged) if r.get("fault") == "gsi-growth")
    assert growth["passed"] and growth["effect"] is None  # not measured: not judged
    page = report_html.findings(judged)
    assert "had no effect" in page and "<h2>Findings</h2>" in page


def test_a_blip_that_dropped_traffic_keeps_the_run_passing_and_says_what_it_dropped():
    clock, lab = toy()
    toy_fault = lab.fault

    async def leased(fault, args, speed):
        return await toy_fault(fault, args, speed) | {"lease": {"holder": "linkproxy", "id": fault}}

    lab.fault = leased
    _, journal = run(flagship(), lab, clock)
    judged = scoring.judged_effects(journal, lambda lease: {"effect": {"dropped_bytes": 4096}, "no_effect": False})
    blip = next(r for r in scoring.records(judged) if r.get("fault") == "blip")
    assert judged["outcome"] == "passed" and judged["findings"] == [] and blip["passed"]
    assert report_html.measured(blip).endswith("· dropped 4,096 bytes")


def test_the_monday_tail_holds_until_a_responder_restores_the_partition():
    """The stuck partition's lease is only a safety net (4 minutes): the table's customers fail
    until the database on-call restores it, a move of its own, scored."""
    clock, lab = toy()
    _, journal = run(flagship(), lab, clock)
    monday = next(s for s in journal["steps"] if s["name"] == "Monday")
    assert monday["passed"] and [a["name"] for a in monday["autopilot"]] == [
        "look at each table",
        "restore the partition that does not take its share",
    ]
    restore = next(a for a in lab.actions if a["action"] == "restore-partition")
    assert restore["ok"] and restore["at"] >= monday["started_s"]
    tail = next(s for s in journal["steps"] if s["name"] == "the Monday tail")
    assert restore["at"] - tail["at_s"] < 60  # long before the lease's own end
    cards = scoring.roles(journal, scoring.score(flagship(), journal)["onset_s"])
    assert cards["database"]["moves"] == 6  # capacity three times, pause, resume, and the restore: the database on-call's


def test_without_the_restore_the_monday_tail_fails_the_run():
    clock, lab = toy()
    scenario = flagship()
    lazy = {"tail": "1"}  # a tail threshold no table's errors exceed: the autopilot never restores
    steps = tuple(dataclasses.replace(s, rules=lazy) if s.name == "Monday" else s for s in scenario.steps)
    _, journal = run(dataclasses.replace(scenario, steps=steps), lab, clock)
    assert journal["outcome"] == "failed"
    assert not next(s for s in journal["steps"] if s["name"] == "Monday")["passed"]


def test_the_autopilot_moves_when_its_rules_say_so_not_at_a_step():
    """One try through the shared admin path instead of two: the pause comes one retry earlier,
    and everything it sets off (the queues failing, the recovery) moves with it."""
    times = {}
    for tries in ("2", "1"):
        clock, lab = toy()
        scenario = flagship()
        rules = {**next(s for s in scenario.steps if s.name == "recovery").rules, "capacity_tries": tries}
        steps = tuple(dataclasses.replace(s, rules=rules) if s.name == "recovery" else s for s in scenario.steps)
        _, journal = run(dataclasses.replace(scenario, steps=steps), lab, clock)
        assert journal["outcome"] == "passed"
        when = scoring.moments(journal)
        times[tries] = (when["pause requests to the metadata service"], when["the queues fail"], when["recovery"])
    assert times["1"][0] < times["2"][0] - 9  # retry_s (10 s) earlier
    assert times["1"][1] < times["2"][1] and times["1"][2] < times["2"][2]
