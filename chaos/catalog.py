"""The fault catalog: every fault the lab can inject, declared once (pure).

Each fault names the process that holds it (the one that applies it and arms its revert), what
it emulates in 2015, what the end of its lease does, and its arguments with their kind, range,
default and help. Everything that speaks of faults reads them here: the `stormlab chaos`
subcommands are built from this table, the holders check the requests they receive with it,
and scenario files and `stormlab ops` build their requests through it.

A request is built from a plain mapping of argument keys to values, either text as a person
types it (``"5s"``, ``"2,5,7"``, ``"on"``) or JSON values, and comes out as the body the holder
takes: ``{"fault": NAME, "duration_s": …, …}`` in base units (seconds, cores, rack numbers).
Changing a fault's range is a one-line change here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stormcore import roster
from stormcore.documents import is_number, whole
from stormcore.errors import UsageError
from stormcore.settings import CORES, RETRY_POLICIES, RETRY_WRAPPERS, SettingsError, max_duration_s, parse_bool, parse_duration

HOLDERS = {  # who applies each fault and arms its revert, in the local lab
    "supervisor": "the supervisor (the parent of every lab process)",
    **{p.name: p.what if p.kind == roster.LINKPROXY else f"{p.what.split(':')[0]} itself" for p in roster.ROSTER if p.holds_faults},
}
SERVICES = roster.CASCADE  # the cascade's services, beside the database
DURATION, NUMBER, INTEGER, FLAG, CHOICE, RACKS, TABLES, TARGET = (
    "duration",
    "number",
    "integer",
    "flag",
    "choice",
    "racks",
    "tables",
    "target",
)
TARGET_NAME = roster.TARGET_NAME


class ChaosError(UsageError):
    """A fault request that cannot be made: nothing was changed (exit code 2)."""


@dataclass(frozen=True)
class Arg:
    """One argument of a fault: ``name`` is its key in the request, in base units."""

    name: str
    kind: str
    help: str
    lo: float | None = None
    hi: float | Callable[[], float] | None = None
    lo_open: bool = False  # the lower bound itself is refused (a duration of 0)
    required: bool = False
    default: Any = None
    choices: tuple[str, ...] = ()
    client: bool = False  # read by the command that asks (how long it waits), never sent

    @property
    def key(self) -> str:
        """How people write it: scenario args, `ops` options, and the flag ``--KEY``."""
        return self.name.removesuffix("_s")

    @property
    def flag(self) -> str:
        """Its command-line flag: ``--KEY``, but a selection of racks is ``--rack-set`` (``--racks``
        is a fleet's size wherever a lab is started)."""
        return "--rack-set" if self.kind == RACKS else "--" + self.key.replace("_", "-")

    def upper(self) -> float | None:
        return self.hi() if callable(self.hi) else self.hi

    def limits(self) -> str:
        unit = "s" if self.kind == DURATION else ""
        low = f"more than {self.lo:g}{unit}" if self.lo_open else f"at least {self.lo:g}{unit}"
        return f"{low} and at most {self.upper():g}{unit}"

    def describe(self) -> str:
        """The help line: what it is, its range, its default."""
        extra = []
        if self.choices:
            extra.append("one of " + ", ".join(self.choices))
        if self.lo is not None and self.kind in (DURATION, NUMBER, INTEGER):
            extra.append(self.limits())
        if self.default is not None and self.default is not False:  # a default of 0 is said too
            number = self.kind == DURATION and isinstance(self.default, (int, float))
            extra.append(f"default {self.default:g}s" if number else f"default {self.default}")
        return self.help + (f" ({'; '.join(extra)})" if extra else "")

    def parse(self, raw: Any, racks_total: int | None = None) -> Any:
        """A value as a person or a scenario gives it (text or JSON), as the holder takes it."""
        value = self._from_text(raw.strip(), racks_total) if isinstance(raw, str) else raw
        return self.check(value, racks_total)

    def _from_text(self, text: str, racks_total: int | None) -> Any:
        try:
            if self.kind == DURATION:
                return parse_duration(text)
            if self.kind == NUMBER:
                return float(text)
            if self.kind == INTEGER:
                return int(text)
            if self.kind == FLAG:
                return parse_bool(text)
        except (ValueError, SettingsError):
            raise ChaosError(f"{self.key}: not {_KIND_WORDS[self.kind]}: {text!r}") from None
        if self.kind == RACKS:
            return _racks_from_text(text, racks_total)
        if self.kind == TABLES:
            return [t.strip() for t in text.split(",") if t.strip()]
        return text

    def check(self, value: Any, racks_total: int | None = None) -> Any:
        """The value as the holder takes it, or a ChaosError that says what is wrong (strict)."""
        if self.kind in (DURATION, NUMBER, INTEGER):
            if not is_number(value, integer=self.kind == INTEGER):  # NaN and infinities too: they pass every range check
                raise ChaosError(f"{self.key} must be {_KIND_WORDS[self.kind]}, got {value!r}")
            assert isinstance(value, (int, float))
            hi = self.upper()
            too_low = self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo)
            if too_low or (hi is not None and value > hi):
                raise ChaosError(f"{self.key} must be {self.limits()}, got {value:g}")
            return float(value) if self.kind != INTEGER else int(value)
        if self.kind == FLAG:
            if not isinstance(value, bool):
                raise ChaosError(f"{self.key} must be true or false")
            return value
        if self.kind == CHOICE:
            if value not in self.choices:
                raise ChaosError(f"{self.key} must be one of {', '.join(self.choices)}, got {value!r}")
            return value
        if self.kind == RACKS:
            return _check_racks(value, racks_total)
        if self.kind == TABLES:
            if (
                not isinstance(value, list)
                or not value
                or len(set(map(repr, value))) != len(value)
                or not all(isinstance(t, str) and t for t in value)
            ):
                raise ChaosError(f"{self.key} must be a list of distinct table names")
            return value
        if not isinstance(value, str) or not TARGET_NAME.match(value):
            raise ChaosError(f"{self.key} must name a process: {roster.targets_text()}, got {value!r}")
        return value


