"""Lab settings: one frozen dataclass, loaded from ``STORMLAB_*`` variables and CLI flags.

Every duration is a setting, so a profile can be sped up or slowed down as a whole. The
defaults are the calibrated ``dynamodb-2015`` profile (README, "The 2015 profile and its
counterfactuals"): time runs about ``TIME_COMPRESSION`` (50) times faster than on 20 September
2015.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, overload

from stormcore import incidents
from stormcore.documents import finite
from stormcore.errors import UsageError

ENV_PREFIX = "STORMLAB_"
RETRY_POLICIES = ("immediate", "exponential", "full-jitter", "decorrelated-jitter")
RETRY_WRAPPERS = ("budget", "adaptive", "breaker")  # a retry budget, client-side adaptive throttling, a rack's circuit breaker
USER_POLICIES = ("python:", "file:", "entry:")  # a user's policy, as stormcore.policies.resolve writes it
FILE_POLICIES = ("python:", "file:")  # a user's file: loading it runs the code in it (a policy file may name adapters)
ABANDONED_WORK = ("cancel", "continue")
LINK_CUTS = ("auto", "proxy", "kernel", "namespace")  # who carries and cuts the racks' links in a local lab (auto: the launcher chooses)
INCIDENTS = incidents.NAMES  # the stories a lab tells (stormcore/incidents/, docs/incidents/)
RENEWAL_CLIENTS = ("protocol", "session", "half")  # the racks' renewal client; half: even racks protocol, odd session (a side-by-side)
TIME_COMPRESSION = 50.0  # the 2015 profile's clock against 2015's: a 10 s renewal period stands for ~8 min
SPEEDS = (0.05, 20.0)  # time dilation: --speed, STORMLAB_SPEED
CORES = (0.1, 100_000.0)  # the metadata service's virtual cores: at start-up, by `capacity`, by the admin API


DEFAULT_MAX_FAULT_S = 600.0


def max_duration_s() -> float:
    """The longest fault lease allowed: ``STORMLAB_MAX_FAULT_S``, 600 s unless set."""
    return float(os.environ.get(ENV_PREFIX + "MAX_FAULT_S", DEFAULT_MAX_FAULT_S))


SET_HELP = (
    "change one setting, e.g. fix_stale_cache=on or allowance_s=2s (repeatable; "
    "`python -m stormcore.settings` lists them all with their ranges) (default: the profile's values)"
)


class SettingsError(UsageError):
    """A setting has a value the lab cannot run with (exit code 2)."""


def deployable_policy(name: str) -> str:
    """A retry policy that a request may deploy to running racks: the lab's own, or an entry point
    an installed package registered. Never a file: loading one runs its code, and whoever holds the
    lab token is not the person whose file it is. A user's file is loaded only by the command that
    person runs on it (``stormlab up --retry-policy``, ``stormlab certify``), never from a request."""
    if name.startswith(FILE_POLICIES):
        raise SettingsError(
            f"a deploy names the lab's retry policies or a registered entry point (entry:NAME), not a file ({name[:80]!r}): "
            "start the lab with your own file instead (stormlab up --retry-policy FILE)"
        )
    return name


def _retry_policy_named(name: str) -> bool:
    """A retry policy's name the racks (and the lease manager's hosts) can build: one of the lab's,
    optionally wrapped (``full-jitter+budget``), ``budget``, or a user's spec (``python:FILE:NAME`` …)."""
    base, _, wrapper = name.partition("+")
    user = name.startswith(USER_POLICIES) and len(name.partition(":")[2]) > 0
    return (base in RETRY_POLICIES and wrapper in ("", *RETRY_WRAPPERS)) or name == "budget" or user


# A retry policy's setting, and the one its own per-attempt timeout sets: the racks' allowance, or
# the lease manager's item timeout (the command line and certify read it).
POLICY_TIMEOUTS = {"retry_policy": "allowance_s", "lease_retry_policy": "lease_timeout_s"}

MAX_CELLS = 16  # metadata-service instances a lab may run


