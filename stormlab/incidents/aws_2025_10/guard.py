"""The October 2025 collapse's answers pinned: the guard's points of its declaration, each live on
a lab of its own and beside it in the reference model on the same timeline.

A point is an outage of the endpoint's record on a fleet (the record back before a lease lapses:
no collapse; a fleet below the model's threshold: it recovers by itself), or the profile's
outage and a plan of the operators' moves (moves.py's timeline), judged before the moves (the
minute before the first: a collapse that holds) or after them (throttle, then restarts: it
recovers, and within ``RECOVERY_APART`` of the model's time); the points of one plan share one lab.
A point that leaves its band, or parts from the model, is a finding with both figures
(``stormlab.runs.guard.check``).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

from stormcore.incidents import GuardPoint
from stormcore.settings import LabSettings
from stormlab.incidents.aws_2025_10 import certificate as lc
from stormlab.incidents.aws_2025_10 import certify, moves
from stormlab.model.grid import Verdict
from stormlab.runs import guard

SPEED = 4.0  # the live points' speed: the ways out's and the certificate's (valid on two cores)
RECOVERY_APART = (60.0, 0.5)  # live and model recovery times apart by more than 60 s and half the model's disagree


def point_of(pinned: GuardPoint) -> lc.LeasePoint:
    return lc.LeasePoint(int(pinned.value("droplets")), float(pinned.value("outage_s")))


def model_of(base: LabSettings, pinned: GuardPoint) -> Verdict:
    """The point in the reference model: the outage alone, or the outage and the plan's moves."""
    plan = pinned.value("plan")
    if plan is None:
        return lc.judge(base, point_of(pinned), float(pinned.value("watch_s"))).verdict
    settings = base.replace(lease_droplets=int(pinned.value("droplets")))
    return _verdict(pinned, moves.in_model(settings, moves.PLANS[plan], float(pinned.value("after_s"))))


def live_of(base: LabSettings, pinned: GuardPoint, speed: float, labs: dict[tuple, dict[str, Any]] | None = None) -> Verdict:
    """The point on real processes at ``speed``: a lab of its own, the record emptied, the moves made.
    Points of one plan share a lab (``labs`` keeps its figures for the next)."""
    plan = pinned.value("plan")
    if plan is None:
        return certify.judge_live(base, point_of(pinned), float(pinned.value("watch_s")), speed)
    settings = base.replace(lease_droplets=int(pinned.value("droplets"))).sped_up(speed)
    which = (pinned.value("droplets"), pinned.value("outage_s"), plan, pinned.value("after_s"), speed)
    labs = {} if labs is None else labs
    if which not in labs or not labs[which]["valid"]:
        labs[which] = moves.live(settings, moves.PLANS[plan], 0, io.StringIO(), float(pinned.value("after_s")))
    return _verdict(pinned, labs[which])


def _verdict(pinned: GuardPoint, figures: dict[str, Any]) -> Verdict:
    """A plan's figures as a verdict, judged before the moves (the launch errors over the minute
    before the first: the collapse held) or after them (over the last minute, and when every lease
    was back, counted from the first move)."""
    before = pinned.value("judged") == "before the moves"
    level = figures["launch_errors_before_moves" if before else "launch_errors_last_minute"]
    level = 1.0 if level is None else level
    back = None if before else figures["recovered_s_after_first_move"]
    return Verdict(pinned.key, level >= lc.STUCK, level, level, back, valid=figures.get("valid", True))


def check(pinned: GuardPoint, live: Verdict, model: Verdict) -> list[str]:
    """The 2015 guard's check, and for a plan, the recovery's time beside the model's."""
    found = guard.check(pinned, live, model)
    if pinned.value("plan") is not None and live.recovered_after_s is not None and model.recovered_after_s is not None:
        apart = abs(live.recovered_after_s - model.recovered_after_s)
        if apart > max(RECOVERY_APART[0], RECOVERY_APART[1] * model.recovered_after_s):
            found.append(
                f"{pinned.key}: every lease back {live.recovered_after_s:g}s after the first move live, "
                f"{model.recovered_after_s:g}s in the model"
            )
    return found


Live = Callable[[LabSettings, GuardPoint, float, dict[tuple, dict[str, Any]]], Verdict]


def run(
    incident: str,
    points: Sequence[GuardPoint],
    base: LabSettings,
    speed: float = SPEED,
    judge_live: Live = live_of,
    say: Callable[[str], None] = print,
) -> list[str]:
    """Every point live (one lab after another) and in the model: the findings."""
    found: list[str] = []
    labs: dict[tuple, dict[str, Any]] = {}  # a plan's lab, shared by its points
    for pinned in points:
        model = model_of(base, pinned)
        live = judge_live(base, pinned, speed, labs)
        if not live.valid:  # the host shaped it: once more, then judged as it is
            live = judge_live(base, pinned, speed, labs)
        said = check(pinned, live, model)
        recovered = "" if live.recovered_after_s is None else f"  back {live.recovered_after_s:g}s (model {model.recovered_after_s}s)"
        say(guard.line(incident, pinned, live, model, said) + recovered)
        found += said
    return found