_KIND_WORDS = {DURATION: "a duration (5s, 500ms, 2m)", NUMBER: "a number", INTEGER: "an integer", FLAG: "on/off"}


def _racks_from_text(text: str, racks_total: int | None) -> list[int]:
    """``3`` means three racks (0, 1, 2); ``2,5,7`` (or ``5,``) names them; ``all`` is every rack."""
    if text == "all":
        if racks_total is None:
            raise ChaosError("racks all: the number of racks is not known here; name them (0,1,2)")
        return list(range(racks_total))
    if "," not in text:
        try:
            count = int(text)
        except ValueError:
            raise ChaosError(f"racks must be a count or a comma list of rack numbers, got {text!r}") from None
        if count < 1:
            raise ChaosError(f"racks {count}: a count of racks is at least 1 (or name them: 0,1,2)")
        if racks_total is not None and count > racks_total:
            raise ChaosError(f"racks {count}: the lab has {racks_total} racks")
        return list(range(count))
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ChaosError(f"racks must be rack numbers, got {text!r}") from None


def _check_racks(value: Any, racks_total: int | None) -> list[int]:
    given = [whole(r) for r in value] if isinstance(value, list) else []  # 1.0 is rack 1, as the schema says
    numbers = [r for r in given if r is not None and r >= 0]
    if not numbers or len(numbers) != len(given) or len(set(numbers)) != len(numbers):
        raise ChaosError("racks must be a list of distinct rack numbers")
    if racks_total is not None and any(r >= racks_total for r in numbers):
        raise ChaosError(f"racks {','.join(map(str, numbers))}: racks are numbered 0..{racks_total - 1}")
    return numbers


@dataclass(frozen=True)
class Fault:
    name: str
    holder: str
    help: str
    emulates: str
    reverts: str
    args: tuple[Arg, ...]
    lease_s: Callable[[dict[str, Any]], float] | None = None  # the lease's length, from the other args
    checks: tuple[tuple[Callable[[dict[str, Any]], bool], str], ...] = ()
    move: bool = False  # a responder's move: journaled and scored in game days
    wire: dict[str, Arg] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "wire", {a.name: a for a in self.args if not a.client})

    def arg(self, key: str) -> Arg:
        return next(a for a in self.args if a.key == key)


@dataclass(frozen=True)
class Request:
    fault: Fault
    body: dict[str, Any]  # what the holder receives
    client: dict[str, Any]  # what the asking command keeps (e.g. its timeout)


