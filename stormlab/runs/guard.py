"""The fidelity guard: the lab's answers pinned, not only its 2015 point.

A small matrix of live points spanning every branch of the map (no storm, the plateau, the
collapse, and AWS's longer allowance), each run live and beside it in the reference model with
the same settings and seed. A point whose live level leaves its branch's band, or whose live
verdict and level part from the model's, is a finding, printed with both figures. CI runs it on
every landing (`tests/integration/test_fidelity_guard.py`): a change to the hot paths (the
renewal client, the link, the metadata service's door) is a change to the physics, and this is
how it is noticed. It once would have caught the 4-rack point moving from the collapse to the
plateau at 1,000 nodes while every other test stayed green (docs/profile.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stormcore.settings import LabSettings
from stormlab.model.grid import Point, Verdict, judge_model

NO_STORM, PLATEAU, COLLAPSE = (0.0, 0.02), (0.40, 0.70), (0.90, 1.0)  # a branch's band of the customers' error at the end
LEVEL_APART = 0.10  # live and model levels further apart than this (unless both collapsed) disagree
WATCH_PERIODS = 6.0  # renewal periods watched after the blip: the plateau forms in 2, a blip that heals is gone in 1


@dataclass(frozen=True)
class Pinned:
    """A point of the map and the branch it must land on, live and in the model."""

    point: Point
    branch: str
    band: tuple[float, float]


def matrix() -> tuple[Pinned, ...]:
    """The guard's points, at the 400-node fleet (10 racks of 40, 16 cores): the thresholds the
    model and the lab agree on there. The 2015 point itself (3 racks, the plateau) is pinned live
    beside the model by the storm test, which CI runs too."""
    return (
        Pinned(Point("2015", 1, 5.0, 2), "no storm", NO_STORM),
        Pinned(Point("2015", 4, 5.0, 2), "plateau (the branch that moved)", PLATEAU),
        Pinned(Point("2015", 6, 5.0, 2), "collapse", COLLAPSE),
        Pinned(Point("allowance 2s", 3, 5.0, 2), "no storm (AWS's longer allowance)", NO_STORM),
    )


def check(pinned: Pinned, live: Verdict, model: Verdict) -> list[str]:
    """What is wrong with one point (nothing: it holds): live out of its band, the model out of
    its band, or the two apart; each finding says both figures."""
    lo, hi = pinned.band
    figures = f"live {100 * live.end_error:.1f}%, model {100 * model.end_error:.1f}% (band {100 * lo:.0f}-{100 * hi:.0f}%)"
    found = []
    if not lo <= live.end_error <= hi:
        found.append(f"{pinned.point.key}: the live lab left the {pinned.branch} branch: {figures}")
    if not lo <= model.end_error <= hi:
        found.append(f"{pinned.point.key}: the model left the {pinned.branch} branch: {figures}")
    both_collapsed = min(live.end_error, model.end_error) >= COLLAPSE[0]
    if live.stuck != model.stuck or (abs(live.end_error - model.end_error) > LEVEL_APART and not both_collapsed):
        found.append(f"{pinned.point.key}: the live lab and the model disagree: {figures}")
    return found


Judge = Callable[[LabSettings, Point, float, float], Verdict]


def run(base: LabSettings, speed: float, judge_live: Judge, say: Callable[[str], None] = print) -> list[str]:
    """Every point of the matrix live (one lab after another) and in the model: the findings."""
    found = []
    for pinned in matrix():
        model = judge_model(base, pinned.point, WATCH_PERIODS)
        live = judge_live(base, pinned.point, WATCH_PERIODS, speed)
        if not live.valid:  # the host shaped it: once more, then judged as it is
            live = judge_live(base, pinned.point, WATCH_PERIODS, speed)
        said = check(pinned, live, model)
        validity = "" if live.valid else " (INVALID: the host shaped it)"
        levels = f"live {100 * live.end_error:5.1f}%{validity}  model {100 * model.end_error:5.1f}%"
        say(f"guard: {pinned.point.key:<22} {pinned.branch:<34} {levels}  {'ok' if not said else 'MOVED'}")
        found += said
    return found
