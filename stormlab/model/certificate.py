"""A retry policy's certificate (pure, no I/O): the trigger suite, what the model reads at each
point, the verdict, the summary line and the exit code. `stormlab certify`
(stormlab/runs/certify.py) runs it, with a live sample, and writes it out.

Each policy meets the same storms as 2015's fleet: the suite's triggers (racks blipped × how
long, at 2015's two GSIs), the membership growth at the 2015 trigger, and the 2015 trigger at
eight moments of the renewal period. The policy **holds** when it recovers at the 2015 trigger
(at every moment) and at every smaller trigger (no more racks, no longer); it is **stuck**
otherwise. Either way the largest trigger it survives is the largest of the suite from which it
recovers along with every smaller one.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from stormcore.settings import LabSettings
from stormlab.model.grid import PHASES, POINT_2015, Point, Verdict, story

TRIGGER_RACKS = (1, 2, 3, 4, 6)
TRIGGER_BLIPS = (1.0, 2.0, 5.0, 10.0)
GROWTH = (0, 1, 2, 3, 4)  # GSIs per indexed table at the 2015 trigger (2015: 2)
REFERENCES = {"immediate": "2015's immediate retries", "full-jitter": "full jitter"}
ADMIN_PROBE_PERIODS = 3.0  # the admin request goes this many renewal periods after the blip: in the storm, if there is one
WATCH_PERIODS = 12.0  # renewal periods after the blip when a point is judged (the sweep's)


def suite() -> list[Point]:
    """Every point a certificate judges: the triggers, the growth, the moments."""
    gsis, racks, blip = POINT_2015["gsis"], POINT_2015["blip_racks"], POINT_2015["blip_s"]
    points = [Point("2015", r, b, gsis) for r in TRIGGER_RACKS for b in TRIGGER_BLIPS]
    points += [Point("2015", racks, blip, g) for g in GROWTH if g != gsis]
    points += [Point("2015", racks, blip, gsis, phase) for phase in range(1, PHASES)]
    return points


def is_trigger(p: Point) -> bool:
    return p.gsis == POINT_2015["gsis"] and not p.phase


def split_words(moments: dict[str, int] | None) -> str:
    """Where the model goes both ways at the 2015 trigger, how often it sticks: a verdict on the edge."""
    if not moments or moments["stuck"] in (0, moments["of"]):
        return ""
    return f" (stuck at {moments['stuck']} of its {moments['of']} moments: on the edge)"


def smaller_or_2015(p: Point) -> bool:
    """The points a policy must recover from to hold: the 2015 trigger (any moment) and every smaller one."""
    return p.gsis == POINT_2015["gsis"] and p.blip_racks <= POINT_2015["blip_racks"] and p.blip_s <= POINT_2015["blip_s"]


@dataclass(frozen=True)
class Reading:
    """One point of one policy in the model: the sweep's verdict and the certificate's figures."""

    verdict: Verdict
    amplification: float  # the busiest renewal period after the blip: attempts per node (1 when nobody retries)
    wasted: float  # of the metadata service's core-seconds after the blip, the share spent on answers nobody waited for
    admin_ok: bool  # an admin request sent in the storm's third period completed within its timeout


def judge(base: LabSettings, point: Point, watch_periods: float = WATCH_PERIODS) -> Reading:
    """The sweep's story of the point, with an admin request in the storm, and the policy's figures."""
    told = story(base, point, watch_periods, ADMIN_PROBE_PERIODS)
    model, sent, s = told.model, told.sent, told.model.s
    model.run_until(model.now + 5.0)  # the admin request's timeout (2 s) has passed
    busy = sum(c.cpu.busy_core_seconds for c in model.cells) - told.busy_at_blip
    span = max(1, round(s.renewal_period_s))  # readings are a second apart
    busiest = max(sent[i + span] - sent[i] for i in range(max(1, len(sent) - span)))
    return Reading(told.verdict, busiest / s.nodes_total, model.wasted_s / busy if busy > 0 else 0.0, model.admin["done"] > 0)


# -- the certificate ---------------------------------------------------------------------------


def size(p: Point) -> tuple[float, int]:
    return (p.blip_racks * p.blip_s, p.blip_racks)


def largest_survived(points: Sequence[Point], readings: dict[str, Reading]) -> Point | None:
    """The largest trigger it recovers from along with every smaller trigger of the suite."""
    triggers = [p for p in points if is_trigger(p) and p.key in readings]
    ok = [
        p
        for p in triggers
        if all(not readings[q.key].verdict.stuck for q in triggers if q.blip_racks <= p.blip_racks and q.blip_s <= p.blip_s)
    ]
    return max(ok, key=size, default=None)


def judged(
    label: str, spec: str, must: Sequence[Any], readings: dict[str, Any], best: Any, trigger: Callable[[Any], dict[str, Any]]
) -> dict[str, Any]:
    """What every incident's certificate of a policy begins with: its verdict (stuck at any point it
    must survive: holds otherwise), those points, and the largest trigger it survived (``trigger``
    says it in the suite's terms)."""
    stuck_at = [p.key for p in must if readings[p.key].verdict.stuck]
    return {
        "policy": label,
        "spec": spec,
        "verdict": "stuck" if stuck_at else "holds",
        "stuck_at": stuck_at,
        "largest_trigger_survived": None if best is None else trigger(best),
    }


def drawn(first: Sequence[Any], rest: Sequence[Any], count: int, seed: int, policy: str) -> list[Any]:
    """A live sample: ``first`` (the account's trigger), then points drawn from ``rest`` with the seed
    and the policy's name (each policy its own draw, so a certificate of several covers more of the
    map), chosen without the model's verdicts."""
    return (list(first) + random.Random(f"{seed}/{policy}").sample(list(rest), min(len(rest), max(0, count - 1))))[:count]


def certificate(label: str, spec: str, period_s: float, points: Sequence[Point], readings: dict[str, Reading]) -> dict[str, Any]:
    """One policy's certificate from its model readings."""
    at_2015 = readings[Point("2015", POINT_2015["blip_racks"], POINT_2015["blip_s"], POINT_2015["gsis"]).key]
    moments = [readings[p.key].verdict.stuck for p in points if p.at_2015()]  # the 2015 trigger at each moment
    best = largest_survived(points, readings)
    recovered = [r.verdict.recovered_after_s for r in readings.values() if r.verdict.recovered_after_s is not None]
    worst = max(readings.values(), key=lambda r: (r.verdict.end_error, r.amplification))
    return judged(label, spec, [p for p in points if smaller_or_2015(p)], readings, best, _trigger) | {
        "at_2015": {
            "verdict": "stuck" if at_2015.verdict.stuck else "recovered",
            "end_error": at_2015.verdict.end_error,
            "recovered_after_periods": _periods(at_2015.verdict.recovered_after_s, period_s),
            "amplification": at_2015.amplification,
            "goodput_floor": 1.0 - at_2015.verdict.peak_error,
            "wasted_work": at_2015.wasted,
            "admin_path": at_2015.admin_ok,
            "moments": {"stuck": sum(moments), "of": len(moments)},  # the 2015 trigger at each moment of the period
        },
        "worst_point": worst.verdict.key,
        "amplification_at_worst": worst.amplification,
        "goodput_floor": min(1.0 - r.verdict.peak_error for r in readings.values()),
        "recovered_after_periods_longest": _periods(max(recovered), period_s) if recovered else None,
        "wasted_work_at_worst": worst.wasted,
        "admin_path_in_every_storm": all(r.admin_ok for r in readings.values() if r.verdict.stuck),
        "points": {
            k: {**asdict(r.verdict), "amplification": r.amplification, "wasted": r.wasted, "admin_ok": r.admin_ok}
            for k, r in readings.items()
        },
        "stuck_points": sum(r.verdict.stuck for r in readings.values()),
    }


def _trigger(p: Point) -> dict[str, Any]:
    return {"racks": p.blip_racks, "blip_s": p.blip_s}


def _periods(seconds: float | None, period_s: float) -> float | None:
    return None if seconds is None else round(seconds / period_s, 2)


def trigger_words(t: dict[str, Any] | None) -> str:
    return "none of the suite" if t is None else f"{t['racks']} rack{'s' if t['racks'] > 1 else ''} x {t['blip_s']:g} s"


def summary_line(cert: dict[str, Any]) -> str:
    a = cert["at_2015"]
    held = "recovered" if a["verdict"] == "recovered" else "STUCK"
    after = (
        f" {a['recovered_after_periods']:g} periods after it" if a["recovered_after_periods"] is not None else f" at {a['end_error']:.0%}"
    )
    return (
        f"{cert['policy']}: {cert['verdict'].upper()} at the 2015 trigger and below; 2015: {held}{after}{split_words(a.get('moments'))}; "
        f"largest trigger survived: {trigger_words(cert['largest_trigger_survived'])}; "
        f"amplification {a['amplification']:.1f}x, goodput floor {a['goodput_floor']:.0%}, wasted work {a['wasted_work']:.0%}, "
        f"admin path {'works' if a['admin_path'] else 'times out'} in the 2015 storm"
    )


def exit_code(certs: Sequence[dict[str, Any]]) -> int:
    """0: every policy certified holds at the 2015 trigger and every smaller one; 1: one is stuck."""
    return 1 if any(c["verdict"] == "stuck" for c in certs) else 0


def live_sample(points: Sequence[Point], count: int, seed: int, policy: str) -> list[Point]:
    """Which points of a policy run live: the 2015 trigger, then triggers drawn from the rest with
    the seed and the policy's name (each policy its own draw, so a certificate of several covers
    more of the map), chosen without the model's verdicts."""
    return drawn([p for p in points if p.is_2015()], [p for p in points if is_trigger(p) and not p.is_2015()], count, seed, policy)