def request(name: str, values: Mapping[str, Any], racks_total: int | None = None) -> Request:
    """The request for fault ``name`` from argument keys and values (text or JSON); a missing
    argument takes its default; anything wrong raises ChaosError naming the argument."""
    fault = find(name)
    unknown = sorted(set(values) - {a.key for a in fault.args})
    if unknown:
        raise ChaosError(f"{name} takes no {', '.join(unknown)}; it takes {', '.join(a.key for a in fault.args)}")
    body: dict[str, Any] = {"fault": name}
    client: dict[str, Any] = {}
    for arg in fault.args:
        raw = values.get(arg.key)
        if raw is None:
            if arg.required:
                raise ChaosError(f"{name}: {arg.flag} is required ({arg.help})")
            raw = arg.default
        if raw is not None:
            (client if arg.client else body)[arg.name] = arg.parse(raw, racks_total)
    return Request(fault, _finish(fault, body), client)


def check(name: str, body: Mapping[str, Any], racks_total: int | None = None) -> dict[str, Any]:
    """A holder's check of a request body it received (JSON values only); returns the body with
    every default filled in."""
    fault = find(name)
    allowed = {"fault", "duration_s", *fault.wire}
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise ChaosError(f"{name} takes no {', '.join(unknown)}; it takes {', '.join(sorted(allowed - {'fault'}))}")
    out: dict[str, Any] = {"fault": name}
    for arg in fault.wire.values():
        if arg.name in body:
            out[arg.name] = arg.check(body[arg.name], racks_total)
        elif arg.required:
            raise ChaosError(f"{name}: {arg.name} is required ({arg.help})")
        elif arg.default is not None:
            out[arg.name] = arg.parse(arg.default, racks_total)
    if fault.lease_s is not None and "duration_s" in body:
        duration = body["duration_s"]
        if isinstance(duration, bool) or not isinstance(duration, (int, float)):
            raise ChaosError(f"{name}: duration_s must be a number of seconds")
        out["duration_s"] = duration  # its range is checked by the lease book like any other lease
    return _finish(fault, out)


def _finish(fault: Fault, body: dict[str, Any]) -> dict[str, Any]:
    if fault.lease_s is not None and "duration_s" not in body:
        body["duration_s"] = fault.lease_s(body)
    for holds, message in fault.checks:
        if not holds(body):
            raise ChaosError(f"{fault.name}: {message}")
    return body


def find(name: str) -> Fault:
    if name not in FAULTS:
        raise ChaosError(f"unknown fault {name!r}; known: {', '.join(FAULTS)}")
    return FAULTS[name]


def names(holder: str) -> tuple[str, ...]:
    """The faults one process holds."""
    return tuple(f.name for f in FAULTS.values() if f.holder == holder)


def timed_keys() -> set[str]:
    """Argument keys that are durations: a scenario run at speed X divides them by X (not the
    settings a deploy sets: the racks take those in profile time and scale them themselves)."""
    return {a.key for f in FAULTS.values() for a in f.args if a.kind == DURATION and a.name not in DEPLOYED}


# -- the catalog --------------------------------------------------------------------------------

DURATION_ARG = Arg(
    "duration_s", DURATION, "how long the lease lasts, e.g. 5s, 500ms, 2m", lo=0, lo_open=True, hi=max_duration_s, required=True
)
RACKS_ARG = Arg("racks", RACKS, "how many racks (3: racks 0,1,2), which (2,5,7), or one alone (3,: rack 3)", default="3")
TARGET_ARG = Arg("target", TARGET, f"the process: {roster.targets_text()}", required=True)


def _staged_lease_s(body: dict[str, Any]) -> float:
    return max(0.001, float((body["staged"] - 1) * body["every_s"]))


