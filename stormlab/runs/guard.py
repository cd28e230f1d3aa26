"""The fidelity guard: the lab's answers pinned, not only its 2015 point.

Each incident declares its guard points (stormcore/incidents/): for 2015, a small matrix of live
points spanning every branch of the map (no storm, the plateau, the collapse, and AWS's longer
allowance), each run live and beside it in the reference model with
the same settings and seed. A point whose live level leaves its branch's band, or whose live
verdict and level part from the model's, is a finding, printed with both figures. CI runs it on
every landing (`tests/integration/test_fidelity_guard.py`): a change to the hot paths (the
renewal client, the link, the metadata service's door) is a change to the physics, and this is
how it is noticed. It once would have caught the 4-rack point moving from the collapse to the
plateau at 1,000 nodes while every other test stayed green (docs/profile.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from stormcore.incidents import GuardPoint
from stormcore.settings import LabSettings
from stormlab.model.grid import Point, Verdict, judge_model

LEVEL_APART = 0.10  # live and model levels further apart than this (unless both collapsed) disagree
COLLAPSED = 0.90  # both at or above this: both collapsed, their levels need not meet
WATCH_PERIODS = 6.0  # renewal periods watched after the blip: the plateau forms in 2, a blip that heals is gone in 1


def point_of(pinned: GuardPoint) -> Point:
    """A 2015 guard point of the declaration as the sweep's map has it."""
    return Point(pinned.value("panel"), pinned.value("racks"), pinned.value("blip_s"), pinned.value("gsis"))


def check(pinned: GuardPoint, live: Verdict, model: Verdict) -> list[str]:
    """What is wrong with one point (nothing: it holds): live out of its band, the model out of
    its band, or the two apart; each finding says both figures. Every incident's guard judges so."""
    lo, hi = pinned.band
    figures = f"live {100 * live.end_error:.1f}%, model {100 * model.end_error:.1f}% (band {100 * lo:.0f}-{100 * hi:.0f}%)"
    found = []
    if not lo <= live.end_error <= hi:
        found.append(f"{pinned.key}: the live lab left the {pinned.branch} branch: {figures}")
    if not lo <= model.end_error <= hi:
        found.append(f"{pinned.key}: the model left the {pinned.branch} branch: {figures}")
    both_collapsed = min(live.end_error, model.end_error) >= COLLAPSED
    if live.stuck != model.stuck or (abs(live.end_error - model.end_error) > LEVEL_APART and not both_collapsed):
        found.append(f"{pinned.key}: the live lab and the model disagree: {figures}")
    return found


def line(incident: str, pinned: GuardPoint, live: Verdict, model: Verdict, found: list[str]) -> str:
    """One guard line, the same for every incident: CI's output shows them side by side."""
    validity = "" if live.valid else " (INVALID: the host shaped it)"
    levels = f"live {100 * live.end_error:5.1f}%{validity}  model {100 * model.end_error:5.1f}%"
    return f"guard {incident}: {pinned.key:<22} {pinned.branch:<34} {levels}  {'ok' if not found else 'MOVED'}"


Judge = Callable[[LabSettings, Point, float, float], Verdict]


def run(
    incident: str, points: Sequence[GuardPoint], base: LabSettings, speed: float, judge_live: Judge, say: Callable[[str], None] = print
) -> list[str]:
    """Every 2015 point live (one lab after another) and in the model: the findings."""
    found = []
    for pinned in points:
        point = point_of(pinned)
        model = judge_model(base, point, WATCH_PERIODS)
        live = judge_live(base, point, WATCH_PERIODS, speed)
        if not live.valid:  # the host shaped it: once more, then judged as it is
            live = judge_live(base, point, WATCH_PERIODS, speed)
        said = check(pinned, live, model)
        say(line(incident, pinned, live, model, said))
        found += said
    return found
