"""The facilitator's hold: the game's clock stands still while the lab runs on (virtual time)."""

import asyncio

from stormlab.scenarios import debrief, report, scoring
from stormlab.scenarios.cli import RealClock
from stormlab.scenarios.holds import Holds
from stormlab.scenarios.reader import load
from stormlab.scenarios.runner import Runner
from stormlab.scenarios.scenario import schedule
from tests.unit.test_gameday_engine import toy

SCENARIO = """\
title: held
steps:
  - {name: the blip, at: 20s, fault: blip, args: {racks: "0", duration: 5s}}
  - {name: storm onset, expect: {probe: customer_error_ratio, above: 0.3, within: 30s}}
  - {name: the storm runs, wait: 30s}
injects:
  - {name: exec-asks, at: 45s, to: database, message: "The customer impact, please.", within: 5m}
"""


def test_the_game_clock_leaves_out_the_time_held():
    holds = Holds()
    assert holds.begin(10.0) and not holds.begin(12.0)  # held already: nothing changes
    assert holds.on and holds.game(40.0) == 10.0  # inside a hold: the moment it began
    assert holds.end(70.0) and not holds.end(71.0)
    assert holds.game(5.0) == 5.0 and holds.game(70.0) == 10.0 and holds.game(100.0) == 40.0
    holds.begin(100.0)
    assert holds.game(130.0) == 40.0 and holds.record(130.0) == [
        {"at_s": 10.0, "held_s": 60.0, "on": False},
        {"at_s": 40.0, "held_s": 30.0, "on": True},
    ]


def test_a_hold_delays_the_steps_the_injects_and_the_samples_by_its_length_and_puts_moves_at_its_start(tmp_path):
    clock, lab = toy()
    scenario = load(SCENARIO)
    runner = Runner(scenario, schedule(scenario, 2015), lab, clock, autopilot=False, echo=lambda line: None)
    said = []

    async def facilitator():
        while clock.now() < 10:
            await asyncio.sleep(0)
        said.extend([runner.hold(True), runner.hold(True)])
        while clock.now() < 40:
            await asyncio.sleep(0)
        await lab.action("ack", {"alert": "RetryStorm"}, 1.0)  # a player's ack in the hold
        while clock.now() < 70:
            await asyncio.sleep(0)
        said.append(runner.hold(False))

    async def game():
        early = runner.hold(True)  # before the timeline: nothing to hold
        assert early == {"changed": False, "held": False, "t": 0.0, "started": False}
        _, journal = await asyncio.gather(facilitator(), runner.run())
        return journal

    journal = asyncio.run(game())
    assert [(s["changed"], s["held"]) for s in said] == [(True, True), (False, True), (True, False)]
    assert said[0]["t"] == said[2]["t"] == 10.0  # the game's clock stood still through the hold
    assert journal["holds"] == [{"at_s": 10.0, "held_s": 60.0, "on": False}]
    blip = next(s for s in journal["steps"] if s["name"] == "the blip")
    assert blip["at_s"] == 20.0 and lab.storm_at == 80.0  # at 20 s of the game: 60 s late on the wall clock
    [inject] = journal["injects"]
    assert inject["fired_s"] == 45.0
    ts = [s["t"] for s in journal["samples"]]
    assert ts == sorted(ts) and len(ts) == len(set(ts))
    assert all(t <= 10.0 or t >= 11.0 for t in ts)  # no reading inside the hold: the score waited too
    [ack] = journal["player_actions"]
    assert ack["t"] == 10.0  # made 30 s into the hold: at the moment it began
    assert journal["outcome"] == "passed"
    scored = scoring.scored(scenario, journal, period_s=10.0)
    page = report.write(scored, tmp_path)
    assert page.exists() and (tmp_path / "roles.png").exists()
    said = debrief.text(scored, None, "", page, tmp_path / "journal.json")
    assert "held by the facilitator at 10 s of the game for 60 s" in said


def test_a_game_interrupted_while_held_writes_its_journal_after_the_loop_has_closed():
    scenario = load(SCENARIO)
    runner = Runner(scenario, schedule(scenario, 2015), toy()[1], RealClock(), autopilot=False, echo=lambda line: None)

    async def held_then_interrupted():
        runner.t0, runner.started = runner.clock.now(), True
        runner.hold(True)

    asyncio.run(held_then_interrupted())
    journal = runner.journal("interrupted")  # as the CLI writes it after Ctrl-C or SIGTERM: no loop running
    [held] = journal["holds"]
    assert held["on"] and held["held_s"] >= 0 and held["at_s"] == 0.0
