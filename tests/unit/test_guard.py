"""The fidelity guard's judgement (pure): a live point out of its branch's band, or apart from the
model, is a finding with both figures; and the model's half of every incident's points lands where
it must (the live half is the storm tier's: tests/integration/test_fidelity_guard.py). The points
are read from the incidents' declarations (stormcore/incidents/)."""

import dataclasses

import pytest

from stormcore import incidents
from stormcore.settings import LabSettings, profile
from stormlab.incidents.aws_2025_10 import guard as guard_2025
from stormlab.incidents.aws_2025_10 import moves
from stormlab.model.grid import Verdict, judge_model
from stormlab.runs import guard
from stormlab.runs.live import QUICK

BASE = LabSettings(**QUICK)
FIRST = incidents.FIRST.guard  # the 2015 points
LEASES = next(i for i in incidents.REGISTERED if i.roles == ("leases",))  # the lease manager's incident
LEASE_BASE = profile(LEASES.name)


def verdict(level: float) -> Verdict:
    return Verdict("k", level >= 0.2, level, level, None if level >= 0.2 else 3.0)


@pytest.mark.parametrize("pinned", FIRST, ids=lambda p: p.key)
def test_the_model_lands_every_point_of_the_matrix_on_its_branch(pinned):
    model = judge_model(BASE, guard.point_of(pinned), guard.WATCH_PERIODS)
    assert guard.check(pinned, model, model) == [], model


def test_a_point_that_moves_is_a_finding_with_both_figures():
    plateau = next(p for p in FIRST if p.value("racks") == 4 and p.value("panel") == "2015")
    model = judge_model(BASE, guard.point_of(plateau), guard.WATCH_PERIODS)
    moved = verdict(1.0)  # the 4-rack point collapsing, as it did live on 07cb15b
    found = guard.check(plateau, moved, model)
    assert any("the live lab left the plateau (the branch that moved) branch: live 100.0%, model 5" in f for f in found), found
    assert any("disagree" in f for f in found)


def test_a_deliberately_changed_setting_fails_the_guard():
    """A lab someone changed (the allowance doubled in its racks), judged against the unchanged
    model at the 4-rack point: the storm is gone live, and the guard says so."""
    pinned = next(p for p in FIRST if p.key == "2015|4|5|2")
    changed = judge_model(BASE.replace(allowance_s=2.0), guard.point_of(pinned), guard.WATCH_PERIODS)
    model = judge_model(BASE, guard.point_of(pinned), guard.WATCH_PERIODS)
    found = guard.check(pinned, changed, model)
    assert len(found) == 2 and all("live 0.0%, model 5" in f for f in found), found


def test_both_collapsed_is_agreement_whatever_the_last_points():
    collapse = next(p for p in FIRST if p.branch == "collapse")
    assert guard.check(collapse, verdict(0.91), verdict(1.0)) == []
    assert guard.check(collapse, verdict(0.55), verdict(1.0)) != []


@pytest.mark.parametrize("pinned", LEASES.guard, ids=lambda p: p.key)
def test_the_lease_model_lands_every_2025_point_on_its_branch(pinned):
    model = guard_2025.model_of(LEASE_BASE, pinned)
    assert guard_2025.check(pinned, model, model) == [], model


@pytest.mark.parametrize(
    "moved",
    [
        {"lease_timeout_s": 60.0},  # the threshold moved up past the profile's fleet: the collapse is gone
        {"lease_establish_cost_s": 0.05},  # a lease half as dear: the same
    ],
    ids=["timeout", "cost"],
)
def test_a_deliberately_moved_2025_threshold_fails_the_guard(moved):
    """A lease manager someone changed, run where the guard's live half runs (here its model stands
    in for the live lab), judged against the unchanged model: the collapse of the profile's outage
    is gone, and the guard says so with both figures; the points that recover still hold."""
    changed = LEASE_BASE.replace(**moved)
    said = {}
    for pinned in LEASES.guard:
        said[pinned.key] = guard_2025.check(pinned, guard_2025.model_of(changed, pinned), guard_2025.model_of(LEASE_BASE, pinned))
    collapse = next(p for p in LEASES.guard if p.band[0] >= 0.9)
    assert any("the live lab left the collapse" in f and "model 100.0%" in f for f in said[collapse.key]), said
    assert any("disagree" in f for f in said[collapse.key]), said


def test_a_2025_plan_that_recovers_too_late_is_a_finding():
    plan = next(p for p in LEASES.guard if p.value("judged") == "after the moves")
    model = guard_2025.model_of(LEASE_BASE, plan)
    assert model.recovered_after_s is not None and not model.stuck, model
    late = dataclasses.replace(model, recovered_after_s=model.recovered_after_s + 300)
    found = guard_2025.check(plan, late, model)
    assert found and "every lease back" in found[0], found
    assert guard_2025.check(plan, dataclasses.replace(model, recovered_after_s=model.recovered_after_s + 20), model) == []


def test_a_2025_plan_point_is_on_the_plans_own_timeline():
    """A plan's lab empties the record for moves.py's outage: a point that said another would be judged on the wrong run."""
    plans = [p for p in LEASES.guard if p.value("plan")]
    assert plans and all(p.value("outage_s") == moves.OUTAGE_S and p.value("plan") in moves.PLANS for p in plans)
    assert {p.value("judged") for p in plans} == {"before the moves", "after the moves"}


def test_every_incident_declares_points_for_the_guard():
    assert all(i.guard for i in incidents.REGISTERED)
