"""What a scenario is: its steps, checks and comparisons, and the schedule a seed fixes.

A scenario is a title, a profile (with optional setting overrides), steady-state checks, a
timeline of steps, rollbacks that always run, scoring hints and the seed-vs-lab comparison.
Each step does one thing: apply a ``fault``, take an operator ``action``, ``wait``, check an
``expect`` (a measured condition within a time), or hand over to the ``operator`` (the players,
or ``--autopilot``). Files are read and checked by ``stormlab.scenarios.reader``. Pure.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from chaos import catalog
from stormcore.errors import UsageError
from stormcore.settings import LabSettings, Pace, SettingsError, parse_duration
from stormlab.responder import moves
from stormlab.responder.desk import ANSWERS, LIVE_MAX_MESSAGE, TEAM

FAULTS = tuple(catalog.FAULTS)
ACTIONS = tuple(moves.ACTIONS)
KINDS = ("fault", "action", "wait", "expect", "operator")


def one_table(probe: str) -> tuple[str, str | None]:
    """A window's probe, and its table when it names one (``table_error_ratio=TABLE``)."""
    name, _, table = probe.partition("=")
    return (name, table) if name == "table_error_ratio" and table else (probe, None)


class ScenarioError(UsageError):
    """A scenario file that cannot run: the message names the field and its line (exit code 2)."""


@dataclass(frozen=True)
class Check:
    probe: str
    above: float | None = None
    below: float | None = None
    table: str | None = None
    within_s: float = 0.0
    for_s: float = 0.0
    expr: str | None = None  # probe promql: the expression Prometheus evaluates

    def holds(self, value: float | None) -> bool:
        if value is None:
            return False
        return (self.above is None or value > self.above) and (self.below is None or value < self.below)

    def describe(self) -> str:
        bounds = " and ".join(
            b for b in (f"> {self.above:g}" if self.above is not None else "", f"< {self.below:g}" if self.below is not None else "") if b
        )
        what = f"{self.probe}[{self.table}]" if self.table else f"promql({self.expr})" if self.expr else self.probe
        return (
            f"{what} {bounds}" + (f" for {self.for_s:g}s" if self.for_s else "") + (f" within {self.within_s:g}s" if self.within_s else "")
        )


@dataclass(frozen=True)
class Step:
    name: str
    kind: str
    line: int
    path: str = ""
    at_s: float | None = None
    after_s: float = 0.0
    jitter_s: float = 0.0
    fault: str | None = None
    action: str | None = None
    args: dict = field(default_factory=dict)
    expect_failure: bool = False
    wait_s: float = 0.0
    check: Check | None = None
    time_limit_s: float = 0.0
    autopilot: tuple[Step, ...] = ()
    rules: dict | None = None  # operator: the autopilot plays by these rules (stormlab/scenarios/autopilot.py), not by steps
    watch: tuple[Step, ...] = ()  # operator: expectations met at any time while it lasts (what the moves set off)


@dataclass(frozen=True)
class Compare:
    what: str
    in_2015: str
    # "mean:STEP" (an expect step's mean), "elapsed:STEP_A..STEP_B", or "window:STEP_A..STEP_B:PROBE"
    # (mean and worst; PROBE table_error_ratio=TABLE for one table's customers)
    measure: str
    span_2015_s: float | None = None  # how long it took in 2015, when it was a span of time

    def steps(self) -> list[str]:
        kind, _, ref = self.measure.partition(":")
        if kind == "window":
            ref = ref.rpartition(":")[0]
        return ref.split("..") if kind in ("elapsed", "window") else [ref]

    @property
    def probe(self) -> str | None:
        """The probe a window measures (None: not a window)."""
        kind, _, ref = self.measure.partition(":")
        return ref.rpartition(":")[2] if kind == "window" else None


@dataclass(frozen=True)
class Inject:
    """A message the game sends a role (or the whole team) at a time or once a condition holds,
    and what it expects back within a time: "an executive asks for the customer impact in five
    minutes" (a status post naming the tables), "the status page is due" (a post), "say you have
    it" (an ack). Times are profile seconds."""

    name: str
    to: str  # a role, or TEAM
    message: str
    line: int
    at_s: float | None = None  # at this time of the run
    when: Check | None = None  # or once this holds (for its ``for``)
    answer: str = "ack"
    within_s: float = 300.0
    names_tables: bool = False  # a post must name a table whose customers failed


