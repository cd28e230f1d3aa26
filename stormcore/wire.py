"""The documents one process writes and another reads, as typed structures (pure).

- :class:`Membership`: a node's membership, written by the metadata service, read by the racks.
- :class:`PartitionMap`: who holds each partition, written by the metadata service, read by
  the customers (loadgen) to route their requests.
- :class:`RackStatus`, :class:`MetadataStatus`, :class:`LoadgenStatus`: each process's JSON
  ``/status``, written by the process, read by ``stormlab status``, the demo and game days.

Each is encoded by the writer and decoded by the reader through the same class: a document
that does not have the shape raises :class:`WireError` (a ``ValueError``) instead of a
``KeyError`` deep inside the reader.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypedDict, TypeVar

from stormcore.documents import loads, whole

T = TypeVar("T", bound="Status")


# A renewal's deadline (the rack's allowance, seconds), for deadline-aware shedding at the service.
DEADLINE_HEADER = "X-Stormlab-Deadline-S"
# Why the metadata service turned a renewal away at its door (a 503): one of REFUSALS.
REFUSAL_HEADER = "X-Stormlab-Refusal"
PAUSED, OVERLOADED = "paused", "overloaded"  # an operator's pause (or a staged readmission), admission control
REFUSALS = (PAUSED, OVERLOADED)


class WireError(ValueError):
    """A document that does not have the shape its type says."""


def parse_object(raw: bytes | str | dict[str, Any]) -> dict[str, Any]:
    """A JSON object, or a WireError that says why not."""
    if isinstance(raw, dict):
        return raw
    try:
        doc = loads(raw)  # no NaN, no infinities
    except (ValueError, UnicodeDecodeError) as exc:
        raise WireError(f"not JSON: {exc}") from None
    except RecursionError:  # nested deeper than the parser goes: no document of ours is
        raise WireError("not JSON: nested too deeply") from None
    if not isinstance(doc, dict):
        raise WireError("not a JSON object")
    return doc


def _int(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    if type(value) is int:  # the common case, on the renewal path (every entry of every membership)
        return value
    number = whole(value)
    if number is None:
        raise WireError(f"{key} must be an integer")
    return number


def _str_list(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise WireError(f"{what} must be a list of strings")
    try:
        "".join(value)  # every element a string, checked in C: a partition map's lists hold 300,000 at 10,000 nodes
    except TypeError:
        raise WireError(f"{what} must be a list of strings") from None
    return tuple(value)


@dataclass(frozen=True)
class MembershipEntry:
    """One partition a node holds: of a table (``index`` None) or of one of its GSIs."""

    table: str
    index: str | None
    partition: int
    range: tuple[int, int]

    def key(self) -> tuple[str, str | None, int]:
        return self.table, self.index, self.partition


@dataclass(frozen=True)
class Membership:
    node: str
    version: int
    entries: tuple[MembershipEntry, ...]

    def encode(self) -> bytes:
        body = {
            "node": self.node,
            "version": self.version,
            "entries": [{"table": e.table, "index": e.index, "partition": e.partition, "range": list(e.range)} for e in self.entries],
        }
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | str) -> Membership:
        doc = parse_object(raw)
        node, entries = doc.get("node"), doc.get("entries")
        if not isinstance(node, str) or not isinstance(entries, list):
            raise WireError("a membership has a node and a list of entries")
        return cls(node, _int(doc, "version"), tuple(_entry(e) for e in entries))

    def owned(self) -> frozenset[tuple[str, str | None, int]]:
        return frozenset(e.key() for e in self.entries)


def _entry(e: Any) -> MembershipEntry:
    if not isinstance(e, dict) or not isinstance(e.get("table"), str) or not (e.get("index") is None or isinstance(e.get("index"), str)):
        raise WireError("a membership entry has a table and an index (or null)")
    span = e.get("range")
    if isinstance(span, list) and len(span) == 2 and not all(type(x) is int for x in span):  # the common case is ints
        span = [whole(x) for x in span]
    if not isinstance(span, list) or len(span) != 2 or None in span:
        raise WireError("a membership entry's range is two integers")
    return MembershipEntry(e["table"], e["index"], _int(e, "partition"), (span[0], span[1]))


@dataclass(frozen=True)
class TableRoute:
    owners: tuple[str, ...]  # owners[p] holds partition p of the table
    gsis: tuple[str, ...]
    status: str  # "active", or "updating" while its metadata partition is stuck
    index_owners: tuple[str, ...] = ()  # index_owners[p] holds partition p of each of its GSIs

    def gsi_owners(self) -> tuple[str, ...]:
        """Who holds each partition of any one of the table's GSIs (they are partitioned alike)."""
        return self.index_owners if self.gsis else ()