_FAULTS = (
    Fault(
        "blip",
        "linkproxy",
        "cut racks off from the metadata service, both ways",
        "2:19 AM: a brief network disruption on a portion of the storage servers",
        "the link heals, resetting nothing: each node renews as its rack sees the link up, or gives up its attempt on the cut (the herd)",
        (RACKS_ARG, DURATION_ARG),
    ),
    Fault(
        "partition",
        "linkproxy",
        "cut racks off from the metadata service, both ways or one",
        "a network partition, by direction",
        "the link heals, as after a blip",
        (
            RACKS_ARG,
            Arg("direction", CHOICE, "which traffic is dropped", default="both", choices=("both", "to-metadata", "from-metadata")),
            DURATION_ARG,
        ),
    ),
    Fault(
        "latency",
        "linkproxy",
        "delay the traffic on racks' links",
        "a slow network",
        "the delays stop",
        (
            RACKS_ARG,
            Arg("delay_s", DURATION, "added delay, e.g. 200ms", lo=0, hi=60, required=True),
            Arg("jitter_s", DURATION, "+/- jitter, e.g. 50ms", lo=0, hi=60, default=0.0),
            DURATION_ARG,
        ),
    ),
    Fault(
        "loss",
        "linkproxy",
        "lose segments on racks' links (TCP delivers them a retransmission timeout later)",
        "a lossy network",
        "the loss stops",
        (RACKS_ARG, Arg("probability", NUMBER, "chance a segment is lost", lo=0, hi=1, required=True), DURATION_ARG),
    ),
    Fault(
        "freeze",
        "supervisor",
        "freeze a process (SIGSTOP): it stops answering (not the metadata service's pause, an operator's move)",
        "a server that stops answering but keeps its connections",
        "the process is continued (SIGCONT)",
        (TARGET_ARG, DURATION_ARG),
    ),
    Fault(
        "kill",
        "supervisor",
        "kill a process (SIGKILL)",
        "a storage server or the metadata service crashing",
        "the process is started again",
        (TARGET_ARG, DURATION_ARG),
    ),
    Fault(
        "isolate",
        "linkproxy",
        "cut a service off from racks, both ways (its path to the metadata service stays up)",
        "a service losing its path to the database that holds its control plane",
        "the path heals; the service's next requests go through",
        (
            Arg("target", CHOICE, "the service", required=True, choices=SERVICES),
            Arg("racks", RACKS, "how many racks (3: racks 0,1,2), which (2,5,7), one alone (3,: rack 3), or all", default="all"),
            DURATION_ARG,
        ),
    ),
    Fault(
        "pause-metadata",
        "metadata",
        "pause membership requests: renewals are turned away at the door",
        "5:06 AM: AWS pauses requests to the metadata service",
        "the pause ends and everyone is readmitted at once (the herd), unless an operator resumed first",
        (DURATION_ARG,),
        move=True,
    ),
    Fault(
        "resume-metadata",
        "metadata",
        "readmit the fleet now: all at once, or in steps",
        "the readmission after the pause",
        "nothing to undo: after the last step everyone is in",
        (
            Arg("staged", INTEGER, "readmit in this many steps (1: all at once)", lo=1, hi=1000, default=1),
            Arg("every_s", DURATION, "time between steps, e.g. 10s", lo=0, hi=3600, default=0.0),
        ),
        lease_s=_staged_lease_s,
        checks=((lambda b: b["duration_s"] <= max_duration_s(), "the last step must come within the fault limit"),),
        move=True,
    ),
    Fault(
        "capacity",
        "metadata",
        "set the metadata service's virtual cores, through the shared admin path",
        "attempts to add metadata-service capacity fail: the admin path shares the overloaded service",
        "the cores go back to what they were before the lease",
        (
            Arg("cores", NUMBER, "virtual cores while the lease lasts; the profile has 40", lo=CORES[0], hi=CORES[1], required=True),
            Arg("break_glass", FLAG, "go around the overloaded admin path (the path AWS did not have)", default=False),
            Arg("timeout_s", DURATION, "how long the admin request may take", lo=0, lo_open=True, hi=600, default="2s", client=True),
            DURATION_ARG,
        ),
        move=True,
    ),
    Fault(
        "gsi-growth",
        "metadata",
        "customers adopt GSIs on these tables: the large instances holding their indexes grow",
        "the months before: GSI adoption erodes the margin, unseen unless membership size is watched",
        "the GSIs the lease added go",
        (
            Arg("tables", TABLES, "comma list of tables (the profile's indexed ones by default)", default="catalog,clickstream"),
            Arg("factor", NUMBER, "growth of those tables' entries", lo=1, hi=21, default=2.0),
            Arg("ramp_s", DURATION, "spread the growth over this long", lo=0, hi=3600, default=0.0),
            DURATION_ARG,
        ),
        checks=((lambda b: b["ramp_s"] <= b["duration_s"], "ramp must not be longer than duration"),),
    ),
    Fault(
        "stuck-partition",
        "metadata",
        "the Monday tail: the metadata partition behind these tables stops taking its share",
        "21 September: one metadata partition does not take its share; a few customers fail",
        "the tables come back into the memberships",
        (Arg("tables", TABLES, "comma list of tables (metric-groups is ~0.2% of traffic)", default="metric-groups"), DURATION_ARG),
    ),
)
POLICIES = tuple(p + w for w in ("", *(f"+{w}" for w in RETRY_WRAPPERS)) for p in RETRY_POLICIES)
DEPLOYED = {"retry_policy", "allowance_s", "renewal_period_s"}  # what a deploy changes on every rack

