"""The figures read from one reading of the lab: the probes a scenario's checks, the alerts and
the autopilot measure, each by one name. Pure."""

from __future__ import annotations

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
    "queue_error_ratio",
    "scaling_api_error_ratio",
    "scaling_backlog",
    "login_p50_s",
    "login_p99_s",
    "metric_put_error_ratio",
    "metric_gap_ratio",
    "promql",
)
CASCADE_PROBES = frozenset(p for p in PROBES if p.startswith(("queue_", "scaling_", "login_", "metric_")))


def probe_value(sample: dict, probe: str, table: str | None = None, expr: str | None = None) -> float | None:
    """A probe's value in one sample of the lab (None: not measured)."""
    if probe == "promql":
        return (sample.get("promql") or {}).get(expr)
    if probe == "table_error_ratio":
        return (sample.get("table_error_ratio") or {}).get(table)
    if probe == "worst_table_error_ratio":
        ratios = [v for v in (sample.get("table_error_ratio") or {}).values() if v is not None]
        return max(ratios) if ratios else None
    if probe == "disqualified_fraction":
        total = sample.get("nodes_total") or 0
        return (sample.get("nodes_disqualified") or 0) / total if total else None
    if probe == "worst_cell_disqualified_fraction":
        fractions = [v for v in (sample.get("cell_disqualified_fraction") or {}).values() if v is not None]
        return max(fractions) if fractions else None
    if probe == "cells":
        return float(len(sample["cell_disqualified_fraction"])) if sample.get("cell_disqualified_fraction") else None
    if probe == "margin":
        p99, allowance = sample.get("metadata_processing_p99_s"), sample.get("allowance_s")
        return p99 / allowance if p99 is not None and allowance else None
    if probe == "metadata_paused":
        return 1.0 if sample.get("metadata_paused") else 0.0
    return sample.get(probe)
