"""Reads the running lab's /status endpoints and sums them up: what `status` and the demo show."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from stormcore import procs, roster
from stormcore.auth import ensure_token, headers
from stormcore.errors import LabError
from stormcore.fleet import cell_of
from stormcore.settings import LabSettings, Pace
from stormcore.wire import (
    RackStatus,
    Status,
    WireError,
)
from stormlab.engine.reading import Reading
from stormlab.engine.story import Sample, host_fields, invalid_reasons

TIMEOUT = aiohttp.ClientTimeout(total=2.0)


async def _get(session: aiohttp.ClientSession, url: str, headers: dict | None = None) -> dict | None:
    try:
        async with session.get(url, timeout=TIMEOUT, headers=headers) as resp:
            return await resp.json() if resp.status == 200 else None
    except (TimeoutError, aiohttp.ClientError, ValueError):
        return None


async def snapshot(
    session: aiohttp.ClientSession,
    state: dict[str, Any],
    nodes: bool = False,
    lag_window_s: float | None = None,
    token: str | None = None,
) -> Reading:
    """One reading of the whole local lab; missing components show as unreachable.

    ``loop_lag_p99_s`` is the worst component's p99 over the last 10 s, or over ``lag_window_s``;
    ``token`` is the lab's (else the one in force for its directory)."""
    comps = state["components"]
    names = list(comps)
    query = "&".join(q for q in ("nodes=1" if nodes else "", f"lag_window_s={lag_window_s}" if lag_window_s else "") if q)
    auth = headers(token or ensure_token(Path(state["directory"])))
    replies = await asyncio.gather(
        *(_get(session, f"{comps[n]['url']}/status?{query}") for n in names),
        *(_get(session, f"{url}/faults", auth) for url in (state["supervisor_url"], comps["metadata"]["url"])),
    )
    by_name = dict(zip(names, replies, strict=False))
    held = [reply for reply in replies[len(names) :] if reply]
    settings = LabSettings.from_env(state["settings"])
    racks = [r for n, raw in by_name.items() if n.startswith("rack-") and (r := read_status(RackStatus, raw))]
    return summarize(
        endpoints={n: c["url"] for n, c in comps.items()},
        unreachable=sorted(n for n, r in by_name.items() if r is None),
        statuses={name: read_status(kind, by_name.get(name)) for name, kind in STATUS_TYPES.items()},
        racks=racks,
        allowance_s=max((r.allowance_s for r in racks), default=settings.allowance_s),  # a deploy changes it live
        host=host_readings(by_name),
        faults=[f for r in [by_name.get("linkproxy") or {}, *held] for f in r.get("faults", [])],
        nodes=nodes,
        settings=settings,
    ).but(speed=settings.speed, links=state.get("links", ""))


async def wait_serving(
    session: aiohttp.ClientSession, state: dict[str, Any], limit_s: float, say: Callable[[str], None] | None = None
) -> float:
    """Until every node of the lab serves (within ``limit_s`` wall-clock seconds, else LabError);
    ``say`` gets a progress line every 2 s. The seconds it took."""
    start = time.monotonic()
    while time.monotonic() < start + limit_s:
        snap = await snapshot(session, state)
        if snap.nodes_total and snap.nodes_serving == snap.nodes_total:
            return time.monotonic() - start
        if say:
            say(f"  … {snap.nodes_serving}/{snap.nodes_total} nodes serving")
        await asyncio.sleep(2.0)
    raise LabError(f"not every node was serving after {limit_s:.0f}s")


def wait_for_link_fault(state: dict[str, Any], limit_s: float) -> bool:
    """Until the link proxy holds a fault (a demo's blip): True, or False after ``limit_s``."""
    url = state["components"]["linkproxy"]["url"] + "/status"
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url, timeout=2) as resp:
            if json.loads(resp.read())["faults"]:
                return True
        time.sleep(0.1)
    return False