_DEPLOY = Fault(
    "deploy",
    "supervisor",
    "deploy a retry policy, an allowance or a renewal period to the running fleet, rack by rack",
    "fixes rolled out into a storm instead of at start-up: AWS's (a longer allowance, fewer renewals) or backoff (the analysis's reading)",
    "its values stop being held: each rack runs what the other live deploys hold, or its start-up settings (in whatever order leases end)",
    (
        Arg("retry_policy", CHOICE, "the renewal retry policy to deploy", choices=POLICIES),
        Arg("allowance_s", DURATION, "the renewal timeout to deploy, e.g. 2s", lo=0.01, hi=600),
        Arg("renewal_period_s", DURATION, "the renewal period to deploy, e.g. 20s", lo=0.05, hi=3600),
        Arg("staged", INTEGER, "roll it out in this many steps, rack by rack (1: every rack at once)", lo=1, hi=1000, default=1),
        Arg("every_s", DURATION, "time between steps, e.g. 10s", lo=0, hi=3600, default=0.0),
        DURATION_ARG,
    ),
    checks=(
        (
            lambda b: any(k in b for k in ("retry_policy", "allowance_s", "renewal_period_s")),
            "give --retry-policy, --allowance or --renewal-period",
        ),
        (lambda b: (b["staged"] - 1) * b["every_s"] < b["duration_s"], "the rollout's last step must come before the lease ends"),
    ),
    move=True,
)

# The aws-2025-10 profile: the database's endpoint as the lease manager resolves it, and the
# moves its operators made on 20 October 2025 (docs/incidents/aws-2025-10.md).
_LEASES = (
    Fault(
        "dns-empty",
        "leases",
        "empty the database endpoint's DNS record: the lease manager's new connections to the storage racks fail "
        "to resolve, the ones open keep working",
        "23:48 PDT, 19 October 2025: DynamoDB's regional endpoint left with an empty record by its DNS automation",
        "the record is back (every lease of this fault ended: `stormlab ops repair-endpoint` ends them by hand)",
        (DURATION_ARG,),
    ),
    Fault(
        "throttle-work",
        "leases",
        "throttle the new work each lease manager host admits (leases to establish, launches; checks of held leases pass)",
        "04:14 PDT, 20 October 2025: EC2's engineers throttle incoming work",
        "the throttle is lifted: new work enters the queues as fast as it comes",
        (
            Arg(
                "rate",
                NUMBER,
                "items a host admits a second, e.g. 10 (a host establishes ~20 leases a second)",
                lo=0.1,
                hi=1e6,
                required=True,
            ),
            DURATION_ARG,
        ),
        move=True,
    ),
    Fault(
        "restart-host",
        "leases",
        "restart one lease manager host: its queue and the work its workers are on are dropped (its leases stay)",
        "04:14 PDT, 20 October 2025: selective restarts of DWFM hosts",
        "nothing: a restart is done when it is made (the lease only journals it)",
        (Arg("host", INTEGER, "the host to restart (0 to lease_hosts - 1)", lo=0, hi=63, required=True), DURATION_ARG),
        move=True,
    ),
    Fault(
        "queue-limit",
        "leases",
        "refuse new work at a host whose queue holds this many items",
        "AWS's fix after 2025: throttling by queue size",
        "the queues take work at any length again, unless the lab started with lease_queue_limit",
        (Arg("limit", INTEGER, "items a host's queue may hold, e.g. 300", lo=1, hi=10_000_000, required=True), DURATION_ARG),
        move=True,
    ),
)

