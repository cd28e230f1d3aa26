"""The demo's PNG: customer errors, nodes disqualified, renewal latency against the allowance."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from stormlab.artefacts.plotting import pyplot
from stormlab.engine.story import Sample, rolling


def write_chart(samples: Sequence[Sample], times: dict, allowance_s: float, path: Path, summary: dict) -> Path:
    plt = pyplot()
    origin = times["blip_start"]
    xs = [s.t - origin for s in samples]
    fig, (err, disq, lat) = plt.subplots(3, 1, figsize=(11, 8.5), sharex=True)
    roll = rolling(samples, 5.0)
    err.plot([t - origin for t, _ in roll], [100 * r for _, r in roll], color="#c0392b", lw=1.6, label="customer error ratio (5 s)")
    err.axhline(55, color="#7f8c8d", ls=":", lw=1, label="2015: about 55%")
    err.set_ylabel("customer errors (%)")
    err.set_ylim(-2, 102)
    disq.plot(xs, [s.disqualified for s in samples], color="#8e44ad", lw=1.6, label="nodes disqualified")
    disq.set_ylabel("nodes")
    lat.plot(xs, [s.renewal_p99_s for s in samples], color="#2980b9", lw=1.4, label="renewal p99 (racks, 10 s)")
    lat.plot(
        xs, [s.processing_p99_s for s in samples], color="#16a085", lw=1.2, ls="--", label="metadata processing p99 of answered renewals"
    )
    lat.axhline(allowance_s, color="#c0392b", lw=1.2, label=f"allowance {allowance_s:g}s")
    lat.set_ylabel("seconds")
    lat.set_xlabel("seconds since the blip")
    for ax in (err, disq, lat):
        ax.axvspan(0, times["blip_end"] - origin, color="#f39c12", alpha=0.3, lw=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    plateau = summary.get("plateau_error_ratio")
    fig.suptitle(
        f"stormlab: blip of racks {summary.get('blip_racks')} (shaded) — plateau "
        f"{'n/a' if plateau is None else f'{100 * plateau:.0f}%'}, storm "
        f"{'holds' if summary.get('storm_holds') else 'does not hold'}"
        + (f" — speed {summary['speed']:g}x, profile time" if summary.get("speed", 1) != 1 else "")
        + ("" if summary.get("valid", True) else " — INVALID RUN (the host shaped it)")
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
