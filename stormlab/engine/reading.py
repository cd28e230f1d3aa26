"""One reading of the lab, as one typed structure: built once where the lab is observed
(stormlab/engine/observe.py, from its processes' /status, or from a compose stack's Prometheus),
read by every part of the lab by attribute. The figures derived from it (the share of nodes
disqualified, the margin, the worst table) are its properties, and the probes a scenario's checks,
the alerts and the autopilot measure are read from it by one name (`Reading.probe`). Its JSON is
what `stormlab status --json` prints and a game day's journal keeps. Pure."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# The services' figures beside the database's (the cascade's, the lease manager's): probes, and journaled.
SERVICE_PROBES = (
    "queue_error_ratio",
    "scaling_api_error_ratio",
    "scaling_backlog",
    "login_p50_s",
    "login_p99_s",
    "metric_put_error_ratio",
    "metric_gap_ratio",
    "launch_error_ratio",
    "leases_active",
    "lease_queue",
    "leases_established_per_s",
    "lease_timed_out_per_s",
)
PROBES = (
    "customer_error_ratio",
    "table_error_ratio",
    "worst_table_error_ratio",
    "nodes_disqualified",
    "disqualified_fraction",
    "worst_cell_disqualified_fraction",
    "cells",
    "margin",
    "metadata_inflight",
    "renewal_p99_s",
    "metadata_paused",
    *SERVICE_PROBES,
    "promql",
)
# The metadata service's p99 over the allowance past which the margin is thin (MetadataMarginThin
# pages; `ops status` says so): big memberships take most of the allowance.
THIN_MARGIN = 0.6
CASCADE_PROBES = frozenset(p for p in PROBES if p.startswith(("queue_", "scaling_", "login_", "metric_", "launch_", "lease")))


@dataclass(frozen=True)
class Reading:
    """The lab at one moment. A figure a process did not give (it did not answer, or the lab has
    no such process) is None; ``t`` is a game day's time of the sample (wall seconds into the run;
    0 outside a game), ``promql`` the compose stack's answers to a scenario's PromQL probes."""

    t: float = 0.0
    speed: float = 1.0
    links: str = ""
    endpoints: Mapping[str, str] = field(default_factory=dict)
    unreachable: list[str] = field(default_factory=list)
    # the fleet
    nodes_total: int = 0
    nodes_serving: int = 0
    nodes_disqualified: int = 0
    nodes_starting: int = 0
    racks_link_down: list[int] = field(default_factory=list)
    cell_disqualified_fraction: Mapping[str, float | None] = field(default_factory=dict)
    renewal_p99_s: float | None = None
    renewal_attempts_total: Mapping[str, float] = field(default_factory=dict)
    allowance_s: float | None = None
    # the customers
    customer_error_ratio: float | None = None
    table_error_ratio: Mapping[str, float | None] = field(default_factory=dict)
    customer_requests_total: int | None = None
    customer_failures_total: int | None = None
    cell_error_ratio: Mapping[str, float | None] | None = None
    # the metadata service
    metadata_inflight: int | None = None
    metadata_cores: float | None = None
    metadata_paused: bool | None = None
    metadata_processing_p99_s: float | None = None
    membership_sizes: Mapping[str, int] = field(default_factory=dict)
    # the cascade's services
    queue_error_ratio: float | None = None
    queue_metadata_age_s: float | None = None
    queue_requests_total: int | None = None
    queue_failures_total: int | None = None
    scaling_api_error_ratio: float | None = None
    scaling_backlog: int | None = None
    scaling_backlog_oldest_s: float | None = None
    login_p50_s: float | None = None
    login_p99_s: float | None = None
    metric_put_error_ratio: float | None = None
    metric_gap_ratio: float | None = None
    metric_puts_total: int | None = None
    metric_put_failures_total: int | None = None
    metric_gaps_total: int | None = None
    # the lease manager (the aws-2025-10 profile)
    launch_error_ratio: float | None = None
    leases_active: int | None = None
    lease_droplets: int | None = None
    leases_established_per_s: float | None = None
    lease_timed_out_per_s: float | None = None
    lease_queue: int | None = None
    lease_endpoint: str | None = None
    # the host: the worst process's figure, and which process had it
    loop_lag_p99_s: float | None = None
    loop_lag_by: str = ""
    cpu_ratio: float | None = None
    cpu_by: str = ""
    cpu_wait_s: float | None = None
    wait_by: str = ""
    host_cpu_ratio: float | None = None
    host_steal_ratio: float | None = None
    lab_cpu_cores: float | None = None
    host_cores: int | None = None
    # the leases held now, and each rack's own status (asked for: ``nodes=True``)
    faults: list[dict[str, Any]] = field(default_factory=list)
    racks: Mapping[Any, Any] | None = None
    promql: Mapping[str, float | None] | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Reading:
        """A reading from its JSON (``to_json``'s, a journal's sample): the fields it names, the
        others unknown; a null where a count or a name is kept is taken as none."""
        given = {name: doc[name] for name in FIELDS if name in doc}
        for name, empty in EMPTY.items():
            if given.get(name, empty) is None:
                given[name] = empty
        return cls(**given)

    def to_json(self, only: tuple[str, ...] | None = None) -> dict[str, Any]:
        """The reading as JSON: every figure of the lab (``status --json``), or ``only`` those
        named (a game day's journal: JOURNALED); each rack's status and ``promql`` when asked."""
        doc = {name: getattr(self, name) for name in _named(only)}
        if self.racks is not None and only is None:
            doc["racks"] = self.racks
        if self.promql is not None:
            doc["promql"] = self.promql
        return doc

    def but(self, **changes: Any) -> Reading:
        """The same reading with ``changes``."""
        return dataclasses.replace(self, **changes)

    @property
    def disqualified_fraction(self) -> float | None:
        return self.nodes_disqualified / self.nodes_total if self.nodes_total else None

    @property
    def worst_table_error_ratio(self) -> float | None:
        ratios = [v for v in self.table_error_ratio.values() if v is not None]
        return max(ratios) if ratios else None

    @property
    def worst_cell_disqualified_fraction(self) -> float | None:
        fractions = [v for v in self.cell_disqualified_fraction.values() if v is not None]
        return max(fractions) if fractions else None

    @property
    def cells(self) -> float | None:
        return float(len(self.cell_disqualified_fraction)) if self.cell_disqualified_fraction else None

    @property
    def margin(self) -> float | None:
        """The metadata service's p99 against the allowance: at 1 renewals time out."""
        p99, allowance = self.metadata_processing_p99_s, self.allowance_s
        return p99 / allowance if p99 is not None and allowance else None

    def probe(self, name: str, table: str | None = None, expr: str | None = None) -> float | None:
        """A probe's value in this reading (None: not measured)."""
        if name == "promql":
            return (self.promql or {}).get(expr or "")
        if name == "table_error_ratio":
            return self.table_error_ratio.get(table or "")
        if name == "metadata_paused":
            return 1.0 if self.metadata_paused else 0.0
        if name not in PROBES:
            raise KeyError(f"no probe {name!r}: one of {', '.join(PROBES)}")
        value = getattr(self, name)
        return None if value is None else float(value)


FIELDS = tuple(f.name for f in dataclasses.fields(Reading))
# What a game day's journal keeps of each sample (its time, what its probes, alerts, scoring,
# validity and report read).
JOURNALED = (
    "t",
    "customer_error_ratio",
    "table_error_ratio",
    "nodes_total",
    "nodes_serving",
    "nodes_disqualified",
    "cell_disqualified_fraction",
    "metadata_inflight",
    "metadata_cores",
    "metadata_paused",
    "metadata_processing_p99_s",
    "allowance_s",
    "renewal_p99_s",
    "renewal_attempts_total",
    "loop_lag_p99_s",
    # what the host gave the lab (the validity check)
    "loop_lag_by",
    "cpu_ratio",
    "cpu_by",
    "cpu_wait_s",
    "wait_by",
    "lab_cpu_cores",
    "host_cores",
    "host_cpu_ratio",
    "host_steal_ratio",
    "membership_sizes",
    "queue_metadata_age_s",
    *SERVICE_PROBES,
    # running totals: a window's ratio from two samples (benchmarks/cascade_fixes.py)
    "queue_requests_total",
    "queue_failures_total",
    "metric_puts_total",
    "metric_put_failures_total",
    "metric_gaps_total",
)

# What a null is taken as where the field keeps a count, a name or a collection.
EMPTY: dict[str, Any] = {
    f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    for f in dataclasses.fields(Reading)
    if f.default is not None and f.name not in ("t", "promql")
}


@functools.cache
def _named(only: tuple[str, ...] | None) -> tuple[str, ...]:
    """The fields ``to_json`` writes, in their order: every figure, or ``only`` those."""
    return tuple(n for n in FIELDS if n not in ("t", "promql", "racks")) if only is None else tuple(n for n in FIELDS if n in only)


class Journaled(dict[str, Any]):
    """A sample as a game day's journal keeps it (JSON: JOURNALED), holding the reading it was made
    from: a runner's journal, scored every second while the consoles watch, is read back without
    parsing each sample again."""

    __slots__ = ("reading",)

    def __init__(self, reading: Reading) -> None:
        super().__init__(reading.to_json(JOURNALED))
        self.reading = reading

    def _measured(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a journal's sample is what was measured: copy it (dict(sample)) to change it")

    __setitem__ = __delitem__ = __ior__ = update = pop = popitem = setdefault = clear = _measured


def readings(docs: Iterable[Mapping[str, Any]]) -> list[Reading]:
    """Readings from their JSON (a game day's journal's samples: read from its file, or the runner's own)."""
    return [d.reading if isinstance(d, Journaled) else Reading.from_json(d) for d in docs]


def headline(samples: Iterable[Reading]) -> str:
    """The error ratio a run is judged by: its customers' launches in the lease manager's lab
    (aws-2025-10), its customers' requests otherwise."""
    return "launch_error_ratio" if any(s.launch_error_ratio is not None for s in samples) else "customer_error_ratio"
