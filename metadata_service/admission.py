"""Who may renew now: the pause AWS used at 5:06 AM, and a staged readmission (pure).

A pause turns every membership request away (cheaply, at the front door). Resuming all at
once re-creates the herd; a staged resume readmits the fleet in ``groups`` steps, one every
``every_s`` seconds, each node in a fixed group.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Staging:
    groups: int
    every_s: float
    started_at: float

    def admitted_groups(self, now: float) -> int:
        if self.every_s <= 0:
            return self.groups
        return min(self.groups, int((now - self.started_at) / self.every_s) + 1)


def shed(inflight: int, cores: float, work_s: float, deadline_s: float, limit: int, deadline_aware: bool) -> str | None:
    """Server-side admission control for one membership request (pure): ``overloaded`` to turn
    it away at the door, or None to take it. A concurrency ``limit`` (0: none) caps the requests
    in flight; deadline-aware shedding refuses a request whose work, shared with those in flight
    (processor sharing, at most a core each), could not finish within ``deadline_s``: work that
    would only be abandoned is never started."""
    if limit and inflight >= limit:
        return "overloaded"
    if deadline_aware and work_s / min(1.0, cores / (inflight + 1)) > deadline_s:
        return "overloaded"
    return None


class Admission:
    def __init__(self) -> None:
        self.paused = False
        self.staging: Staging | None = None
        self.epoch = 0  # each pause or resume starts a new epoch; a pause lease only undoes its own

    def pause(self) -> int:
        self.paused, self.staging = True, None
        self.epoch += 1
        return self.epoch

    def resume(self, now: float, groups: int = 1, every_s: float = 0.0) -> int:
        self.paused = False
        self.staging = Staging(groups, every_s, now) if groups > 1 else None
        self.epoch += 1
        return self.epoch

    def admits(self, node: str, now: float) -> bool:
        if self.paused:
            return False
        if self.staging is None:
            return True
        admitted = self.staging.admitted_groups(now)
        if admitted >= self.staging.groups:
            self.staging = None
            return True
        return zlib.crc32(node.encode()) % self.staging.groups < admitted

    def describe(self, now: float) -> dict[str, Any]:
        if self.paused:
            return {"paused": True}
        if self.staging is None or self.staging.admitted_groups(now) >= self.staging.groups:
            return {"paused": False}
        return {
            "paused": False,
            "staged": {"groups": self.staging.groups, "admitted": self.staging.admitted_groups(now), "every_s": self.staging.every_s},
        }
