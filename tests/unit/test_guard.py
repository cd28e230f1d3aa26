"""The fidelity guard's judgement (pure): a live point out of its branch's band, or apart from the
model, is a finding with both figures; and the model's half of the matrix lands where it must (the
live half is the storm tier's: tests/integration/test_fidelity_guard.py)."""

import pytest

from stormcore.settings import LabSettings
from stormlab.model.grid import Verdict, judge_model
from stormlab.runs import guard
from stormlab.runs.live import QUICK

BASE = LabSettings(**QUICK)


def verdict(level: float) -> Verdict:
    return Verdict("k", level >= 0.2, level, level, None if level >= 0.2 else 3.0)


@pytest.mark.parametrize("pinned", guard.matrix(), ids=lambda p: p.point.key)
def test_the_model_lands_every_point_of_the_matrix_on_its_branch(pinned):
    model = judge_model(BASE, pinned.point, guard.WATCH_PERIODS)
    assert guard.check(pinned, model, model) == [], model


def test_a_point_that_moves_is_a_finding_with_both_figures():
    plateau = next(p for p in guard.matrix() if p.point.blip_racks == 4 and p.point.panel == "2015")
    model = judge_model(BASE, plateau.point, guard.WATCH_PERIODS)
    moved = verdict(1.0)  # the 4-rack point collapsing, as it did live on 07cb15b
    found = guard.check(plateau, moved, model)
    assert any("the live lab left the plateau (the branch that moved) branch: live 100.0%, model 5" in f for f in found), found
    assert any("disagree" in f for f in found)


def test_a_deliberately_changed_setting_fails_the_guard():
    """A lab someone changed (the allowance doubled in its racks), judged against the unchanged
    model at the 4-rack point: the storm is gone live, and the guard says so."""
    pinned = next(p for p in guard.matrix() if p.point.key == "2015|4|5|2")
    changed = judge_model(BASE.replace(allowance_s=2.0), pinned.point, guard.WATCH_PERIODS)
    model = judge_model(BASE, pinned.point, guard.WATCH_PERIODS)
    found = guard.check(pinned, changed, model)
    assert len(found) == 2 and all("live 0.0%, model 5" in f for f in found), found


def test_both_collapsed_is_agreement_whatever_the_last_points():
    collapse = next(p for p in guard.matrix() if p.branch == "collapse")
    assert guard.check(collapse, verdict(0.91), verdict(1.0)) == []
    assert guard.check(collapse, verdict(0.55), verdict(1.0)) != []
