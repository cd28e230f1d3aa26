"""The numbers of a demo run, computed from its samples (pure, so it can be tested).

A sample is one reading a second: cumulative customer requests and failures, nodes
disqualified, metadata in flight, renewal and processing p99, event-loop lag. Times are
seconds on the demo's clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

STORM_RATIO = 0.2  # a lab losing a fifth of its customer requests is in a storm
RECOVERED_RATIO = 0.01
LAG_BUDGET = 0.05  # of the allowance: above it the host, not the model, shapes the run


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
    so a sped-up profile is judged the same way. ``run_lag_p99_s``: the worst process's event-loop
    lag p99 over the whole run (each process's own samples); without it, the worst 10 s window."""
    end, p = samples[-1].t, period_s
    after = [(t, r) for t, r in rolling(samples, p / 2) if t >= blip_start]
    plateau = ratio_between(samples, max(blip_end, end - 6 * p), end)
    onset = None
    if plateau is not None and plateau >= STORM_RATIO:
        onset = next((t - blip_start for t, r in after if r >= 0.9 * plateau), None)
    recovery = next((t - blip_end for t, r in after if t >= blip_end and r < RECOVERED_RATIO), None)
    holds_at = ratio_between(samples, blip_end + 5.5 * p, blip_end + 6.5 * p)
    worst_window = max((s.loop_lag_p99_s for s in samples if s.t >= settle_start), default=0.0)
    lag = worst_window if run_lag_p99_s is None else run_lag_p99_s
    return {
        "baseline_error_ratio": ratio_between(samples, settle_start, blip_start),
        "peak_error_ratio": max((r for _, r in after), default=None),
        "plateau_error_ratio": plateau,
        "post_blip_error_ratio": ratio_between(samples, blip_end, min(end, blip_end + 18 * p)),
        "onset_s": onset,
        "storm_holds": holds_at is not None and holds_at >= STORM_RATIO,
        "recovery_s": recovery,
        "disqualified_peak": max((s.disqualified for s in samples if s.t >= blip_start), default=0),
        "disqualified_at_end": samples[-1].disqualified,
        "loop_lag_p99_s": lag,
        "loop_lag_worst_10s_p99_s": worst_window,
        "valid": lag < LAG_BUDGET * allowance_s,
    }
