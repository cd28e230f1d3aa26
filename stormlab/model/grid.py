"""The sweep's grid (pure, no I/O): points, panels (the 2015 settings and each fix), the verdict of
one point in the reference model, the live sample, the agreement and the summary table.
`stormlab sweep` (stormlab/runs/sweep.py) runs it and keeps its results on disk;
stormlab/artefacts/sweep_map.py draws it."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from metadata_service.admission import membership_work_s
from stormcore.settings import LabSettings
from stormlab.engine.story import STORM_RATIO
from stormlab.model.estimate import estimate
from stormlab.model.reference import ReferenceModel

# The panels: the 2015 settings and each fix, as changes to the base settings (functions of it, so
# a scaled-down fleet keeps its proportions). AWS's four announced fixes come first.
PANELS: dict[str, Callable[[LabSettings], dict[str, Any]]] = {
    "2015": lambda s: {},
    "allowance 2s": lambda s: {"allowance_s": 2 * s.allowance_s},  # AWS: lengthen the time allowed
    "renewals every 20s": lambda s: {"renewal_period_s": 2 * s.renewal_period_s},  # AWS: fewer membership requests
    "renewals every 30s": lambda s: {"renewal_period_s": 3 * s.renewal_period_s},
    "capacity x1.5": lambda s: {"capacity_cores": 1.5 * s.capacity_cores},  # AWS: add capacity
    "4 cells (2015-sized)": lambda s: {"cells": 4, "capacity_cores": 4 * s.capacity_cores},  # AWS: many metadata instances
    "4 cells (cores shared)": lambda s: {"cells": 4},  # the same hardware, segmented
    "full jitter": lambda s: {"retry_policy": "full-jitter"},
    "immediate+budget": lambda s: {"retry_policy": "immediate+budget"},
    "immediate+adaptive": lambda s: {"retry_policy": "immediate+adaptive"},
    "immediate+breaker": lambda s: {"retry_policy": "immediate+breaker"},
    "concurrency limit": lambda s: {"admission_limit": round(2 * s.capacity_cores)},  # twice the cores in flight
    "deadline shedding": lambda s: {"admission_deadline": True},
}
AWS_FIXES = ("allowance 2s", "renewals every 30s", "capacity x1.5", "4 cells (2015-sized)")
POINT_2015: dict[str, Any] = {"panel": "2015", "blip_racks": 3, "blip_s": 5.0, "gsis": 2}
SETTLE_S = 10.0  # profile seconds of healthy fleet before the blip (the demo's)
PHASES = 8  # the 2015 point of each panel is also blipped at 7 more moments spread over a period
NEAR = 0.10  # a point within this share of a threshold of the closed-form estimate is near it
PHASE_PANELS = ("2015", "renewals every 20s")  # where the blip's moment is known to matter
# Blip-phase variants run live in each of those panels, on top of the sample's count: the live
# demo waits for the moment of the racks' renewal schedule at which the model blips (blip_phase).
PHASES_LIVE = 2
LINK_WORDS = {
    "kernel": "the kernel's links",
    "namespace": "the kernel's links in the lab's own namespace",
    "proxy": "the link proxy",
}  # the live labs' link mechanisms, as the summary says them
LEVEL_POINTS = 0.05  # live and model agree on the level within 5 points of error, or both collapsed
COLLAPSED = 0.9


@dataclass(frozen=True)
class Point:
    panel: str
    blip_racks: int  # racks 0 .. blip_racks-1 lose their link
    blip_s: float
    gsis: int  # GSIs per indexed table (big_gsis; 0 = pre-GSI sizes)
    phase: int = 0  # the blip comes phase/PHASES of a renewal period later than the demo's

    @property
    def key(self) -> str:
        return f"{self.panel}|{self.blip_racks}|{self.blip_s:g}|{self.gsis}" + (f"|p{self.phase}" if self.phase else "")

    def settings(self, base: LabSettings) -> LabSettings:
        return base.replace(big_gsis=self.gsis, gsi_growth=self.gsis > 0, **PANELS[self.panel](base))

    def down_before(self, base: LabSettings) -> bool:
        """No margin at all: the biggest membership takes longer than the allowance to answer
        even with a whole core, so those nodes never renew, blip or not (not a metastable
        failure: the lab is down before any trigger)."""
        s = self.settings(base)
        biggest = s.big_base_entries * (1 + (s.big_gsis if s.gsi_growth else 0))
        return membership_work_s(s, biggest) >= s.allowance_s

    def is_2015(self) -> bool:
        return asdict(self) == POINT_2015 | {"phase": 0}

    def at_2015(self) -> bool:
        """The 2015 trigger and growth, in any panel and phase."""
        return (self.blip_racks, self.blip_s, self.gsis) == (POINT_2015["blip_racks"], POINT_2015["blip_s"], POINT_2015["gsis"])


@dataclass(frozen=True)
class Verdict:
    key: str
    stuck: bool
    end_error: float  # the customers' error over the last renewal period
    peak_error: float
    recovered_after_s: float | None  # blip end -> first reading under 1% (profile seconds)
    valid: bool = True  # live only: the host did not shape the run
    seconds: float = 0.0  # what the point cost to run (wall clock; set by whoever ran it)
    seed: int | None = None  # live only: the lab's seed
    commit: str = ""  # the code it ran (sweep.commit: git's short hash, "+changes:…" when the code had some)


@dataclass(frozen=True)
class Grid:
    panels: tuple[str, ...]
    blip_racks: tuple[int, ...]
    blip_s: tuple[float, ...]
    gsis: tuple[int, ...]

    def points(self) -> list[Point]:
        """The grid, then the 2015 point of each panel at the other phases of the blip."""
        grid = [Point(*p) for p in itertools.product(self.panels, self.blip_racks, self.blip_s, self.gsis)]
        racks, blip_s, gsis = POINT_2015["blip_racks"], POINT_2015["blip_s"], POINT_2015["gsis"]
        phases = [Point(panel, racks, blip_s, gsis, phase) for panel in self.panels for phase in range(1, PHASES)]
        return grid + phases


def blip_at(s: LabSettings, phase: int) -> float:
    """When the model blips (profile seconds from the start of the renewal schedules): after the
    memberships and the baseline, ``phase`` eighths of a period on."""
    return 1.5 * s.renewal_period_s + SETTLE_S + phase * s.renewal_period_s / PHASES


def blip_phase(s: LabSettings, phase: int) -> float:
    """That moment as a fraction of a renewal period past a slot: where the live demo blips."""
    return blip_at(s, phase) % s.renewal_period_s / s.renewal_period_s


@dataclass
class Story:
    """One point's story in the model: its verdict, the model as it ended, and what the sweep's
    verdict does not need: renewal attempts sent by each second from the blip on, and the
    metadata service's busy core-seconds when the blip began."""

    verdict: Verdict
    model: ReferenceModel
    sent: list[int]
    busy_at_blip: float


