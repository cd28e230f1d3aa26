"""The incidents the lab tells, each declared once (pure): the registry every command reads.

``find(name)`` is an incident by its name (a profile's, a scenario file's ``profile:``); ``FIRST``
the lab's default. Adding an incident is a declaration beside these (stormcore/incidents/NAME.py),
a line in ``REGISTERED``, and its own code in its own packages (docs/incidents/README.md).
"""

from __future__ import annotations

from stormcore.errors import UsageError
from stormcore.incidents import aws_2025_10, dynamodb_2015
from stormcore.incidents.declare import Account, GuardPoint, Headline, Incident

REGISTERED: tuple[Incident, ...] = (dynamodb_2015.INCIDENT, aws_2025_10.INCIDENT)
FIRST = REGISTERED[0]  # the default: the lab's first incident
INCIDENTS: dict[str, Incident] = {i.name: i for i in REGISTERED}
NAMES: tuple[str, ...] = tuple(INCIDENTS)

__all__ = ["Account", "FIRST", "GuardPoint", "Headline", "INCIDENTS", "Incident", "NAMES", "REGISTERED", "UnknownIncident", "find"]


class UnknownIncident(UsageError):
    pass


def find(name: str) -> Incident:
    """The incident of this name, or a UsageError naming the ones the lab knows."""
    try:
        return INCIDENTS[name]
    except KeyError:
        raise UnknownIncident(f"unknown incident {name!r}; known: {', '.join(NAMES)}") from None
