"""The what-if replay's pure parts, and a recorded game played again in virtual time: unchanged it
draws the same curve; with the pause shifted by 30 s its outcome differs and it says why."""

import asyncio
import math

import pytest

from stormcore.errors import UsageError
from stormlab.scenarios import replay, scoring
from stormlab.scenarios.reader import load
from stormlab.scenarios.replay import Move, Script
from stormlab.scenarios.replay_cli import read
from stormlab.scenarios.runner import Runner
from stormlab.scenarios.scenario import schedule
from tests.unit.test_gameday_engine import OPENING, toy

SCENARIO = (
    "title: a recorded game\nsteps:\n"
    + OPENING
    + """      time_limit: 2m
      recovered: {probe: customer_error_ratio, below: 0.01, for: 5s}
scoring: {onset: storm onset}
"""
)
RUNBOOK = [
    Move(40.0, "pause-metadata", {"duration": "2m"}, "database"),
    Move(42.0, "set-capacity", {"cores": 80}, "database"),
    Move(44.0, "resume", {"staged": 5, "every": "5s"}, "database"),
]


def play(moves: list[Move]) -> dict:
    """The scenario on the toy lab, the moves made at their times (as a replay makes them), scored."""
    clock, lab = toy()
    scenario = load(SCENARIO)

    async def make(move: Move) -> dict:
        return await lab.action(move.action, move.args, 1.0)

    script = Script(moves, make)
    runner = Runner(scenario, schedule(scenario, 2015), lab, clock, autopilot=False, echo=lambda line: None, script=script)
    journal = asyncio.run(runner.run())
    return scoring.scored(scenario, journal, 1.0)


def test_the_moves_of_a_game_are_its_leases_and_repairs_in_order():
    journal = {
        "player_actions": [
            {"t": 12.0, "action": "resume", "fault": "resume-metadata", "args": {}, "ok": True, "role": "database"},
            {"t": 3.0, "action": "ack", "args": {"alert": "RetryStorm"}, "ok": True, "role": "database"},
            {"t": 5.0, "action": "pause-metadata", "fault": "pause-metadata", "args": {"duration": "2m"}, "ok": True, "role": "database"},
            {"t": 6.0, "action": "post-status", "args": {"severity": "major-outage", "text": "x"}, "ok": True, "role": "database"},
            {"t": 7.0, "action": "set-capacity", "fault": "capacity", "args": {"cores": 80}, "ok": False, "role": "database"},
        ]
    }
    assert [(m.t, m.action) for m in replay.recorded_moves(journal)] == [(5.0, "pause-metadata"), (7.0, "set-capacity"), (12.0, "resume")]


def test_a_move_is_shifted_or_dropped_by_its_action_and_a_bad_edit_is_refused():
    assert replay.parse_shift("pause-metadata=+30s") == ("pause-metadata", 30.0)
    assert replay.parse_shift("resume=-1m") == ("resume", -60.0)
    assert replay.parse_shift("resume=10") == ("resume", 10.0)
    for bad in ("pause-metadata", "=30s", "pause-metadata=soon"):
        with pytest.raises(UsageError, match="--shift takes MOVE"):
            replay.parse_shift(bad)
    shifted = replay.edit(RUNBOOK, {"pause-metadata": 30.0}, set())
    assert [(m.t, m.action) for m in shifted] == [(42.0, "set-capacity"), (44.0, "resume"), (70.0, "pause-metadata")]
    assert [m.action for m in replay.edit(RUNBOOK, {}, {"set-capacity"})] == ["pause-metadata", "resume"]
    with pytest.raises(UsageError, match="no reboot in this game; its moves: pause-metadata, resume, set-capacity"):
        replay.edit(RUNBOOK, {"reboot": 5.0}, set())
    with pytest.raises(UsageError, match="before the game began"):
        replay.edit(RUNBOOK, {"pause-metadata": -60.0}, set())
    with pytest.raises(UsageError, match="shift it or drop it"):
        replay.edit(RUNBOOK, {"resume": 5.0}, {"resume"})


def test_how_far_apart_two_curves_are_in_points():
    a = [(0.0, 0.0), (1.0, 0.5), (2.0, 0.5), (3.0, 0.0)]
    assert replay.apart(a, a) == {"points": 4, "mean_pp": 0.0, "p90_pp": 0.0, "worst_pp": 0.0}
    b = [(0.0, 0.0), (1.1, 0.52), (2.1, 0.48), (3.1, 0.1), (9.0, 1.0)]  # read a tick later, a little noise
    far = replay.apart(a, b)
    assert far["points"] == 4 and far["mean_pp"] == pytest.approx((0 + 2 + 2 + 10) / 4) and far["worst_pp"] == pytest.approx(10.0)
    assert math.isnan(replay.apart(a, [])["mean_pp"])


def test_a_replay_unchanged_draws_the_same_curve_and_with_the_pause_30_s_later_its_outcome_differs_and_says_why():
    game = play(RUNBOOK)
    assert game["score"]["recovered"]
    again = play(replay.recorded_moves(game))
    same = replay.explain(game, again, [])
    assert same["curves_apart"]["mean_pp"] == 0.0 and same["curves_apart"]["points"] > 50  # virtual time: the same, reading for reading
    assert not same["outcome_differs"] and same["why"][0].startswith("no change")
    later = play(replay.edit(replay.recorded_moves(game), {"pause-metadata": 30.0}, set()))
    verdict = replay.explain(game, later, ["pause-metadata +30 s"])
    assert verdict["outcome_differs"] and not later["score"]["recovered"]  # the pause came after the resume: held back to the end
    assert verdict["why"] == [
        "the change: pause-metadata +30 s",
        "the moves came in another order: set-capacity at 42 s, resume at 44 s, pause-metadata at 70 s "
        "(in the game: pause-metadata at 40 s, set-capacity at 42 s, resume at 44 s)",
        "moves that failed in the replay: set-capacity",  # capacity through the shared path in the storm, as in 2015
        "the game recovered and the replay did not",
        f"customer error-minutes {game['score']['customer_error_minutes']:.2f} in the game, "
        f"{later['score']['customer_error_minutes']:.2f} in the replay "
        f"({later['score']['customer_error_minutes'] - game['score']['customer_error_minutes']:+.2f})",
    ]
    assert verdict["game"].startswith("recovered") and verdict["replay"].startswith("did not recover")


def test_a_journal_a_replay_cannot_play_is_refused_with_why(tmp_path):
    path = tmp_path / "journal.json"
    for text, says in (
        ("{not json", "not JSON"),
        ('{"samples": []}', "journal.json of a scenario run"),
        ('{"samples": [], "player_actions": [], "seed": 1, "speed": 1, "score": {}}', "does not hold its scenario"),
    ):
        path.write_text(text)
        with pytest.raises(UsageError, match=says):
            read(path)
    with pytest.raises(UsageError, match="No such file"):
        read(tmp_path / "nowhere.json")
