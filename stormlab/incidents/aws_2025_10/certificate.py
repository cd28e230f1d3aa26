"""A lease manager's retry policy against the aws-2025-10 storm (pure, no I/O): the trigger suite,
what the model reads at each point, the verdict and the summary line. `stormlab certify --profile
aws-2025-10` (stormlab/incidents/aws_2025_10/certify.py) runs it, with a live sample, and writes it out.

The policy decides what a lease manager host does with work that timed out (services/leases/
host.py): DWFM queued it again at once. Each policy meets the same storms as EC2's lease manager:
the database endpoint's record empty for a while (30 s to 5 minutes; a lease lives 60 s) over a
fleet of 1,000 to 5,000 droplets. The policy **holds** when the manager gets its leases back by
itself (launch errors under 10% over the last minute of the watch, nobody's move) after the
account's trigger (the profile's 5,000 droplets, the record empty for 5 minutes: every lease
lapsed) and after every smaller one; it is **stuck** otherwise. The largest trigger it survives is
the largest of the suite from which it recovers along with every smaller one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from stormcore.settings import LabSettings
from stormlab.incidents.aws_2025_10 import model as leases
from stormlab.model.certificate import drawn, judged
from stormlab.model.grid import Verdict

TRIGGER_DROPLETS = (1000, 2000, 3000, 4000, 5000)
TRIGGER_OUTAGES = (30.0, 60.0, 90.0, 300.0)  # the record empty this long, profile seconds
ACCOUNT = (5000, 300.0)  # the account's trigger, at the lab's scale: the profile's fleet, every lease lapsed
WATCH_S = 300.0  # watched after the repair, profile seconds
LAST_S = 60.0  # the verdict's window at the watch's end
WINDOW_S = 5.0  # the model's readings: launches, leases, queues per window
STUCK = 0.10  # launch errors at or above this over the last minute: stuck
REFERENCES = {"immediate": "DWFM's: queued again at once", "full-jitter": "full jitter"}


@dataclass(frozen=True)
class LeasePoint:
    """One storm of the suite: the fleet's size and how long the endpoint's record is empty."""

    droplets: int
    outage_s: float

    @property
    def key(self) -> str:
        return f"{self.droplets} droplets x {self.outage_s:g}s"

    def is_account(self) -> bool:
        return (self.droplets, self.outage_s) == ACCOUNT


def suite() -> list[LeasePoint]:
    return [LeasePoint(d, o) for d in TRIGGER_DROPLETS for o in TRIGGER_OUTAGES]


def smaller_or_account(p: LeasePoint) -> bool:
    """The points a policy must recover from to hold: the account's trigger and every smaller one
    (every point of the suite, as the account's is its largest)."""
    return p.droplets <= ACCOUNT[0] and p.outage_s <= ACCOUNT[1]


@dataclass(frozen=True)
class Reading:
    """One point of one policy in the model: the verdict and the certificate's figures."""

    verdict: Verdict
    thrown_away: float  # items that timed out after the repair, per droplet: work done for nothing
    peak_queue: int  # the most items waiting, every host, after the repair
    leases_back: float  # of the fleet, holding a lease at the watch's end


def judge(base: LabSettings, point: LeasePoint, watch_s: float = WATCH_S) -> Reading:
    """The point in the reference model: the endpoint empty ``outage_s`` after a minute, then
    watched ``watch_s`` with nobody's move."""
    settings = base.replace(lease_droplets=point.droplets)
    repair = leases.BREAK_S + point.outage_s
    end = repair + watch_s
    run = leases.simulate(settings, leases.outage(point.outage_s), end, WINDOW_S)
    after = run.between(repair, end)
    back = run.recovered_at(repair - 1e-6)  # the window that begins at the repair counts
    end_error = run.error_ratio(end - LAST_S, end)
    peak = max((w.launch_error_ratio or 0.0 for w in after), default=0.0)
    verdict = Verdict(point.key, end_error >= STUCK, end_error, peak, None if back is None else round(back - repair, 1))
    return Reading(
        verdict,
        sum(w.timed_out for w in after) / point.droplets,
        max((w.queued for w in after), default=0),
        after[-1].leases / point.droplets if after else 0.0,
    )


def largest_survived(points: Sequence[LeasePoint], readings: dict[str, Reading]) -> LeasePoint | None:
    """The largest trigger it recovers from along with every smaller trigger of the suite."""
    ok = [
        p for p in points if all(not readings[q.key].verdict.stuck for q in points if q.droplets <= p.droplets and q.outage_s <= p.outage_s)
    ]
    return max(ok, key=lambda p: (p.droplets * p.outage_s, p.droplets), default=None)


def certificate(label: str, spec: str, points: Sequence[LeasePoint], readings: dict[str, Reading]) -> dict[str, Any]:
    """One policy's certificate from its model readings."""
    at = readings[LeasePoint(*ACCOUNT).key]
    best = largest_survived(points, readings)
    recovered = [r.verdict.recovered_after_s for r in readings.values() if r.verdict.recovered_after_s is not None]
    return judged(label, spec, [p for p in points if smaller_or_account(p)], readings, best, _trigger) | {
        "at_account": {
            "verdict": "stuck" if at.verdict.stuck else "recovered",
            "end_error": at.verdict.end_error,
            "recovered_after_s": at.verdict.recovered_after_s,
            "thrown_away_per_droplet": at.thrown_away,
            "peak_queue": at.peak_queue,
            "leases_back": at.leases_back,
        },
        "recovered_after_s_longest": max(recovered) if recovered else None,
        "points": {k: {**asdict(r.verdict), **{f: v for f, v in asdict(r).items() if f != "verdict"}} for k, r in readings.items()},
        "stuck_points": sum(r.verdict.stuck for r in readings.values()),
    }


def _trigger(p: LeasePoint) -> dict[str, Any]:
    return {"droplets": p.droplets, "outage_s": p.outage_s}


def trigger_words(t: dict[str, Any] | None) -> str:
    return "none of the suite" if t is None else f"{t['droplets']} droplets x {t['outage_s']:g}s"


def summary_line(cert: dict[str, Any]) -> str:
    a = cert["at_account"]
    held = (
        f"recovered {a['recovered_after_s']:g}s after the repair"
        if a["verdict"] == "recovered" and a["recovered_after_s"] is not None
        else ("recovered" if a["verdict"] == "recovered" else f"STUCK at {a['end_error']:.0%} launch errors")
    )
    return (
        f"{cert['policy']}: {cert['verdict'].upper()} at the account's trigger and below; "
        f"{ACCOUNT[0]} droplets x {ACCOUNT[1]:g}s: {held}; largest trigger survived: {trigger_words(cert['largest_trigger_survived'])}; "
        f"work thrown away {a['thrown_away_per_droplet']:.1f} items a droplet, peak queue {a['peak_queue']}, "
        f"leases back {a['leases_back']:.0%}"
    )


def live_sample(points: Sequence[LeasePoint], count: int, seed: int, policy: str) -> list[LeasePoint]:
    """Which points of a policy run live: the account's trigger, then points drawn from the rest with
    the seed and the policy's name, chosen without the model's verdicts."""
    return drawn([p for p in points if p.is_account()], [p for p in points if not p.is_account()], count, seed, policy)