def lab_memory(state: dict[str, Any]) -> dict[str, Any] | None:
    """What the lab's processes hold in RAM (resident, read from /proc by their pids: a local lab),
    in MB: every process, the largest rack, the total, and the total per node in kB; None where
    the state has no pids (an engine's containers)."""
    read = {name: procs.resident_bytes(c["pid"]) for name, c in state.get("components", {}).items() if isinstance(c.get("pid"), int)}
    held = {name: b for name, b in read.items() if b is not None}
    if not held:
        return None
    settings = LabSettings.from_env(state["settings"]) if "settings" in state else None
    racks = [b for name, b in held.items() if name.startswith("rack-")]
    total = sum(held.values())
    mb = 1024 * 1024
    return {
        "total_mb": round(total / mb, 1),
        "per_node_kb": round(total / 1024 / settings.nodes_total, 1) if settings else None,
        "rack_mb": round(max(racks) / mb, 1) if racks else None,
        "per_rack_node_kb": round(max(racks) / 1024 / settings.nodes_per_rack, 1) if racks and settings else None,
        "by_process_mb": {name: round(b / mb, 1) for name, b in sorted(held.items())},
    }


S = TypeVar("S", bound=Status)

# A reading of the host: its key in a snapshot, the status field, and the key naming who had it.
HOST_KEYS = (
    ("loop_lag_p99_s", "loop_lag_p99_s", "loop_lag_by"),
    ("cpu_ratio", "cpu_ratio", "cpu_by"),
    ("cpu_wait_s", "cpu_wait_s", "wait_by"),
    ("host_cpu_ratio", "host_cpu_ratio", None),
    ("host_steal_ratio", "host_steal_ratio", None),
)


def host_readings(raw: dict[str, Any]) -> dict[str, Any]:
    """The worst of each host reading across the processes' statuses (name -> raw status, None
    for one that did not answer), and which process had it, and the lab's CPU together against
    the host's cores: what the validity check reads."""
    answered = [r for r in raw.values() if isinstance(r, dict)]
    cpus = [r["cpu_ratio"] for r in answered if isinstance(r.get("cpu_ratio"), int | float)]
    cores = [int(r["host_cores"]) for r in answered if isinstance(r.get("host_cores"), int | float)]
    out: dict[str, Any] = {"lab_cpu_cores": sum(cpus) if cpus else None, "host_cores": max(cores, default=None)}
    for key, field, by in HOST_KEYS:
        values = [(r[field], name) for name, r in raw.items() if isinstance(r, dict) and isinstance(r.get(field), int | float)]
        value, name = max(values, default=(None, ""))
        out[key] = value
        if by:
            out[by] = name
    return out


def read_status(kind: type[S], raw: Any) -> S | None:
    """A process's /status as its type, or None if it did not answer or answered something else."""
    try:
        return kind.from_json(raw) if isinstance(raw, dict) else None
    except WireError:
        return None


# What a reading takes from each process's status: the reading's key -> the status's field.
PICKED: dict[str, dict[str, str]] = {
    "loadgen": {
        "customer_error_ratio": "customer_error_ratio",
        "table_error_ratio": "table_error_ratio",
        "customer_requests_total": "requests_total",
        "customer_failures_total": "failures_total",
        "cell_error_ratio": "cell_error_ratio",
    },
    "metadata": {
        "metadata_inflight": "inflight",
        "metadata_cores": "cores",
        "metadata_paused": "paused",
        "metadata_processing_p99_s": "processing_p99_s",
        "membership_sizes": "membership_sizes",
    },
    "queues": {
        "queue_error_ratio": "error_ratio",
        "queue_metadata_age_s": "metadata_age_s",
        "queue_requests_total": "requests_total",
        "queue_failures_total": "failures_total",
    },
    "scaling": {"scaling_api_error_ratio": "api_error_ratio", "scaling_backlog": "backlog", "scaling_backlog_oldest_s": "backlog_oldest_s"},
    "console": {"login_p50_s": "login_p50_s", "login_p99_s": "login_p99_s"},
    "metrics": {
        "metric_put_error_ratio": "put_error_ratio",
        "metric_gap_ratio": "gap_ratio",
        "metric_puts_total": "puts_total",
        "metric_put_failures_total": "put_failures_total",
        "metric_gaps_total": "gaps_total",
    },
    "leases": {
        "launch_error_ratio": "launch_error_ratio",
        "leases_active": "leases_active",
        "lease_droplets": "droplets",
        "leases_established_per_s": "established_per_s",
        "lease_timed_out_per_s": "timed_out_per_s",
        "lease_queue": "queued",
        "lease_endpoint": "endpoint",
    },
}
STATUS_TYPES: dict[str, type[Status]] = {p.name: p.status for p in roster.SINGLE if p.status is not None}