@dataclass(frozen=True)
class Pace:
    """Profile time against the wall clock at a run's speed: the one conversion between them.

    At speed X a profile second lasts 1/X wall seconds, and whatever happens per second (requests,
    CPU work) happens X times as often per wall second. Every duration a person or a scenario
    gives is profile time; every clock a process reads is the wall's."""

    speed: float = 1.0

    @overload
    def wall(self, profile_s: float) -> float: ...
    @overload
    def wall(self, profile_s: None) -> None: ...
    def wall(self, profile_s: float | None) -> float | None:
        """A profile duration, in wall seconds."""
        return None if profile_s is None else profile_s / self.speed

    @overload
    def profile(self, wall_s: float) -> float: ...
    @overload
    def profile(self, wall_s: None) -> None: ...
    def profile(self, wall_s: float | None) -> float | None:
        """A wall duration, in profile seconds."""
        return None if wall_s is None else wall_s * self.speed

    def per_wall(self, per_profile_s: float) -> float:
        """A rate (or CPU cores) at speed 1, as it runs at this speed."""
        return per_profile_s * self.speed

    def per_profile(self, per_wall_s: float) -> float:
        """A rate (or CPU cores) measured at this speed, as it would be at speed 1."""
        return per_wall_s / self.speed


def setting(default: Any, doc: str, lo: float | None = None, hi: float | None = None, choices: tuple[str, ...] = ()) -> Any:
    """A settings field: its default, one line of doc, and its range or choices."""
    meta: dict[str, Any] = {"doc": doc}
    if lo is not None:
        meta |= {"min": lo, "max": hi}
    if choices:
        meta["choices"] = choices
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class LabSettings:
    racks: int = setting(10, "racks (one OS process or pod each)", 1, 128)
    nodes_per_rack: int = setting(100, "virtual storage nodes per rack", 1, 1000)
    small_entries: int = setting(20, "table partitions of a standard instance (its membership entries)", 1, 10_000)
    big_base_entries: int = setting(46, "table partitions of a large instance (its GSI partitions come on top)", 1, 10_000)
    big_gsis: int = setting(2, "GSIs per indexed table when gsi_growth is on (each on the large instances)", 0, 20)
    big_every: int = setting(20, "out of every big_every nodes ...", 1, 1000)
    big_per_every: int = setting(3, "... this many are large instances, which hold the GSIs (3/20 = 15%)", 0, 1000)
    gsi_growth: bool = setting(True, "start with the GSIs customers adopted in 2015 (off: pre-GSI sizes)")
    renewal_period_s: float = setting(10.0, "fixed-rate membership renewal period", 0.05, 3600)
    renewal_jitter: float = setting(0.05, "+/- fraction of the period each renewal slot moves (does not accumulate)", 0, 0.5)
    allowance_s: float = setting(1.0, "renewal timeout: a node without its membership by then disqualifies itself", 0.01, 600)
    capacity_cores: float = setting(40.0, "metadata virtual cores (processor sharing), shared out among the cells", CORES[0], CORES[1])
    cells: int = setting(1, "metadata-service instances, each serving a contiguous share of the racks (AWS's long-term fix)", 1, MAX_CELLS)
    cost_base_s: float = setting(0.005, "core-seconds per membership request", 0, 60)
    cost_per_entry_s: float = setting(0.0045, "core-seconds per membership entry", 0, 60)
    admin_cost_s: float = setting(0.5, "core-seconds per admin request on the shared path", 0, 600)
    abandoned_work: str = setting("cancel", "cancel or continue the work of a request whose client gave up", choices=ABANDONED_WORK)
    abandoned_cap: int = setting(10_000, "continue: abandoned requests kept running at once; past it the oldest is dropped", 0, 10_000_000)
    retry_policy: str = setting(
        "immediate",
        "immediate, exponential, full-jitter, decorrelated-jitter; +budget, +adaptive (adaptive throttling) or +breaker (circuit breaker)",
    )
    retry_base_s: float = setting(0.5, "first backoff step of the backoff policies", 0, 600)
    retry_cap_s: float = setting(10.0, "longest backoff of the backoff policies", 0, 3600)
    budget_tokens: float = setting(10.0, "retry budget: bucket size per rack (gRPC retry throttling)", 1, 1e6)
    budget_ratio: float = setting(0.1, "retry budget: tokens a success puts back", 0, 1e6)
    breaker_failures: int = setting(10, "+breaker: misses in a row across a rack that open its circuit breaker", 1, 1_000_000)
    breaker_open_s: float = setting(5.0, "+breaker: how long an open breaker keeps the rack's renewals from being sent", 0.01, 3600)
    # Server-side admission control on the metadata service (0 / off: 2015, every request is taken).
    admission_limit: int = setting(
        0, "membership requests in flight past which the metadata service answers 503 at once (0: no limit)", 0, 1_000_000
    )
    admission_deadline: bool = setting(False, "shed at the door a renewal that cannot finish within its allowance at the current load")
    admin_apart: bool = setting(False, "admin requests (capacity, GSIs) run apart from the renewals' CPU, as break-glass always did")
    probe_interval_s: float = setting(0.2, "how often a rack probes its link to the metadata service", 0.01, 60)
    probe_timeout_s: float = setting(0.5, "a probe slower than this counts as a failure", 0.01, 60)
    probe_failures: int = setting(2, "consecutive failed probes that mean the link is down", 1, 100)
    link_cut: str = setting(
        "auto",
        "who carries and cuts the racks' links in a local lab: auto (the kernel where the lab may: as root, else in a "
        "namespace of the lab's own, else the link proxy), proxy (the link proxy, no root needed), kernel (iptables rules, "
        "root: the proxy off the renewal path; a latency fault takes its links through the proxy for its life) or "
        "namespace (the same rules in a user and network namespace of the lab's own: no root needed, where unprivileged "
        "user namespaces are allowed)",
        choices=LINK_CUTS,
    )
    renewal_client: str = setting(
        "protocol",
        "the racks' renewal client: protocol (plain HTTP/1.1, close to the machine), session (a general aiohttp client), "
        "half (even racks protocol, odd racks session: both in one lab, for comparing them)",
        choices=RENEWAL_CLIENTS,
    )
    customer_rate: float = setting(200.0, "customer requests per second from loadgen", 0, 100_000)
    customer_timeout_s: float = setting(1.0, "customer request timeout", 0.01, 600)
    seed: int = setting(2015, "seed for every random choice (jitter, traffic)", 0, 2**63)
    # The cascade: the services that keep their control planes in the lab's tables, and AWS's fixes.
    cascade_rate: float = setting(4.0, "requests per second each dependent service's own clients make", 0, 1000)
    cascade_timeout_s: float = setting(1.0, "how long a dependent service waits for a row of the lab's tables", 0.01, 600)
    queue_cache_ttl_s: float = setting(5.0, "queues: cached queue metadata must be refreshed from its table within this", 0.01, 3600)
    fix_stale_cache: bool = setting(False, "queues (AWS's fix): keep serving send/receive from stale queue metadata")
    activity_rate: float = setting(1.0, "scaling: launch/terminate activities its scheduler queues per second", 0, 1000)
    activity_work_s: float = setting(0.5, "scaling: a worker's time to launch or terminate an instance", 0, 60)
    scaling_workers: int = setting(1, "scaling (AWS's fix: more): workers draining the activity backlog", 1, 64)
    fix_prune_activities: bool = setting(False, "scaling (AWS's fix): drop activities a newer one for the group supersedes")
    metric_cache_ttl_s: float = setting(5.0, "metrics: cached namespaces and group enrichment must be refreshed within this", 0.01, 3600)
    fix_write_through: bool = setting(False, "metrics (AWS's fix): refresh only the groups seen lately; serve the last copy")
    login_lookup_timeout_s: float = setting(1.5, "console: how long a login waits for its non-critical lookup", 0.01, 600)
    fix_short_timeout: bool = setting(False, "console (AWS's fix): give the lookup 0.1 s, then log in anyway")
    incident: str = setting(
        incidents.FIRST.name,
        "the incident the lab tells: which services run beside the storage fleet by default (--cascade all)",
        choices=INCIDENTS,
    )
    # The aws-2025-10 profile: a lease manager (EC2's DWFM) holding a lease on each droplet of a fleet.
    lease_droplets: int = setting(5000, "droplets (servers) the lease manager holds a lease on", 1, 200_000)
    lease_hosts: int = setting(4, "lease manager hosts, each holding the leases of its share of the droplets", 1, 64)
    lease_host_cores: float = setting(2.0, "a lease manager host's virtual cores (processor sharing among its workers)", 0.1, 1000)
    lease_workers: int = setting(16, "a lease manager host's workers: the items on its CPU at once", 1, 10_000)
    lease_check_period_s: float = setting(10.0, "how often each droplet asks for its check (or for a lease, holding none)", 0.05, 3600)
    lease_ttl_s: float = setting(60.0, "a lease lasts this long past its last successful check", 0.1, 36_000)
    lease_timeout_s: float = setting(
        20.0, "a work item finished this long after it was queued is thrown away and queued again", 0.01, 36_000
    )
    lease_check_cost_s: float = setting(0.002, "core-seconds of a check (after its database read)", 0, 60)
    lease_establish_cost_s: float = setting(0.1, "core-seconds to establish a lease (after its database write)", 0, 600)
    lease_admit_rate: float = setting(
        0.0, "throttle: items a second a host admits to its queue, launches included (0: no throttle)", 0, 1_000_000
    )
    lease_queue_limit: int = setting(
        0, "AWS's fix, throttling by queue size: nothing enters a host's queue at this length (0: no limit)", 0, 10_000_000
    )
    lease_retry_policy: str = setting(
        "",
        "what a host does with work that timed out: empty, queued again at once (DWFM); or a retry policy (retry_policy's "
        "names, FILE.py:NAME, a policy file) whose delay holds it back and whose None drops it (its droplet asks again)",
    )
    launch_rate: float = setting(20.0, "customers' instance launches a second (each needs a droplet with an active lease)", 0, 100_000)
    # Time dilation: the other settings are this run's (durations divided, rates multiplied by
    # speed); in the environment (to_env/from_env) they travel as the profile's, with the speed.
    speed: float = setting(1.0, "time dilation: the profile runs this many times faster (below 1: slow motion)", SPEEDS[0], SPEEDS[1])

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise SettingsError(f"{f.name} must be a number, got {value}")
            lo, hi = f.metadata.get("min"), f.metadata.get("max")
            if lo is not None and not lo <= value <= hi:
                raise SettingsError(f"{f.name} must be between {lo} and {hi}, got {value}")
            if "choices" in f.metadata and value not in f.metadata["choices"]:
                raise SettingsError(f"{f.name} must be one of {', '.join(f.metadata['choices'])}, got {value!r}")
        for name, policy in (("retry_policy", self.retry_policy), ("lease_retry_policy", self.lease_retry_policy or "immediate")):
            if not _retry_policy_named(policy):
                raise SettingsError(
                    f"{name} must be one of {', '.join(RETRY_POLICIES)} (optionally +budget, +adaptive or +breaker), "
                    f"or a policy of your own (FILE.py:NAME, a policy file; `stormlab certify --help`), got {policy!r}"
                )
        if self.cells > self.racks:
            raise SettingsError(f"cells ({self.cells}) cannot exceed racks ({self.racks}): every cell serves at least one rack")
        if self.big_per_every > self.big_every:
            raise SettingsError("big_per_every cannot exceed big_every")

    @property
    def nodes_total(self) -> int:
        return self.racks * self.nodes_per_rack

    @property
    def pace(self) -> Pace:
        """These settings' profile time against the wall clock."""
        return Pace(self.speed)

    def sped_up(self, factor: float) -> LabSettings:
        """The same profile with time running ``factor`` times faster: every duration and every
        cost (core-seconds) divided by ``factor``, every rate multiplied by it, so the storm keeps
        its shape (``factor`` below 1 is slow motion: time dilation). ``speed`` records the product."""
        if factor <= 0:
            raise SettingsError("a time factor must be positive")
        return self.replace(**_scaled(self, factor), speed=self.speed * factor)

    def profile_time(self) -> LabSettings:
        """These settings at speed 1: the profile they were made from."""
        return self.replace(**_scaled(self, 1 / self.speed), speed=1.0) if self.speed != 1 else self

    def replace(self, **changes: Any) -> LabSettings:
        return dataclasses.replace(self, **changes)

    def deployed(self, changes: Mapping[str, Any]) -> LabSettings:
        """These settings with a live deploy's changes, given in profile time as people give
        them (durations scaled to this run's speed); SettingsError for a value out of range."""
        return self.replace(**{k: (self.pace.wall(float(v)) if k.endswith("_s") else v) for k, v in changes.items()})

    def with_text(self, pairs: list[str]) -> LabSettings:
        """These settings changed by ``KEY=VALUE`` pairs as people type them (``fix_stale_cache=on``,
        ``allowance_s=2s``); an unknown key or a bad value raises SettingsError."""
        by_name = {f.name: f for f in fields(self)}
        changes: dict[str, Any] = {}
        for pair in pairs:
            key, sep, raw = pair.partition("=")
            key = key.strip().replace("-", "_")
            if not sep or not raw.strip():
                raise SettingsError(f"--set takes KEY=VALUE, got {pair!r}")
            if key not in by_name:
                raise SettingsError(f"no setting {key!r}; settings: {', '.join(by_name)}")
            changes[key] = parse_value(by_name[key], raw.strip())
        return self.replace(**changes)

    def to_env(self) -> dict[str, str]:
        """The settings as ``STORMLAB_*`` variables, the way child processes and compose get them:
        the profile's values and ``STORMLAB_SPEED``, which :meth:`from_env` applies."""
        profile = self.profile_time()
        env = {ENV_PREFIX + f.name.upper(): _format(getattr(profile, f.name)) for f in fields(self)}
        return env | {ENV_PREFIX + "SPEED": _format(self.speed)}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> LabSettings:
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = environ.get(ENV_PREFIX + f.name.upper())
            if raw is not None:
                values[f.name] = parse_value(f, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        speed = values.pop("speed", 1.0)
        profile = cls(**values)
        return profile.sped_up(speed) if speed != 1 else profile


DEFAULT_PROFILE = incidents.FIRST.name
PROFILES: dict[str, LabSettings] = {i.name: LabSettings(**i.profile) for i in incidents.REGISTERED}  # each incident's (its declaration's)


def profile(name: str) -> LabSettings:
    try:
        return PROFILES[name]
    except KeyError:
        raise SettingsError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}") from None


