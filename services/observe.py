"""Reads the running lab's /status endpoints and sums them up: what `status` and the demo show."""
from __future__ import annotations

import asyncio
from typing import Any

from pathlib import Path

import aiohttp

from services.common.auth import ensure_token, headers

TIMEOUT = aiohttp.ClientTimeout(total=2.0)


async def _get(session: aiohttp.ClientSession, url: str, headers: dict | None = None) -> dict | None:
    try:
        async with session.get(url, timeout=TIMEOUT, headers=headers) as resp:
            return await resp.json() if resp.status == 200 else None
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
        return None


async def snapshot(session: aiohttp.ClientSession, state: dict, nodes: bool = False,
                   lag_window_s: float | None = None) -> dict[str, Any]:
    """One reading of the whole lab; missing components show as unreachable.

    ``loop_lag_p99_s`` is the worst component's p99 over the last 10 s, or over ``lag_window_s``."""
    comps = state["components"]
    names = list(comps)
    query = "&".join(q for q in ("nodes=1" if nodes else "", f"lag_window_s={lag_window_s}" if lag_window_s else "") if q)
    auth = headers(ensure_token(Path(state["directory"])))
    replies = await asyncio.gather(
        *(_get(session, f"{comps[n]['url']}/status?{query}") for n in names),
        *(_get(session, f"{url}/faults", auth) for url in (state["supervisor_url"], comps["metadata"]["url"])))
    by_name = dict(zip(names, replies))
    held = [reply for reply in replies[len(names):] if reply]
    racks = {n: r for n, r in by_name.items() if n.startswith("rack-")}
    meta, loadgen = by_name.get("metadata") or {}, by_name.get("loadgen") or {}
    live_racks = [r for r in racks.values() if r]
    renewal = [r["renewal_p99_s"] for r in live_racks if r.get("renewal_p99_s") is not None]
    lags = [r.get("loop_lag_p99_s") or 0.0 for r in by_name.values() if r]
    return {
        "endpoints": {n: c["url"] for n, c in comps.items()},
        "unreachable": sorted(n for n, r in by_name.items() if r is None),
        "nodes_total": sum(r["nodes_total"] for r in live_racks),
        "nodes_serving": sum(r["nodes_serving"] for r in live_racks),
        "nodes_disqualified": sum(r["nodes_disqualified"] for r in live_racks),
        "nodes_starting": sum(r["nodes_starting"] for r in live_racks),
        "racks_link_down": sorted(r["rack"] for r in live_racks if not r["link_up"]),
        "customer_error_ratio": loadgen.get("customer_error_ratio"),
        "table_error_ratio": loadgen.get("table_error_ratio", {}),
        "customer_requests_total": loadgen.get("requests_total"),
        "customer_failures_total": loadgen.get("failures_total"),
        "metadata_inflight": meta.get("inflight"),
        "metadata_cores": meta.get("cores"),
        "metadata_paused": meta.get("paused"),
        "metadata_processing_p99_s": meta.get("processing_p99_s"),
        "membership_sizes": meta.get("membership_sizes", {}),
        "renewal_p99_s": max(renewal) if renewal else None,
        "renewal_attempts_total": {a: sum(r.get("renewal_attempts_total", {}).get(a, 0) for r in live_racks)
                                   for a in ("first", "retry")},
        "allowance_s": float(state["settings"]["STORMLAB_ALLOWANCE_S"]),
        "loop_lag_p99_s": max(lags) if lags else None,
        "faults": [f for r in [by_name.get("linkproxy") or {}, *held] for f in r.get("faults", [])],
        "racks": {r["rack"]: r for r in live_racks} if nodes else None,
    }


def render(snap: dict[str, Any]) -> str:
    """The human view of a snapshot."""
    def pct(x: float | None) -> str:
        return "  n/a" if x is None else f"{100 * x:5.1f}%"

    def sec(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}s"

    lines = ["endpoints:"] + [f"  {n:<10} {u}" for n, u in snap["endpoints"].items()]
    if snap["unreachable"]:
        lines.append(f"unreachable: {', '.join(snap['unreachable'])}")
    lines += [
        f"nodes:      {snap['nodes_serving']} serving, {snap['nodes_disqualified']} disqualified, "
        f"{snap['nodes_starting']} starting (of {snap['nodes_total']})",
        f"customers:  {pct(snap['customer_error_ratio'])} of requests failing (last 10 s)",
        f"metadata:   {snap['metadata_inflight']} in flight on {snap['metadata_cores']} cores"
        f"{' (PAUSED)' if snap['metadata_paused'] else ''}",
        f"renewals:   p99 {sec(snap['renewal_p99_s'])} against an allowance of {sec(snap['allowance_s'])}",
        f"validity:   event-loop lag p99 {sec(snap['loop_lag_p99_s'])} "
        f"({'ok' if (snap['loop_lag_p99_s'] or 0) < 0.05 * snap['allowance_s'] else 'TOO HIGH: the host, not the model, is shaping the run'})",
    ]
    if snap["racks_link_down"]:
        lines.append(f"links down: racks {snap['racks_link_down']}")
    for f in snap["faults"]:
        lines.append(f"fault:      {f['fault']} #{f['id']} on {f['target']}, {f['left_s']:.1f}s left")
    return "\n".join(lines)