def summarize(
    *,
    endpoints: dict[str, str],
    unreachable: list[str],
    statuses: dict[str, Status | None],
    racks: list[RackStatus],
    allowance_s: float | None,
    host: dict[str, Any],
    faults: list[dict[str, Any]],
    nodes: bool = False,
    settings: LabSettings | None = None,
) -> Reading:
    """The lab in one reading, from its processes' statuses: the one shape `status`, the demo
    and game days (local or on compose) read. A process that did not answer gives None.
    ``settings``: the lab's racks and cells, for each cell's share of its nodes disqualified
    (none given: one cell)."""
    renewal = [r.renewal_p99_s for r in racks if r.renewal_p99_s is not None]
    picked: dict[str, Any] = {
        key: getattr(statuses[name], field) if statuses.get(name) is not None else None
        for name, fields in PICKED.items()
        for key, field in fields.items()
    }
    host_picked: dict[str, Any] = {key: host.get(key) for key, _, _ in HOST_KEYS} | {by: host.get(by) or "" for _, _, by in HOST_KEYS if by}
    return Reading(
        endpoints=endpoints,
        unreachable=unreachable,
        nodes_total=sum(r.nodes_total for r in racks),
        nodes_serving=sum(r.nodes_serving for r in racks),
        nodes_disqualified=sum(r.nodes_disqualified for r in racks),
        nodes_starting=sum(r.nodes_starting for r in racks),
        racks_link_down=sorted(r.rack for r in racks if not r.link_up),
        cell_disqualified_fraction=by_cell(racks, settings),
        **picked | {"table_error_ratio": picked["table_error_ratio"] or {}, "membership_sizes": picked["membership_sizes"] or {}},
        renewal_p99_s=max(renewal) if renewal else None,
        renewal_attempts_total={a: sum(r.renewal_attempts_total.get(a, 0) for r in racks) for a in ("first", "retry")},
        allowance_s=allowance_s,
        **host_picked,
        lab_cpu_cores=host.get("lab_cpu_cores"),
        host_cores=host.get("host_cores"),
        faults=faults,
        racks={r.rack: dataclasses.asdict(r) for r in racks} if nodes else None,
    )


def by_cell(racks: list[RackStatus], settings: LabSettings | None) -> dict[str, float | None]:
    """Each cell's share of its nodes disqualified, by cell (\"0\" alone without cells): the
    local form of cell:stormlab_nodes_disqualified:ratio."""
    counts: dict[int, tuple[int, int]] = {}
    for r in racks:
        cell = cell_of(r.rack, settings) if settings is not None else 0
        disqualified, total = counts.get(cell, (0, 0))
        counts[cell] = (disqualified + r.nodes_disqualified, total + r.nodes_total)
    return {str(cell): (d / n if n else None) for cell, (d, n) in sorted(counts.items())}


def now_invalid(snap: Reading) -> list[str]:
    """The validity check on one reading (the last 10 s): what `status` can judge. A whole run's
    verdict, with the herd and its worst window, is the demo's and the game day's."""
    allowance = snap.allowance_s or 0.0
    reading = Sample(0.0, 0, 0, 0, 0, None, None, snap.loop_lag_p99_s or 0.0, **host_fields(snap))
    return invalid_reasons([reading], 0.0, None, allowance, 1.0) if allowance else []