_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*(ms|s|m|h)?\s*$", re.IGNORECASE)
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_PART = re.compile(r"([0-9]*\.?[0-9]+)(ms|h|m|s)")
_ORDER = ("h", "m", "s", "ms")


def parse_duration(text: str) -> float:
    """``"5s"``, ``"500ms"``, ``"2m"``, a bare number of seconds, or a compound of units from the
    largest down, as pumba and Chaos Mesh take it: ``"1m30s"``, ``"1h2m3s"``, ``"2s500ms"``."""
    match = _DURATION.match(str(text))
    if match:
        unit = match.group(2).lower() if match.group(2) else None
        seconds = float(match.group(1)) * _UNIT_S[unit]
    else:
        seconds = _compound(str(text))
    if not math.isfinite(seconds):
        raise SettingsError(f"not a duration: {text!r} (too long to be one)")
    return seconds


def _compound(text: str) -> float:
    """``1m30s``: two or more number-unit parts, each unit smaller than the one before."""
    body = text.strip().lower()
    parts = _PART.findall(body)
    order = [_ORDER.index(unit) for _, unit in parts]
    if len(parts) < 2 or "".join(n + u for n, u in parts) != body or order != sorted(set(order)):
        raise SettingsError(f"not a duration: {text!r} (try 5s, 500ms, 2m, 1m30s)")
    return sum(float(number) * _UNIT_S[unit] for number, unit in parts)


