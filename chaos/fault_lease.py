"""Fault leases, pure: every fault has a duration and ends by itself.

One name for each meaning: a *fault lease* is chaos's (a fault held for a time, then reverted);
a *lease* is the lease manager's on a droplet (services/leases, the October 2025 incident). In
chaos's own code and in the `/faults` API the fault lease is often just "the lease": it never meets
the lease manager's there.

The book only keeps time: it says which leases are due for their revert. The process that
applied a fault holds its book and its revert, so the revert is armed on the target side the
moment the fault is applied, whatever happens to the command that asked for it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from stormcore.settings import DEFAULT_MAX_FAULT_S


class FaultLeaseError(ValueError):
    """A fault request the target refuses: nothing was applied."""


@dataclass(frozen=True)
class FaultLease:
    id: int
    fault: str
    target: str  # one target, or several joined by commas (a blip of racks 0 and 1: "rack-0,rack-1")
    started_at: float
    ends_at: float
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def targets(self) -> list[str]:
        return self.target.split(",")

    def describe(self, now: float) -> dict[str, Any]:
        return {"id": self.id, "fault": self.fault, "target": self.target, "left_s": round(max(0.0, self.ends_at - now), 3), **self.detail}


class FaultLeaseBook:
    def __init__(self, max_duration_s: float = DEFAULT_MAX_FAULT_S) -> None:
        self.max_duration_s = max_duration_s
        self._leases: dict[int, FaultLease] = {}
        self._ids = itertools.count(1)

    def check_duration(self, duration_s: Any) -> float:
        if isinstance(duration_s, bool) or not isinstance(duration_s, (int, float)):
            raise FaultLeaseError("duration_s must be a number of seconds")
        if not 0 < duration_s <= self.max_duration_s:
            raise FaultLeaseError(f"duration_s must be more than 0 and at most {self.max_duration_s:g}")
        return float(duration_s)

    def open(self, fault: str, target: str, duration_s: Any, now: float, **detail: Any) -> FaultLease:
        duration = self.check_duration(duration_s)
        lease = FaultLease(next(self._ids), fault, target, now, now + duration, detail)
        self._leases[lease.id] = lease
        return lease

    def due(self, now: float) -> list[FaultLease]:
        """Leases whose time is up, removed from the book, oldest end first."""
        done = sorted((lease for lease in self._leases.values() if lease.ends_at <= now), key=lambda lease: lease.ends_at)
        for lease in done:
            del self._leases[lease.id]
        return done

    def halt(self, fault: str | None = None, lease_id: int | None = None) -> list[FaultLease]:
        """Every lease (or every lease of ``fault``, or the one lease ``lease_id``), removed from the
        book, oldest first."""
        chosen = (lease for lease in self._leases.values() if (fault is None or lease.fault == fault) and lease_id in (None, lease.id))
        leases = sorted(chosen, key=lambda lease: lease.id)
        for lease in leases:
            del self._leases[lease.id]
        return leases

    def next_end(self) -> float | None:
        return min((lease.ends_at for lease in self._leases.values()), default=None)

    def holding(self, target: str, fault: str | None = None) -> list[FaultLease]:
        return [lease for lease in self._leases.values() if target in lease.targets and (fault is None or lease.fault == fault)]

    def active(self, now: float) -> list[dict[str, Any]]:
        return [lease.describe(now) for lease in sorted(self._leases.values(), key=lambda lease: lease.id)]

    def __len__(self) -> int:
        return len(self._leases)


def describe_effect(effect: dict[str, int] | None) -> str:
    """What a fault did, in words ("dropped 1,200 bytes"), or "no effect" when it did nothing."""
    if effect is None:
        return "not measured"
    done = [f"{verb} {n:,} {unit}" for (verb, _, unit), n in ((k.rpartition("_"), n) for k, n in sorted(effect.items())) if n]
    return ", ".join(done) if done else "NO EFFECT: it met no traffic to drop or hold back"
