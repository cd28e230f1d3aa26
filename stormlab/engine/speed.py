"""Time dilation: run the whole profile in slow motion so that a small host looks fast enough.

Network emulators run large systems on small hosts by slowing the system's clock: at speed 0.25
every duration and cost of the profile is four times longer and every rate four times lower, so
the host does a quarter of the work per second while the storm keeps its shape (the settings
scale together, ``LabSettings.sped_up``). The validity budgets are fractions of the allowance, so
they grow with it.

``--speed auto`` picks the fastest speed at which a run stays valid, in three steps:

1. a first guess from the fleet's size and the host's cores (:func:`first_guess`);
2. before the blip, the baseline's readings (the busiest process's CPU, the lab's CPU against
   the host's cores, the longest wait for a core, the worst lag) against what the herd will ask
   (:func:`afford`): if the herd would break a budget, the lab is restarted slower;
3. after the run, the validity check: an INVALID run is run again at the next slower speed.

So the speed a run reports is one it was judged valid at, or the run says INVALID. The
decisions here take the readings as arguments (the first guess asks the host for its cores
unless told); the runs themselves are the demo's (``up`` and ``scenario run`` take the first
guess only; their ``status`` and report then say whether it held).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from stormcore.settings import SPEEDS, SettingsError
from stormlab.engine.story import CPU_SATURATED, CPU_WAIT_BUDGET, HERD_LAG_BUDGET, LAB_CPU_BUDGET

AUTO = "auto"
LADDER = (1.0, 0.5, 0.25, 0.125, 0.0625)  # the speeds auto tries, fastest first
# A first guess, from the runs on a 2-core machine (docs/scale.md): since the plain renewal client
# and the metadata service's front door (2026-12-02), 5,000 nodes valid at speed 1 (with two busy
# loops beside them), 10,000 at the edge (valid in 1 run of 4).
NODES_PER_CORE = 2500
HERD_CPU_FACTOR = 2.0  # the lab's CPU at the herd over its baseline (measured: 1.8 at 7,000 nodes)
HEADROOM = 0.8  # of each budget: what the prediction aims under


def parse_speed(text: str) -> float | None:
    """``--speed``: a number in the settings' range, or ``auto`` (None)."""
    if str(text).strip().lower() == AUTO:
        return None
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"--speed takes a number or auto, got {text!r}") from None
    if not SPEEDS[0] <= value <= SPEEDS[1] or math.isnan(value):
        raise SettingsError(f"--speed must be between {SPEEDS[0]:g} and {SPEEDS[1]:g} (or auto), got {text}")
    return value


def rung_at_most(speed: float) -> float:
    """The fastest speed of the ladder not faster than ``speed`` (the slowest if none is)."""
    return next((s for s in LADDER if s <= speed * 1.0001), LADDER[-1])


def next_slower(speed: float) -> float | None:
    """The ladder's next speed below ``speed``, or None past its end."""
    return next((s for s in LADDER if s < speed * 0.9999), None)


def first_guess(nodes: int, cores: int | None = None) -> float:
    """The speed a fleet of ``nodes`` should manage on ``cores`` (default: this host's)."""
    cores = cores or os.cpu_count() or 1
    return rung_at_most(min(1.0, cores * NODES_PER_CORE / max(1, nodes)))


@dataclass(frozen=True)
class Baseline:
    """What the healthy lab took from the host before the blip (the worst 10 s of each)."""

    cpu_ratio: float | None  # the busiest process's share of one core
    lab_cpu_cores: float | None  # the lab's processes together, in cores
    host_cores: int | None
    cpu_wait_s: float | None  # the longest mean wait for a core each time a process ran
    loop_lag_s: float  # worst 10 s p99, wall-clock seconds
    allowance_s: float  # this run's allowance, wall-clock seconds


def afford(speed: float, baseline: Baseline) -> tuple[float, str]:
    """The speed the herd can be run at, from the baseline at ``speed`` (``speed`` itself if the
    prediction fits), and why. The herd asks about ``HERD_CPU_FACTOR`` times the baseline's CPU,
    and its waits and lag grow with it; each budget is aimed ``HEADROOM`` under. CPU scales with
    the speed, and the waits' and lag's budgets (fractions of the allowance) with its inverse, so
    a prediction ``k`` times over its budget asks for a speed ``k`` times lower."""
    herd = HERD_CPU_FACTOR
    checks = [
        ((baseline.cpu_ratio or 0.0) * herd, CPU_SATURATED, "the busiest process would need {:.0%} of a core at the herd"),
        (
            (baseline.lab_cpu_cores or 0.0) * herd / (baseline.host_cores or 1e9),
            LAB_CPU_BUDGET,
            "the lab would need {:.0%} of the host's cores at the herd",
        ),
        (
            (baseline.cpu_wait_s or 0.0) * herd / baseline.allowance_s,
            CPU_WAIT_BUDGET,
            "a process would wait {:.1%} of the allowance for a core at the herd",
        ),
        (baseline.loop_lag_s * herd / baseline.allowance_s, HERD_LAG_BUDGET, "the lag would reach {:.0%} of the allowance at the herd"),
    ]
    factor, why = 1.0, "the baseline leaves room for the herd"
    for predicted, budget, words in checks:
        if predicted > 0 and HEADROOM * budget / predicted < factor:
            factor, why = HEADROOM * budget / predicted, words.format(predicted)
    return (speed, why) if factor >= 1.0 else (rung_at_most(speed * factor), why)