@dataclass(frozen=True)
class PartitionMap:
    version: int
    tables: dict[str, TableRoute]

    def encode(self) -> bytes:
        body = {
            "version": self.version,
            "tables": {
                name: {"owners": list(t.owners), "gsis": list(t.gsis), "index_owners": list(t.gsi_owners()), "status": t.status}
                for name, t in self.tables.items()
            },
        }
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | str | dict[str, Any]) -> PartitionMap:
        doc = parse_object(raw)
        tables = doc.get("tables")
        if not isinstance(tables, dict):
            raise WireError("a partition map has tables")
        routes = {}
        for name, spec in tables.items():
            if not isinstance(spec, dict) or not isinstance(spec.get("status"), str):
                raise WireError(f"table {name!r} needs owners, gsis and a status")
            gsis = _str_list(spec.get("gsis"), f"{name}.gsis")
            index_owners = _str_list(spec.get("index_owners", []), f"{name}.index_owners")
            if gsis and not index_owners:
                raise WireError(f"table {name!r} has GSIs and no index_owners")
            routes[name] = TableRoute(_str_list(spec.get("owners"), f"{name}.owners"), gsis, spec["status"], index_owners)
        return cls(_int(doc, "version"), routes)


class HostReadings(TypedDict):
    """What every process's status says about the host (``stormcore.web.LoopLag.readings``)."""

    loop_lag_p99_s: float
    cpu_ratio: float | None
    cpu_wait_s: float | None
    host_cores: int
    host_cpu_ratio: float | None
    host_steal_ratio: float | None


def _plain(value: Any) -> Any:
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else value


