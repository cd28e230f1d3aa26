"""The numbers of a demo run, computed from its samples (pure, so it can be tested).

A sample is one reading a second: cumulative customer requests and failures, nodes
disqualified, metadata in flight, renewal and processing p99, and what the host gave the
lab's processes over the last 10 s (the worst event-loop lag, the busiest process's CPU, the
longest wait for a core, the host's steal). Times are seconds on the demo's clock.

The validity check: a run is the model's only while the host keeps up. It is INVALID, with
each reason said, when any of these breaks its budget:

- the event-loop lag p99 of a process over the whole run (5% of the allowance: 50 ms in the
  2015 profile);
- the worst 10 s of lag in the herd, the 3 renewal periods after the blip starts, where the
  storm is decided (10% of the allowance): a one-second stall there is 1% of the run's samples
  and would pass the whole-run p99, but it decides which renewals miss;
- the worst 10 s of lag anywhere after the baseline starts (20% of the allowance: the biggest
  renewals leave about 40% of it free, and a stall of half that moves the storm);
- a process using 90% or more of a core over 10 s (saturated: its queue, not the model, sets
  its answers' times);
- the lab's processes together using 90% or more of the host's cores (the host is out of CPU
  for the lab; a busy host is fine while the lab gets what it asks for);
- a process waiting for a core, each time it was run, 2% of the allowance or more on average
  (20 ms in the 2015 profile: other work, or the lab itself, oversubscribes the cores);
- the hypervisor stealing 5% or more of the host's CPU.

The budgets are fractions of the allowance, so a run slowed down (``--speed`` below 1: every
duration longer) gets a proportionally larger budget: that is what time dilation buys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stormlab.engine.reading import Reading

STORM_RATIO = 0.2  # a lab losing a fifth of its customer requests is in a storm
RECOVERED_RATIO = 0.01
LAG_BUDGET = 0.05  # of the allowance, the whole run's p99: above it the host, not the model, shapes the run
HERD_LAG_BUDGET = 0.10  # of the allowance, the worst 10 s in the herd
WINDOW_LAG_BUDGET = 0.20  # of the allowance, the worst 10 s anywhere
HERD_PERIODS = 3.0  # the herd: this many renewal periods from the blip's start
CPU_SATURATED = 0.90  # of one core, a process's 10 s mean
LAB_CPU_BUDGET = 0.90  # of the host's cores, the lab's processes together
CPU_WAIT_BUDGET = 0.02  # of the allowance, a process's mean wait for a core each time it ran
STEAL_BUDGET = 0.05  # of the host's CPU time


@dataclass(frozen=True)
class Sample:
    t: float
    requests: int
    failures: int
    disqualified: int
    inflight: int
    renewal_p99_s: float | None
    processing_p99_s: float | None
    loop_lag_p99_s: float
    # The host over the last 10 s: who had the worst lag, the busiest process and its share of a
    # core, the process that waited longest for a core each time it ran (seconds), the lab's
    # processes' CPU together (cores) against the host's cores, the host's busy and stolen share.
    lag_by: str = ""
    cpu_ratio: float | None = None
    cpu_by: str = ""
    cpu_wait_s: float | None = None
    wait_by: str = ""
    lab_cpu_cores: float | None = None
    host_cores: int | None = None
    host_cpu_ratio: float | None = None
    host_steal_ratio: float | None = None


def host_fields(reading: Reading) -> dict[str, Any]:
    """A reading's host figures (a snapshot, or a game day's sample) as :class:`Sample` fields."""
    return {
        "lag_by": reading.loop_lag_by,
        "cpu_ratio": reading.cpu_ratio,
        "cpu_by": reading.cpu_by,
        "cpu_wait_s": reading.cpu_wait_s,
        "wait_by": reading.wait_by,
        "lab_cpu_cores": reading.lab_cpu_cores,
        "host_cores": reading.host_cores,
        "host_cpu_ratio": reading.host_cpu_ratio,
        "host_steal_ratio": reading.host_steal_ratio,
    }


def invalid_reasons(
    samples: Sequence[Sample],
    settle_start: float,
    blip_start: float | None,
    allowance_s: float,
    period_s: float,
    run_lag_p99_s: float | None = None,
) -> list[str]:
    """Why a run is not the model's (empty: valid). ``blip_start`` None: no herd to judge (a
    game day without a blip); ``run_lag_p99_s``: the worst process's lag p99 over the run."""
    after = [s for s in samples if s.t >= settle_start]
    reasons = []

    def ms(x: float) -> str:
        return f"{1000 * x:.0f} ms"

    def at(s: Sample) -> str:
        return f"t={s.t - blip_start:+.0f}s from the blip" if blip_start is not None else f"t={s.t:.0f}s"

    if run_lag_p99_s is not None and run_lag_p99_s >= LAG_BUDGET * allowance_s:
        reasons.append(f"event-loop lag p99 over the run {ms(run_lag_p99_s)}, over {ms(LAG_BUDGET * allowance_s)} (5% of the allowance)")
    herd = [s for s in after if blip_start is not None and blip_start <= s.t <= blip_start + HERD_PERIODS * period_s]
    worst_herd = max(herd, key=lambda s: s.loop_lag_p99_s, default=None)
    if worst_herd is not None and worst_herd.loop_lag_p99_s >= HERD_LAG_BUDGET * allowance_s:
        reasons.append(
            f"at the herd ({at(worst_herd)}) {worst_herd.lag_by or 'a process'}'s event loop ran {ms(worst_herd.loop_lag_p99_s)} "
            f"late (p99 over 10 s), over {ms(HERD_LAG_BUDGET * allowance_s)} (10% of the allowance)"
        )
    worst = max(after, key=lambda s: s.loop_lag_p99_s, default=None)
    if worst is not None and worst is not worst_herd and worst.loop_lag_p99_s >= WINDOW_LAG_BUDGET * allowance_s:
        reasons.append(
            f"at {at(worst)} {worst.lag_by or 'a process'}'s event loop ran {ms(worst.loop_lag_p99_s)} late (p99 over 10 s), "
            f"over {ms(WINDOW_LAG_BUDGET * allowance_s)} (20% of the allowance)"
        )
    busiest = max(after, key=lambda s: s.cpu_ratio or 0.0, default=None)
    if busiest is not None and (busiest.cpu_ratio or 0.0) >= CPU_SATURATED:
        reasons.append(f"{busiest.cpu_by or 'a process'} used {busiest.cpu_ratio:.0%} of a core at {at(busiest)}: a saturated process")
    lab = max(after, key=lambda s: (s.lab_cpu_cores or 0.0) / (s.host_cores or 1e9), default=None)
    if lab is not None and lab.host_cores and (lab.lab_cpu_cores or 0.0) >= LAB_CPU_BUDGET * lab.host_cores:
        reasons.append(
            f"the lab's processes used {lab.lab_cpu_cores:.2f} of the host's {lab.host_cores} cores at {at(lab)}: "
            "the host is out of CPU for the lab"
        )
    waiting = max(after, key=lambda s: s.cpu_wait_s or 0.0, default=None)
    if waiting is not None and (waiting.cpu_wait_s or 0.0) >= CPU_WAIT_BUDGET * allowance_s:
        reasons.append(
            f"{waiting.wait_by or 'a process'} waited {ms(waiting.cpu_wait_s or 0.0)} for a core each time it ran at {at(waiting)}, "
            f"over {ms(CPU_WAIT_BUDGET * allowance_s)} (2% of the allowance): the cores are oversubscribed"
        )
    stolen = max(after, key=lambda s: s.host_steal_ratio or 0.0, default=None)
    if stolen is not None and (stolen.host_steal_ratio or 0.0) >= STEAL_BUDGET:
        reasons.append(f"the hypervisor stole {stolen.host_steal_ratio:.0%} of the host's CPU at {at(stolen)}")
    return reasons