def story(base: LabSettings, point: Point, watch_periods: float, admin_after_periods: float | None = None) -> Story:
    """The demo's story in virtual time (profile seconds); with ``admin_after_periods``, an admin
    request (the same cores, through the shared path) that long after the blip's end."""
    s = point.settings(base).profile_time()
    model = ReferenceModel(s)
    at = blip_at(s, point.phase)
    model.run_until(at)
    busy_at_blip = sum(c.cpu.busy_core_seconds for c in model.cells)
    model.blip(set(range(point.blip_racks)), at, point.blip_s)
    blip_end, end = at + point.blip_s, at + point.blip_s + watch_periods * s.renewal_period_s
    admin_at = None if admin_after_periods is None else blip_end + admin_after_periods * s.renewal_period_s
    readings, t, sent = [], at, [model.sent]
    while t < end:
        t = min(end, t + 1.0)
        if admin_at is not None and t >= admin_at:
            model.run_until(admin_at)
            model.set_capacity(model.cpu.cores)  # nothing changes but the admin path's queue
            admin_at = None
        model.run_until(t)
        sent.append(model.sent)
        readings.append((t, model.error_ratio()))
    last = [r for ts, r in readings if ts > end - s.renewal_period_s]
    end_error = sum(last) / len(last)
    verdict = Verdict(
        point.key,
        end_error >= STORM_RATIO,
        end_error,
        max(r for _, r in readings),
        next((ts - blip_end for ts, r in readings if ts >= blip_end and r < 0.01), None),
    )
    return Story(verdict, model, sent, busy_at_blip)


def judge_model(base: LabSettings, point: Point, watch_periods: float) -> Verdict:
    """One point in the reference model: the demo's story in virtual time (profile seconds)."""
    return story(base, point, watch_periods).verdict