LIVE_MAX_WITHIN_S = 3600.0


def live_inject(body: dict, name: str) -> Inject:
    """An inject typed live at the facilitator's console (JSON: ``to``, ``message``, ``expect``,
    ``within``, ``names_tables``), to be sent now; ScenarioError (a 400) says what is wrong. Its
    ``within`` is wall seconds: it is sent to a running game, not read with a scenario's pace."""
    unknown = sorted(set(body) - {"to", "message", "expect", "within", "names_tables"})
    if unknown:
        raise ScenarioError(f"an inject takes to, message, expect, within and names_tables; not {', '.join(unknown)}")
    to, message, answer = body.get("to"), body.get("message"), body.get("expect", "ack")
    if to not in (*moves.ROLES, TEAM):
        raise ScenarioError(f"to: a role ({', '.join(moves.ROLES)}) or {TEAM}, got {to!r}")
    if not isinstance(message, str) or not message.strip() or len(message) > LIVE_MAX_MESSAGE:
        raise ScenarioError(f"message: the text the role reads (1-{LIVE_MAX_MESSAGE} characters)")
    if answer not in ANSWERS:
        raise ScenarioError(f"expect: one of {', '.join(ANSWERS)}, got {answer!r}")
    names = body.get("names_tables", False)
    if not isinstance(names, bool) or (names and answer != "post"):
        raise ScenarioError("names_tables: true or false, and true only with expect: post")
    try:
        within = parse_duration(body.get("within", "5m"))
    except SettingsError as exc:
        raise ScenarioError(f"within: {exc}") from None
    if not 0 < within <= LIVE_MAX_WITHIN_S:
        raise ScenarioError(f"within: more than 0 and at most {LIVE_MAX_WITHIN_S:g}s, got {within:g}s")
    return Inject(name=name, to=str(to), message=message.strip(), line=0, answer=answer, within_s=within, names_tables=names)


@dataclass(frozen=True)
class Scenario:
    title: str
    profile: str
    settings: LabSettings
    steady_state: tuple[Check, ...]
    steps: tuple[Step, ...]
    rollback: tuple[Step, ...]
    onset_step: str | None
    compare: tuple[Compare, ...]
    description: str = ""
    stop_when: tuple[Check, ...] = ()  # any of these holding for its ``for`` aborts the run
    steady_state_within_s: float = 0.0  # after the run, how long the steady state may take to return
    injects: tuple[Inject, ...] = ()
    monitoring: str = "direct"  # or "shared-fate": the players' monitoring reads the lab's own metrics service

    def promql(self) -> set[str]:
        """The PromQL expressions its probes need (a compose run's Prometheus answers them)."""
        checks = [*self.steady_state, *self.stop_when, *(s.check for s in self.all_steps() if s.check)]
        return {c.expr for c in checks if c.expr}

    def step(self, name: str) -> Step:
        return next(s for s in self.all_steps() if s.name == name)

    def find(self, name: str) -> Step | None:
        """The step of that name, or None (a rules' autopilot's move is named, not a step)."""
        return next((s for s in self.all_steps() if s.name == name), None)

    def all_steps(self) -> list[Step]:
        return [x for s in self.steps for x in (s, *s.autopilot, *s.watch)]


@dataclass(frozen=True)
class Planned:
    """A step with its time resolved: the fault schedule a seed fixes."""

    step: Step
    at_s: float | None
    args: dict


def schedule(scenario: Scenario, seed: int, speed: float = 1.0) -> list[Planned]:
    """Resolve jitter and random rack picks with ``seed``; divide every time by ``speed``."""
    rng = random.Random(seed)
    plan = []
    for step in scenario.steps:
        at = None if step.at_s is None else step.at_s + (rng.uniform(-step.jitter_s, step.jitter_s) if step.jitter_s else 0)
        args = dict(step.args)
        if "pick" in args:
            count = int(float(args.pop("pick")))
            args["racks"] = ",".join(str(r) for r in sorted(rng.sample(range(scenario.settings.racks), count)))
            if count == 1:
                args["racks"] += ","  # one named rack, not a count
        plan.append(Planned(step, None if at is None else Pace(speed).wall(max(0.0, at)), args))
    return plan
