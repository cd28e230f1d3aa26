"""The mechanism in virtual time: the lab's pure cores, 1,000 nodes, no sockets.

Nothing in the model decides that a storm happens: these outcomes come out of the
schedule, the cost model, the allowance and the retry policy alone.
"""
import pytest

from services.common.settings import LabSettings
from services.reference_model import ReferenceModel, replay


def test_healthy_fleet_stays_healthy_for_fifteen_minutes():
    model = ReferenceModel(LabSettings())
    model.run_until(30.0)
    worst = 0.0
    for t in range(31, 900, 5):
        model.run_until(float(t))
        worst = max(worst, model.error_ratio())
    assert worst < 0.01


def test_2015_blip_sets_off_a_storm_that_holds_on_a_plateau():
    r = replay(LabSettings(), watch_s=180)
    assert r["baseline"] < 0.01
    assert 0.45 <= r["plateau"] <= 0.65


def test_the_storm_spreads_beyond_the_blipped_racks():
    model = ReferenceModel(LabSettings())
    model.run_until(30.0)
    model.blip({0, 1, 2}, 30.0, 5.0)
    model.run_until(120.0)
    outside = [n for n in model.nodes.values() if n.rack >= 3 and not n.refusal.serving]
    assert len(outside) > 50


@pytest.mark.parametrize("changes", [
    {"gsi_growth": False},          # memberships at their pre-GSI size
    {"allowance_s": 2.0},           # AWS's "lengthen the time allowed"
    {"retry_policy": "full-jitter"},
])
def test_counterfactuals_heal(changes):
    r = replay(LabSettings(**changes), watch_s=120)
    assert r["plateau"] < 0.01
    assert r["post_blip"] < 0.2


def test_abandoned_work_that_keeps_running_collapses_the_service():
    r = replay(LabSettings(abandoned_work="continue"), watch_s=90)
    assert r["plateau"] >= 0.9