def near_threshold(base: LabSettings, point: Point) -> bool:
    """Whether the point's herd is within ``NEAR`` of the closed-form estimate's threshold (the
    herd at which the smalls miss), where the lab's own timing decides and a sample must look."""
    if point.down_before(base):
        return False
    s = point.settings(base).profile_time()
    found = estimate(s, point.blip_racks, point.blip_s)
    return found is not None and found.herd > 0 and abs(found.herd / found.herd_limit - 1) <= NEAR


def live_sample(base: LabSettings, points: Sequence[Point], count: int, seed: int, phases: int = PHASES_LIVE) -> list[Point]:
    """``count`` points to run live, chosen without the model's verdicts (so the model is not
    graded on points it picked), in this order: the 2015 point; points near a threshold
    (``near_threshold``), one drawn from each panel and blip duration that has any (seeded);
    then points drawn uniformly from the rest of the grid (seeded); and on top of those,
    ``phases`` blip-phase variants of the 2015 point in each of ``PHASE_PANELS`` (seeded
    apart, so adding them leaves the rest of the sample as it was). Points down before any blip
    are left out (their lab never has every node serving, so there is no story to run)."""
    rng = random.Random(seed)
    grid = [p for p in points if not p.phase and not p.down_before(base)]
    chosen = [p for p in grid if p.is_2015()]
    groups: dict[tuple[str, float], list[Point]] = {}
    for p in grid:
        if near_threshold(base, p) and p not in chosen:
            groups.setdefault((p.panel, p.blip_s), []).append(p)
    chosen += [rng.choice(near) for _, near in sorted(groups.items())]
    rest = [p for p in grid if p not in chosen]
    chosen += rng.sample(rest, max(0, min(len(rest), count - len(chosen))))
    chosen = chosen[:count]
    phase_rng = random.Random(f"{seed}/phases")
    for panel in PHASE_PANELS:
        moments = [p for p in points if p.phase and p.panel == panel and p.at_2015()]
        chosen += phase_rng.sample(moments, min(phases, len(moments))) if count else []
    return chosen


def same_level(a: float, b: float) -> bool:
    """Two error ratios at the same level: within ``LEVEL_POINTS``, or both collapsed (90% or more)."""
    return min(a, b) >= COLLAPSED or abs(a - b) <= LEVEL_POINTS


def level_agrees(model: Verdict, live: Verdict) -> bool:
    return same_level(model.end_error, live.end_error)


def agreement(sample: Sequence[Point], model: dict[str, Verdict], live: dict[str, Verdict]) -> dict[str, Any]:
    """How many valid live points the model judged the same way (stuck or not) and at the same
    level, and which it did not."""
    valid = [p for p in sample if p.key in live and live[p.key].valid]
    same = [p for p in valid if model[p.key].stuck == live[p.key].stuck]
    level = [p for p in valid if level_agrees(model[p.key], live[p.key])]
    return {
        "points": len(valid),
        "agree": len(same),
        "ratio": len(same) / len(valid) if valid else None,
        "level_agree": len(level),
        "level_ratio": len(level) / len(valid) if valid else None,
        "invalid": [p.key for p in sample if p.key in live and not live[p.key].valid],
        "disagree": [p.key for p in valid if p not in same],
        "level_disagree": [_apart(p, model, live) for p in valid if p not in level],
    }


def pooled_agreement(certificates: Sequence[dict[str, Any]], link: str | None) -> dict[str, Any]:
    """Every policy's live agreement (each ``agreement``'s) pooled, as a certificate says it at its
    top: the live points judged, how many agree, and which did not or ran INVALID."""
    each = [(c["policy"], c["live"]["agreement"]) for c in certificates if "live" in c]
    points, agree = sum(a["points"] for _, a in each), sum(a["agree"] for _, a in each)
    return {
        "link": link if each else None,
        "points": points,
        "agree": agree,
        "ratio": agree / points if points else None,
        "disagree": [f"{policy} {key}" for policy, a in each for key in a["disagree"]],
        "invalid": [f"{policy} {key}" for policy, a in each for key in a["invalid"]],
    }


def _apart(p: Point, model: dict[str, Verdict], live: dict[str, Verdict]) -> str:
    return f"{p.key} (model {model[p.key].end_error:.0%}, live {live[p.key].end_error:.0%})"


