"""What an incident declares (pure): the types of one declaration (stormcore/incidents/).

An incident is one declaration: its account (the card the report and the debriefs read), its
profile, the processes its world adds to the lab's, its trigger and its operators' moves (faults of
the catalog), the headline its demo tells, the points the fidelity guard pins, its game days, its
dashboards and alert rules, and its page under docs/incidents/. Its code that is truly its own
lives in its own packages (a service under ``services/``, its story, model and certificate under
``stormlab/incidents/``); everything else the lab does, it does for every incident alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stormcore.process import Process


@dataclass(frozen=True)
class Account:
    """An incident's published timeline, and what marks each of its moments in a run: the trigger
    (a fault of the catalog), then rows of (minutes after it, clock time, what happened, mark).
    A mark is ``fault:NAME``, ``page:ALERT``, ``move:ACTION``, ``step:NAME``, ``onset`` or ``recovered``
    (the first operator phase's recovery); every fraction is of the trigger to ``recovered_min``."""

    date: str  # as the report heads its column
    trigger: str  # the fault that starts the incident
    recovered_min: int  # the trigger to the recovery, in the account
    span: str  # that span as the account's clock has it
    rows: tuple[tuple[int, str, str, str], ...]
    own: tuple[str, ...] = ()  # the prefixes of the probes of the account's own story (not its cascade)
    year: str = ""  # as a column of figures is labelled (the date's year unless told)

    def card(self) -> dict[str, str]:
        """What a scored journal keeps of it (the report and the debriefs head their columns with it)."""
        return {"date": self.date, "trigger": self.trigger, "span": self.span}


@dataclass(frozen=True)
class Headline:
    """The figure a demo of the incident heads its summary with, and the band the account puts it in."""

    figure: str  # the key of the demo's result
    words: str  # what it is, as a person reads it
    band: tuple[float, float]  # where the incident's account puts it (the demo says whether the run landed there)
    series: str = ""  # the game-day report's chart of it (stormlab/scenarios/report.py SERIES)
    then: float | None = None  # the account's level on that chart (%), drawn beside the run's; None: the account gives none
    then_words: str = ""  # its label


@dataclass(frozen=True)
class GuardPoint:
    """A point the fidelity guard runs live beside the incident's model on every landing: the branch
    it must land on, the band of its figure, and the values that make it (read by the incident's own
    code: a 2015 point is a policy, racks, a blip; a 2025 point an outage, a fleet, the moves)."""

    key: str
    branch: str
    band: tuple[float, float]
    values: tuple[tuple[str, Any], ...] = ()

    def value(self, name: str, default: Any = None) -> Any:
        return dict(self.values).get(name, default)


@dataclass(frozen=True)
class Incident:
    name: str  # the profile's name, the scenario files' `profile:`, `--profile`
    title: str  # one line, as a list of incidents shows it
    account: Account
    profile: dict[str, Any] = field(default_factory=dict)  # its profile: settings over the lab's defaults
    processes: tuple[Process, ...] = ()  # what its world adds to the lab's processes
    roles: tuple[str, ...] = ()  # the on-call roles a team's game day of it hands tokens to
    moves: tuple[str, ...] = ()  # the catalog's faults its operators' moves are
    headline: Headline | None = None
    guard: tuple[GuardPoint, ...] = ()
    scenarios: tuple[str, ...] = ()  # its game days (scenarios/)
    dashboards: tuple[str, ...] = ()  # its Grafana dashboards (grafana/dashboards/)
    alerts: tuple[str, ...] = ()  # its alert rules (stormlab/responder/alerts.py)
    packages: tuple[str, ...] = ()  # its own code's folders: the only places besides this declaration that may name it

    @property
    def page(self) -> str:
        """Its page: what happened, what the lab runs of it, its figures."""
        return f"docs/incidents/{self.name}.md"

    @property
    def trigger(self) -> str:
        return self.account.trigger