def parse_bool(text: str) -> bool:
    lowered = str(text).strip().lower()
    if lowered in ("1", "true", "on", "yes"):
        return True
    if lowered in ("0", "false", "off", "no"):
        return False
    raise SettingsError(f"not on/off: {text!r}")


def parse_value(f: dataclasses.Field[Any], raw: str) -> Any:
    try:
        if f.type in ("bool", bool):
            return parse_bool(raw)
        if f.type in ("int", int):
            return int(raw)
        if f.type in ("float", float):
            return parse_duration(raw) if f.name.endswith("_s") else finite(raw)
    except ValueError as exc:
        raise SettingsError(f"{f.name}: {exc}") from None
    return raw


def _scaled(settings: LabSettings, factor: float) -> dict[str, float]:
    """Durations and costs (``*_s``) divided by ``factor``, rates (``*_rate``) multiplied."""
    pace, out = Pace(factor), {}
    for f in fields(settings):
        if f.name.endswith("_s"):
            out[f.name] = pace.wall(getattr(settings, f.name))
        elif f.name.endswith("_rate"):
            out[f.name] = pace.per_wall(getattr(settings, f.name))
    return out


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return repr(float(f"{value:.12g}")) if isinstance(value, float) else str(value)


def flag_of(name: str) -> str:
    """A setting's command-line flag, its one name: ``allowance_s`` is ``--allowance`` (durations
    drop their unit, as the fault catalog's arguments do), ``capacity_cores`` ``--capacity-cores``."""
    return "--" + name.removesuffix("_s").replace("_", "-")


def shown_default(f: Any, settings: LabSettings) -> str:
    """A setting's value as a person writes it: ``1s``, ``on``, ``40``."""
    value = getattr(settings, f.name)
    text = _format(value)
    if isinstance(value, float) and value == int(value) and not f.name.endswith("_s"):
        text = f"{value:g}"
    return f"{value:g}s" if f.name.endswith("_s") and isinstance(value, (int, float)) else text


def describe() -> str:
    """Every setting with its default, range and doc: what ``--set`` accepts."""
    rows = []
    for f in fields(LabSettings):
        limits = f" [{f.metadata['min']:g}..{f.metadata['max']:g}]" if "min" in f.metadata else ""
        limits += f" ({'|'.join(f.metadata['choices'])})" if "choices" in f.metadata else ""
        rows.append(f"{f.name:<24} {_format(f.default):<10}{limits:<18} {f.metadata['doc']}")
    return "\n".join(rows)


if __name__ == "__main__":  # `python -m stormcore.settings`: what `--set KEY=VALUE` accepts
    print(describe())
