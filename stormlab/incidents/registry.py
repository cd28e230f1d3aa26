"""The incidents' units, by name: what `demo`, `certify` and the fidelity guard call.

Every incident declared in stormcore/incidents/ has a unit here (a test holds it); a command asks
for the incident by its name (a profile's, a scenario's) and never names one itself.
"""

from __future__ import annotations

import argparse

from stormcore import incidents
from stormcore.settings import LabSettings
from stormlab.incidents import aws_2025_10, dynamodb_2015
from stormlab.incidents.unit import Say, Unit
from stormlab.runs import certify as certify_flags

UNITS: dict[str, Unit] = {u.incident.name: u for u in (dynamodb_2015.UNIT, aws_2025_10.UNIT)}


def unit(name: str) -> Unit:
    """The unit of the incident of this name (a UsageError naming the known ones otherwise)."""
    return UNITS[incidents.find(name).name]


def demo(args: argparse.Namespace, settings: LabSettings) -> int:
    """`stormlab demo`: the story of the incident the settings tell."""
    return unit(settings.incident).demo(args, settings)


def certify(args: argparse.Namespace) -> int:
    """`stormlab certify --profile NAME`: the policies against that incident's storm."""
    speed = certify_flags.checked(args)
    return unit(args.profile).certify(args, speed)


def guard(name: str, say: Say = print) -> list[str]:
    """One incident's guard points, live and in the model: the findings."""
    return unit(name).guard(say)