def host_figures(samples: Sequence[Sample], settle_start: float) -> dict[str, float | None]:
    """The worst of each host reading after ``settle_start``: what a summary prints beside its verdict."""
    after = [s for s in samples if s.t >= settle_start]

    def worst(values: list[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return max(present) if present else None

    return {
        "loop_lag_worst_10s_p99_s": worst([s.loop_lag_p99_s for s in after]) or 0.0,
        "cpu_busiest_ratio": worst([s.cpu_ratio for s in after]),
        "cpu_wait_worst_s": worst([s.cpu_wait_s for s in after]),
        "lab_cpu_worst_cores": worst([s.lab_cpu_cores for s in after]),
        "host_cpu_worst_ratio": worst([s.host_cpu_ratio for s in after]),
        "host_steal_worst_ratio": worst([s.host_steal_ratio for s in after]),
    }


def ratio_between(samples: Sequence[Sample], start: float, end: float) -> float | None:
    """Customer error ratio of the requests that finished between ``start`` and ``end``."""
    inside = [s for s in samples if start <= s.t <= end]
    if len(inside) < 2:
        return None
    requests = inside[-1].requests - inside[0].requests
    return (inside[-1].failures - inside[0].failures) / requests if requests > 0 else None


def rolling(samples: Sequence[Sample], span_s: float) -> list[tuple[float, float]]:
    """(t, error ratio over the ``span_s`` before t) for every sample with enough history."""
    out = []
    j = 0
    for s in samples:
        while j + 1 < len(samples) and samples[j + 1].t <= s.t - span_s:
            j += 1
        first = samples[j]
        if s.t - first.t >= span_s * 0.8 and s.requests > first.requests:
            out.append((s.t, (s.failures - first.failures) / (s.requests - first.requests)))
    return out


def summarize(
    samples: Sequence[Sample],
    settle_start: float,
    blip_start: float,
    blip_end: float,
    allowance_s: float,
    period_s: float = 10.0,
    run_lag_p99_s: float | None = None,
) -> dict[str, Any]:
    """The demo's figures. Windows are in renewal periods (6 periods = 60 s in the 2015 profile),
    so a sped-up or slowed-down profile is judged the same way. "The storm holds" is judged on the
    last period of the run. ``run_lag_p99_s``: the worst process's event-loop lag p99 over the
    whole run (each process's own samples); without it, the worst 10 s window stands in."""
    end, p = samples[-1].t, period_s
    after = [(t, r) for t, r in rolling(samples, p / 2) if t >= blip_start]
    plateau = ratio_between(samples, max(blip_end, end - 6 * p), end)
    onset = None
    if plateau is not None and plateau >= STORM_RATIO:
        onset = next((t - blip_start for t, r in after if r >= 0.9 * plateau), None)
    recovery = next((t - blip_end for t, r in after if t >= blip_end and r < RECOVERED_RATIO), None)
    holds_at = ratio_between(samples, max(blip_end, end - p), end)
    host = host_figures(samples, settle_start)
    lag = host["loop_lag_worst_10s_p99_s"] if run_lag_p99_s is None else run_lag_p99_s
    reasons = invalid_reasons(samples, settle_start, blip_start, allowance_s, p, lag)
    return {
        "baseline_error_ratio": ratio_between(samples, settle_start, blip_start),
        "peak_error_ratio": max((r for _, r in after), default=None),
        "plateau_error_ratio": plateau,
        "post_blip_error_ratio": ratio_between(samples, blip_end, min(end, blip_end + 18 * p)),
        "onset_s": onset,
        "storm_holds": holds_at is not None and holds_at >= STORM_RATIO,
        "last_period_error_ratio": holds_at,
        "recovery_s": recovery,
        "disqualified_peak": max((s.disqualified for s in samples if s.t >= blip_start), default=0),
        "disqualified_at_end": samples[-1].disqualified,
        "loop_lag_p99_s": lag,
        **host,
        "valid": not reasons,
        "invalid_reasons": reasons,
    }


def cell_figures(
    readings: Sequence[tuple[float, Mapping[str, float | None]]], blipped: set[int], since: float, period_s: float
) -> dict[str, Any]:
    """With cells: each cell's plateau (its customers' error over the last 6 periods, from
    loadgen's 10 s windows) and the blast radius, the worst 10 s window of any cell the blip did
    not touch among the windows read from ``since`` on (the first window that holds only
    requests sent after the blip began: an earlier one may still hold the lab's start-up).
    ``readings``: (profile time, cell -> error ratio)."""
    end = readings[-1][0] if readings else 0.0
    plateau: dict[str, float | None] = {}
    for cell in sorted({c for _, by_cell in readings for c in by_cell}, key=int):
        last = [r[cell] for t, r in readings if t >= end - 6 * period_s and r.get(cell) is not None]
        plateau[cell] = sum(last) / len(last) if last else None  # type: ignore[arg-type]
    outside = [r for t, by_cell in readings if t >= since for c, r in by_cell.items() if int(c) not in blipped and r is not None]
    return {"blipped_cells": sorted(blipped), "cell_plateau": plateau, "outside_worst_error_ratio": max(outside, default=None)}