_FIX = "a fix AWS announced, switched on in the running service (a responder's move)"
_FIXES = (  # the cascade's fixes as moves: each a lease on its service, like the database's moves
    Fault(
        "stale-cache",
        "queues",
        "serve send and receive from stale queue metadata when the table cannot be reached",
        _FIX + ": SQS keeps serving from its cached queue metadata",
        "calls whose queue metadata cannot be refreshed fail again, unless the service started with the fix",
        (DURATION_ARG,),
        move=True,
    ),
    Fault(
        "scale-workers",
        "scaling",
        "drain the activity backlog with this many workers, each owning a share of the groups",
        _FIX + ": more Auto Scaling workers, the backlog partitioned across them",
        "the workers go back to the number the service started with (their backlog is shared out again)",
        (Arg("workers", INTEGER, "workers draining the backlog", lo=1, hi=64, required=True), DURATION_ARG),
        move=True,
    ),
    Fault(
        "prune-activities",
        "scaling",
        "drop activities a newer one for the same group supersedes",
        _FIX + ": Auto Scaling prunes superseded activities",
        "superseded activities stay in the backlog again, unless the service started with the fix",
        (DURATION_ARG,),
        move=True,
    ),
    Fault(
        "write-through",
        "metrics",
        "refresh only the groups seen lately, and serve the last copy when a refresh fails",
        _FIX + ": CloudWatch keeps its enrichment and namespaces from the last good copy",
        "every group is refreshed again and a failed refresh leaves a gap, unless the service started with the fix",
        (DURATION_ARG,),
        move=True,
    ),
    Fault(
        "short-timeout",
        "console",
        "give the login's non-critical lookup 0.1 s, then log in anyway",
        _FIX + ": the Console's login stops waiting on its sessions lookup",
        "logins wait for the lookup's long timeout again, unless the service started with the fix",
        (DURATION_ARG,),
        move=True,
    ),
)
FAULTS: dict[str, Fault] = {f.name: f for f in (*_FAULTS, _DEPLOY, *_FIXES, *_LEASES)}
FIXES = tuple(f.name for f in _FIXES if not f.wire.keys() - {"duration_s"})  # the switches: `ops enable FIX`
MOVES = tuple(f.name for f in FAULTS.values() if f.move)


def body_schema(names: tuple[str, ...], racks_total: int | None = None) -> dict[str, Any]:
    """The JSON Schema of a request for one of these faults, as a holder checks it (a holder
    refuses anything this schema refuses; the cross-argument checks are the holder's alone)."""
    return {"oneOf": [_fault_schema(FAULTS[n], racks_total) for n in names]}


def _fault_schema(fault: Fault, racks_total: int | None) -> dict[str, Any]:
    props: dict[str, Any] = {"fault": {"const": fault.name}}
    for arg in fault.wire.values():
        props[arg.name] = arg_schema(arg, racks_total)
    if "duration_s" not in props:  # a lease with its own length may still be given one
        props["duration_s"] = arg_schema(DURATION_ARG, racks_total)
    required = ["fault", *(a.name for a in fault.wire.values() if a.required)]
    return {"type": "object", "title": fault.name, "required": required, "properties": props, "additionalProperties": False}


def arg_schema(arg: Arg, racks_total: int | None = None) -> dict[str, Any]:
    """An argument's JSON Schema: its kind, range and choices, as :meth:`Arg.check` takes them."""
    if arg.kind in (DURATION, NUMBER, INTEGER):
        out: dict[str, Any] = {"type": "integer" if arg.kind == INTEGER else "number", "description": arg.help}
        if arg.lo is not None:
            out["exclusiveMinimum" if arg.lo_open else "minimum"] = arg.lo
        if arg.upper() is not None:
            out["maximum"] = arg.upper()
        return out
    if arg.kind == FLAG:
        return {"type": "boolean", "description": arg.help}
    if arg.kind == CHOICE:
        return {"enum": list(arg.choices), "description": arg.help}
    if arg.kind == RACKS:
        rack = {"type": "integer", "minimum": 0, **({"maximum": racks_total - 1} if racks_total else {})}
        return {"type": "array", "items": rack, "minItems": 1, "uniqueItems": True, "description": "rack numbers"}
    if arg.kind == TABLES:
        return {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "uniqueItems": True, "description": arg.help}
    return {"type": "string", "pattern": TARGET_NAME.pattern, "description": arg.help}


def markdown() -> str:
    """The arguments table of docs/chaos.md (a test keeps the two the same)."""
    rows = ["| lease | what it is | held by | arguments |", "| --- | --- | --- | --- |"]
    for f in FAULTS.values():
        args = "; ".join(f"`{a.flag}`{' (required)' if a.required else ''}: {a.describe()}" for a in f.args) or "none"
        kind = "a move (`stormlab ops`)" if f.move else "a fault (`stormlab chaos`)"
        rows.append(f"| `{f.name}` | {kind} | {f.holder} | {args} |")
    return "\n".join(rows)


if __name__ == "__main__":  # `python -m chaos.catalog`: the table docs/chaos.md shows
    print(markdown())