@dataclass(frozen=True)
class Status:
    """A process's ``/status``: every field is written; a reader gets the same fields back."""

    COMPONENT: ClassVar[str] = ""
    loop_lag_p99_s: float
    # What the host gives this process over the same window (stormcore.health; None off Linux).
    cpu_ratio: float | None = field(default=None, kw_only=True)
    cpu_wait_s: float | None = field(default=None, kw_only=True)
    host_cores: int | None = field(default=None, kw_only=True)
    host_cpu_ratio: float | None = field(default=None, kw_only=True)
    host_steal_ratio: float | None = field(default=None, kw_only=True)

    def to_json(self) -> dict[str, Any]:
        # shallow: the fields are JSON values already (asdict's deep copy of a rack's 1,000 nodes
        # cost the rack ~9 ms, taken by every rack at once when a demo reads them all)
        return {"component": self.COMPONENT, **{f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}}

    @classmethod
    def from_json(cls: type[T], raw: bytes | str | dict[str, Any]) -> T:
        doc = parse_object(raw)
        if doc.get("component") != cls.COMPONENT:
            raise WireError(f"not the status of a {cls.COMPONENT}: component={doc.get('component')!r}")
        missing = [
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in doc and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise WireError(f"{cls.COMPONENT} status without {', '.join(missing)}")
        return cls(**{f.name: doc[f.name] for f in dataclasses.fields(cls) if f.name in doc})


@dataclass(frozen=True)
class RackStatus(Status):
    COMPONENT: ClassVar[str] = "rack"
    rack: int
    pid: int | None
    link_up: bool
    nodes_total: int
    nodes_serving: int
    nodes_disqualified: int
    nodes_starting: int
    renewal_p99_s: float | None
    renewal_attempts_total: dict[str, float]  # "first" and "retry"
    allowance_s: float
    nodes: list[dict[str, Any]] | None = None  # each node's state, when asked for (?nodes=1)
    deployed: dict[str, Any] | None = None  # the deployable settings it runs (profile time), and what the live deploys hold
    schedule_origin_unix: float | None = None  # its nodes' slots fall at this + (phase + k) renewal periods (unix s)


@dataclass(frozen=True)
class MetadataStatus(Status):
    COMPONENT: ClassVar[str] = "metadata"
    paused: bool
    admission: dict[str, Any]
    cores: float
    inflight: int
    busy_cores: float
    abandoned_work: str | None
    wasted_work_s: float
    membership_version: int
    membership_sizes: dict[str, int]  # entries -> nodes with that many
    processing_p99_s: float | None
    allowance_s: float
    cell: int = 0  # which cell's racks this instance serves (0 without cells)


@dataclass(frozen=True)
class LoadgenStatus(Status):
    COMPONENT: ClassVar[str] = "loadgen"
    rate_per_s: float
    requests_last_10s: int
    customer_error_ratio: float | None
    table_error_ratio: dict[str, float | None] = field(default_factory=dict)
    requests_total: int = 0
    failures_total: int = 0
    inflight: int = 0
    routes_version: int | None = None
    cell_error_ratio: dict[str, float | None] = field(default_factory=dict)  # per cell, when there are cells


@dataclass(frozen=True)
class QueuesStatus(Status):
    COMPONENT: ClassVar[str] = "queues"
    error_ratio: float | None  # send and receive calls failing, last 10 s
    requests_total: int
    failures_total: int
    metadata_age_s: float  # the oldest cached queue metadata
    messages_stored: int
    fix_stale_cache: bool
    messages_in_flight: int = 0  # received, hidden for their visibility timeout, not yet deleted


@dataclass(frozen=True)
class ScalingStatus(Status):
    COMPONENT: ClassVar[str] = "scaling"
    api_error_ratio: float | None  # set-desired-capacity calls failing, last 10 s
    api_requests_total: int
    api_failures_total: int
    backlog: int  # activities waiting for a worker
    backlog_oldest_s: float
    activities_done: int
    activities_pruned: int
    workers: int
    fix_prune_activities: bool


@dataclass(frozen=True)
class ConsoleStatus(Status):
    COMPONENT: ClassVar[str] = "console"
    login_p50_s: float | None  # last 10 s: the typical login
    login_p99_s: float | None  # last 10 s
    logins_total: int
    lookup_timeout_s: float
    fix_short_timeout: bool


@dataclass(frozen=True)
class LeasesStatus(Status):
    COMPONENT: ClassVar[str] = "leases"
    launch_error_ratio: float | None  # customers' launches failing, last 10 s (the aws-2025-10 headline)
    launches_total: int
    launch_failures_total: int
    droplets: int
    leases_active: int  # droplets holding an active lease now
    established_per_s: float  # leases established a second, last 10 s (profile seconds)
    timed_out_per_s: float  # work items finished past their timeout a second, last 10 s (profile seconds)
    queued: int  # items waiting, every host
    in_flight: int  # items on the hosts' CPUs
    endpoint: str  # the database's endpoint as the manager resolves it: ok, empty (the fault), repaired (by hand)
    admit_rate: float  # the throttle a host admits new work at, a profile second (0: none)
    queue_limit: int  # throttling by queue size (0: none)
    hosts: list[dict[str, Any]]  # each host: queued, in_flight, leases, restarts


@dataclass(frozen=True)
class MetricsStatus(Status):
    COMPONENT: ClassVar[str] = "metrics"
    put_error_ratio: float | None  # PutMetricData calls failing, last 10 s
    gap_ratio: float | None  # datapoints stored without their group, last 10 s
    puts_total: int
    put_failures_total: int
    gaps_total: int  # datapoints stored without their group
    datapoints_stored: int
    fix_write_through: bool
