"""us-east-1, October 2025: the lease manager's congestive collapse, its own code (the lease manager
itself is services/leases): its story for `demo` (demo.py), the ways out (moves.py), the reference
model (model.py), a lease manager's retry policy certified (certificate.py, certify.py), and the
guard's points live beside the model (guard.py)."""

from __future__ import annotations

from stormcore.incidents.aws_2025_10 import INCIDENT
from stormcore.settings import profile
from stormlab.incidents.aws_2025_10 import certify, demo, guard
from stormlab.incidents.unit import Say, Unit


def _guard(say: Say) -> list[str]:
    return guard.run(INCIDENT.name, INCIDENT.guard, profile(INCIDENT.name), guard.SPEED, guard.live_of, say)


UNIT = Unit(INCIDENT, demo.run, certify.run, _guard)
