"""The DynamoDB outage of 20 September 2015, as every command runs it: its story is the lab's own
demo (stormlab/runs/demo.py), its certificate the renewal retries' (stormlab/runs/certify.py), its
guard the sweep's map pinned (stormlab/runs/guard.py), at the 400-node fleet at speed 2."""

from __future__ import annotations

from stormcore.incidents.dynamodb_2015 import INCIDENT
from stormcore.settings import LabSettings
from stormlab.incidents.unit import Say, Unit
from stormlab.runs import certify, demo, guard
from stormlab.runs.live import QUICK, judge_live

GUARD_SPEED = 2.0  # the sweep's --quick: the 400-node fleet at speed 2 (a run the host shaped runs once more)


def _guard(say: Say) -> list[str]:
    return guard.run(INCIDENT.name, INCIDENT.guard, LabSettings(**QUICK), GUARD_SPEED, judge_live, say)


UNIT = Unit(INCIDENT, demo.run, certify.run, _guard)