def estimate_check(base: LabSettings, points: Sequence[Point], model: dict[str, Verdict]) -> dict[str, Any]:
    """The closed-form estimate beside the model on every grid point it applies to: how often they
    agree on the verdict and on the level, and where they do not (the second check)."""
    judged, same, level, apart = 0, 0, 0, []
    for p in points:
        if p.phase or p.down_before(base) or p.key not in model:
            continue
        found = estimate(p.settings(base).profile_time(), p.blip_racks, p.blip_s)
        if found is None:
            continue
        m = model[p.key]
        judged += 1
        same += (found.level >= STORM_RATIO) == m.stuck
        if same_level(found.level, m.end_error):
            level += 1
        else:
            apart.append(f"{p.key} (estimate {found.outcome} {found.level:.0%}, model {m.end_error:.0%})")
    return {"points": judged, "agree": same, "level_agree": level, "apart": apart}


def summarize(
    grid: Grid, base: LabSettings, model: dict[str, Verdict], agreed: dict[str, Any] | None, checked: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Per panel: the 2015 point's verdict and error, in how many of the blip's moments it is
    stuck, and the share of the grid stuck."""
    panels = {}
    for panel in grid.panels:
        mine = [p for p in grid.points() if p.panel == panel and not p.phase and not p.down_before(base)]
        down = [p for p in grid.points() if p.panel == panel and not p.phase and p.down_before(base)]
        at_2015 = model.get(Point(panel, *(POINT_2015[k] for k in ("blip_racks", "blip_s", "gsis"))).key)
        moments = [model[p.key].stuck for p in grid.points() if p.panel == panel and p.at_2015() and p.key in model]
        panels[panel] = {
            "stuck_points": sum(model[p.key].stuck for p in mine if p.key in model),
            "points": len(mine),
            "down_before": len(down),
            "point_2015_moments_stuck": sum(moments),
            "point_2015_moments": len(moments),
            "point_2015": None if at_2015 is None else ("stuck" if at_2015.stuck else "recovered"),
            "point_2015_end_error": None if at_2015 is None else at_2015.end_error,
            "point_2015_recovered_after_s": None if at_2015 is None else at_2015.recovered_after_s,
        }
    fleet = f"{base.racks} racks x {base.nodes_per_rack} nodes"
    return {"fleet": fleet, "grid": asdict(grid), "panels": panels, "agreement": agreed, "estimate": checked}


def markdown(summary: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    rows = [
        "| panel | the 2015 point (3 racks, 5 s, 2 GSIs) | its error at the end | stuck, blipped at 8 moments of a period "
        "| stuck points of the grid | down before any blip |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, p in summary["panels"].items():
        verdict = p["point_2015"] or "not in the grid"
        if p["point_2015"] == "recovered" and p["point_2015_recovered_after_s"] is not None:
            verdict += f" (under 1% {p['point_2015_recovered_after_s']:.0f} s after the blip)"
        moments = f"{p['point_2015_moments_stuck']}/{p['point_2015_moments']}"
        figures = f"{moments} | {p['stuck_points']}/{p['points']} | {p['down_before']}"
        rows.append(f"| {name} | {verdict} | {pct(p['point_2015_end_error'])} | {figures} |")
    by_link = summary.get("agreement_by_link") or ({None: summary["agreement"]} if summary["agreement"] else {})
    for link, a in by_link.items():
        through = f" through {LINK_WORDS.get(link, link)}" if link else ""
        rows.append("")
        rows.append(
            f"Live{through} and model agree on the verdict at {a['agree']} of {a['points']} sampled points ({pct(a['ratio'])})"
            + (f" (not at {', '.join(a['disagree'])})" if a["disagree"] else "")
            + f", and on the level (within {LEVEL_POINTS:.0%} of error, or both collapsed) at {a['level_agree']} ({pct(a['level_ratio'])})"
            + (f" (not at {', '.join(a['level_disagree'])})" if a["level_disagree"] else "")
            + (f"; {len(a['invalid'])} live runs invalid (the host shaped them), left out" if a["invalid"] else "")
            + "."
        )
    e = summary.get("estimate")
    if e and e["points"]:
        rows.append("")
        rows.append(
            f"The closed-form estimate and the model agree on the verdict at {e['agree']} of {e['points']} grid points "
            f"({pct(e['agree'] / e['points'])}) and on the level at {e['level_agree']} ({pct(e['level_agree'] / e['points'])})."
        )
    return "\n".join(rows)
