"""What an incident's own package hands every command (pure): its story for `demo`, its certificate
for `certify`, its guard for the fidelity guard. The declaration (stormcore/incidents/) says what
the incident is; a unit is the code that is truly its own."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from stormcore.incidents import Incident
from stormcore.settings import LabSettings

Say = Callable[[str], None]


@dataclass(frozen=True)
class Unit:
    incident: Incident
    demo: Callable[[argparse.Namespace, LabSettings], int]  # `stormlab demo --profile NAME`: its story on a lab, an exit code
    certify: Callable[[argparse.Namespace, float | None], int]  # `stormlab certify --profile NAME`: policies against its storm
    guard: Callable[[Say], list[str]]  # its guard points live and in the model: the findings (none: its answers hold)