def render(snap: Reading) -> str:
    """The human view of a snapshot."""

    def pct(x: float | None) -> str:
        return "  n/a" if x is None else f"{100 * x:5.1f}%"

    pace = Pace(snap.speed or 1.0)

    def sec(x: float | None) -> str:  # the lab's times, in profile time
        return "n/a" if x is None else f"{pace.profile(x):.3f}s"

    def wall(x: float | None) -> str:  # the host's
        return "n/a" if x is None else f"{1000 * x:.1f}ms"

    reasons = now_invalid(snap)
    valid = "ok" if not reasons else "INVALID: " + "; ".join(reasons)
    lines = ["endpoints:"] + [f"  {n:<10} {u}" for n, u in snap.endpoints.items()]
    if snap.unreachable:
        lines.append(f"unreachable: {', '.join(snap.unreachable)}")
    lines += [
        f"nodes:      {snap.nodes_serving} serving, {snap.nodes_disqualified} disqualified, "
        f"{snap.nodes_starting} starting (of {snap.nodes_total})",
        f"customers:  {pct(snap.customer_error_ratio)} of requests failing (last 10 s)"
        + "".join(f"; cell {c} {pct(r).strip()}" for c, r in sorted((snap.cell_error_ratio or {}).items(), key=lambda i: int(i[0]))),
        f"metadata:   {snap.metadata_inflight} in flight on {snap.metadata_cores} cores"
        f"{' (PAUSED)' if snap.metadata_paused else ''}"
        + (" (cell 0's service; the other cells' answer on their own /status)" if snap.cell_error_ratio else ""),
        f"renewals:   p99 {sec(snap.renewal_p99_s)} against an allowance of {sec(snap.allowance_s)}",
        f"host:       event-loop lag p99 {wall(snap.loop_lag_p99_s)} ({snap.loop_lag_by or 'n/a'}), busiest "
        f"{pct(snap.cpu_ratio)} of a core ({snap.cpu_by or 'n/a'}), the lab {snap.lab_cpu_cores or 0:.2f} of "
        f"{snap.host_cores or '?'} cores, longest wait for a core {wall(snap.cpu_wait_s)} a run, "
        f"host busy {pct(snap.host_cpu_ratio)}, steal {pct(snap.host_steal_ratio)} (last 10 s)",
        f"speed:      {pace.speed:g}x (the lab's times above in profile time; the host's in wall-clock ms)",
        f"validity:   {valid}",
    ]
    if snap.links:
        lines.append(f"links:      {snap.links}")
    if snap.queue_error_ratio is not None:
        lines.append(f"queues:     {pct(snap.queue_error_ratio)} of send/receive failing (metadata age {sec(snap.queue_metadata_age_s)})")
    if snap.scaling_backlog is not None:
        lines.append(
            f"scaling:    {pct(snap.scaling_api_error_ratio)} of API calls failing; backlog {snap.scaling_backlog} "
            f"activities, the oldest {sec(snap.scaling_backlog_oldest_s)}"
        )
    if snap.metric_put_error_ratio is not None:
        lines.append(
            f"metrics:    {pct(snap.metric_put_error_ratio)} of PutMetricData failing, "
            f"{pct(snap.metric_gap_ratio)} of datapoints without their group (gaps)"
        )
    if snap.login_p99_s is not None:
        lines.append(f"console:    login median {sec(snap.login_p50_s)}, p99 {sec(snap.login_p99_s)}")
    if snap.launch_error_ratio is not None:
        lines.append(
            f"leases:     {pct(snap.launch_error_ratio)} of launches failing; {snap.leases_active} of {snap.lease_droplets} "
            f"droplets leased, {snap.leases_established_per_s:g} established/s, {snap.lease_timed_out_per_s:g} timed out/s, "
            f"{snap.lease_queue} queued; the endpoint: {snap.lease_endpoint}"
        )
    if snap.racks_link_down:
        lines.append(f"links down: racks {snap.racks_link_down}")
    for f in snap.faults:
        lines.append(f"fault:      {f['fault']} #{f['id']} on {f['target']}, {f['left_s']:.1f}s left")
    return "\n".join(lines)
