"""The metadata service's door (pure): who may renew now, and what a renewal costs.

A pause (AWS's, 5:06 AM) turns every membership request away, cheaply, at the front door.
Resuming all at once re-creates the herd; a staged resume readmits the fleet in ``groups``
steps, one every ``every_s`` seconds, each node in a fixed group. Past the pause, server-side
admission control may turn a request away too (``shed``). :func:`door` is the whole rule, and
:func:`membership_work_s` the cost model: the live service and the reference model both call
them, so they cannot drift apart.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from stormcore.settings import LabSettings
from stormcore.wire import OVERLOADED, PAUSED


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
        return OVERLOADED
    if deadline_aware and work_s / min(1.0, cores / (inflight + 1)) > deadline_s:
        return OVERLOADED
    return None


def membership_work_s(settings: LabSettings, entries: int) -> float:
    """What answering a membership of ``entries`` costs the virtual CPU, in core-seconds."""
    return settings.cost_base_s + settings.cost_per_entry_s * entries


def door(
    admission: Admission, node: str, now: float, work_s: float, inflight: int, cores: float, deadline_s: float, settings: LabSettings
) -> str | None:
    """Whether a renewal comes in: ``paused`` (an operator's pause, or a staged readmission that
    has not reached this node), ``overloaded`` (admission control), or None (it is served)."""
    if not admission.admits(node, now):
        return PAUSED
    return shed(inflight, cores, work_s, deadline_s, settings.admission_limit, settings.admission_deadline)


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

    def readmit_all(self, epoch: int) -> None:
        """End the staged readmission of ``epoch`` now: every group is in (a later pause or
        resume, a new epoch, is left as it is)."""
        if self.epoch == epoch and not self.paused:
            self.staging = None

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
