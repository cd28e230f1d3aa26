"""docs/benchmarks.md from `stormlab bench`'s figures (pure: figures in, Markdown out), a section
per measurement."""

from __future__ import annotations

from typing import Any


def markdown(figures: dict[str, Any], date: str) -> str:
    m = figures["machine"]
    lines = [
        "# stormlab benchmarks",
        "",
        f"Measured by `stormlab bench` on {date}: {m['cores']} cores, Python {m['python']}. Ratios are measured side by side "
        "in one run; absolute figures are this machine's.",
        "",
    ]
    if figures.get("membership_path"):
        lines += membership_path(figures["membership_path"])
    if figures.get("renewal_paths"):
        lines += renewal_paths(figures["renewal_paths"])
    if figures.get("herd"):
        lines += herd(figures["herd"])
    if figures.get("both_clients"):
        lines += both_clients(figures["both_clients"])
    if figures.get("rebuild_stall"):
        lines += rebuild_stall(figures["rebuild_stall"])
    if figures.get("faults"):
        lines += faults(figures["faults"])
    if figures.get("fleets"):
        lines += fleets(figures["fleets"])
    if figures.get("storms"):
        lines += storms(figures["storms"], figures["largest_valid_fleet"])
    return "\n".join(lines)


def membership_path(m: dict[str, Any]) -> list[str]:
    return [
        "## The membership path against a bare aiohttp handler",
        "",
        f"`GET /membership/{{node}}` on the metadata service (virtual CPU cost 0) against a bare aiohttp handler "
        f"answering the same {m['body_bytes']} bytes, {m['concurrency']} requests in flight, rounds alternated:",
        "",
        "| membership path | bare handler | ratio |",
        "| --- | --- | --- |",
        f"| {m['membership_req_per_s']:,} req/s | {m['bare_req_per_s']:,} req/s | {m['ratio']:.2f}x |",
        "",
    ]


KERNEL = " (kernel links)"  # a path whose link the kernel carried


def renewal_paths(r: dict[str, Any]) -> list[str]:
    lines = [
        "## The renewal end to end against a bare client and handler",
        "",
        f"A one-rack lab renewing at {r['rate']:,} renewals/s (no customers, no cascade, the virtual CPU's cost 0): "
        "CPU seconds per renewal of each process on the path, read from /proc over "
        f"{r['window_s']:g} s and divided by the renewals the metadata service answered. The bare pair: a client "
        "sending the same request bytes at the same rate (the renewal client with no node behind it) and a bare "
        "aiohttp handler answering the same membership bytes, each its own process. `protocol` is the racks' "
        "renewal client, `session` the general aiohttp client it replaced; the rack's link is carried by the link "
        "proxy, or by the kernel (`link_cut=kernel`, measured where the lab may: root, iptables) with the proxy off it.",
        "",
        "| entries | path | client (rack) | link proxy | server (metadata) | total | against bare |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in r["rows"]:
        per = row["us_per_request"]
        bare = next(b["us_total"] for b in r["rows"] if b["entries"] == row["entries"] and b["client"] == "bare")
        client, link, server = (per.get("rack", per.get("client")), per.get("linkproxy"), per.get("metadata", per.get("server")))
        path = row["client"] + (KERNEL if row.get("links") == "kernel" else "")
        lines.append(
            f"| {row['entries']} | {path} | {client} µs | {'-' if link is None else f'{link} µs'} | {server} µs | "
            f"{row['us_total']} µs | {row['us_total'] / bare:.2f}x |"
        )
    return [*lines, ""]


def herd(h: dict[str, Any]) -> list[str]:
    lines = [
        "## The herd, per node",
        "",
        "A rack's nodes in a process of their own on a rack's loop (uvloop), each renewed once (its membership "
        "decoded, as before a blip), all asleep, woken by their link's return (50 a loop iteration) and renewing at "
        "once on fresh connections (their timed-out attempts dropped theirs), through the lab's link: that process's "
        "CPU per node (the median round), and the longest the loop went without running a 1 ms ticker. The renewal "
        "before, all at once without slices and with each membership decoded, beside it.",
        "",
        "| client | nodes | CPU per node | longest stall | renewed | the renewal before (decoding) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {client} | {row['nodes']:,} | {row['ms_cpu_per_node']} ms | {row['longest_stall_ms']} ms | {row['ok']:,} | "
        f"{row['first_ms_cpu_per_node']} ms |"
        for client, row in h.items()
    ]
    return [*lines, ""]


def both_clients(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Both renewal clients in one storm",
        "",
        "The 2015 lab (1,000 nodes, speed 1) with `renewal_client=half`: even racks renew with the plain client, odd "
        "racks with the old aiohttp one; one 5 s blip over racks 0-2 (both kinds), then each rack two minutes on:",
        "",
        "| rack | client | blipped | serving | disqualified | first attempts | retries |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {r['rack']} | {r['client']} | {'yes' if r['blipped'] else 'no'} | {r['serving']} | {r['disqualified']} | "
        f"{r['first_attempts']:,} | {r['retries']:,} |"
        for r in rows
    ]
    return [*lines, ""]


def rebuild_stall(r: dict[str, Any]) -> list[str]:
    steps = {k: v for k, v in r.items() if k not in ("nodes", "map_bytes")}
    lines = [
        "## A GSI-growth fault's stall",
        "",
        f"What adding two GSIs to a table costs each event loop at {r['nodes']:,} nodes, each step timed alone "
        f"(the partition map is {r['map_bytes'] / 1e6:.1f} MB):",
        "",
        "| step | on the loop |",
        "| --- | --- |",
    ]
    lines += [f"| {step} | {ms} ms |" for step, ms in steps.items()]
    return [*lines, ""]


KERNEL_FAULTS = (
    " (the links carried by the kernel, as the launcher chose here: a blip is an `iptables` rule added at apply, "
    "its counters read and the rule deleted at revert)."
)


def faults(fl: dict[str, Any]) -> list[str]:
    return [
        "## Fault apply and revert",
        "",
        f"A blip on the link proxy, {fl['count']} times: `POST /faults` answers once the fault is applied and its "
        f"revert armed; `DELETE /faults` once every lease is reverted{KERNEL_FAULTS if fl.get('links') == 'kernel' else '.'}",
        "",
        "| | p50 | p99 |",
        "| --- | --- | --- |",
        f"| apply | {fl['apply_p50_ms']} ms | {fl['apply_p99_ms']} ms |",
        f"| revert | {fl['revert_p50_ms']} ms | {fl['revert_p99_ms']} ms |",
        "",
    ]


def fleets(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Fleets: start-up, CPU, scrape",
        "",
        "4 virtual cores per 100 nodes, at the speed `--speed auto` picks for the fleet (or `--fleet-speed`); CPU and lag "
        "over two renewal periods of the baseline; CPU per 1,000 nodes scaled to speed 1. Then three GSI-growth faults "
        "one after another (each held 3 s; its change and its revert both touch the memberships): every process's "
        "loop-lag samples in the while (a timer every 0.1 s, late by what held the loop when it fell due), those over "
        "50 ms, and the longest, to its histogram bucket.",
        "",
        "| nodes | racks | speed | `up` healthy | every node serving | the lab's CPU | per 1,000 at speed 1 | lag p99 | a rack's scrape "
        "| GSI faults: lag samples over 50 ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {r['nodes']:,} | {r.get('racks', 10)} | {r['speed']:g} | {r['up_to_healthy_s']} s | "
        f"{r.get('to_every_node_serving_s', 'never')} s | "
        f"{r['lab_cpu_cores']} cores | {r['cpu_cores_per_1000_nodes']} cores | {r['loop_lag_p99_ms']} ms | "
        f"{r['rack_scrape_ms']} ms, {r['rack_scrape_bytes']:,} B | {_gsi(r.get('gsi_faults'))} |"
        for r in rows
    ]
    return [*lines, "", *memory(rows)]


def memory(rows: list[dict[str, Any]]) -> list[str]:
    """Each fleet's memory per process and per node, read in its baseline (the fleets above)."""
    measured = [r for r in rows if r.get("memory")]
    if not measured:
        return []
    lines = [
        "### Memory per process and per node",
        "",
        "Each process's resident set (`/proc/PID/statm`) in the fleet's baseline: the metadata service (the fleet's "
        "placement and memberships), the largest rack (its nodes' state and connections), loadgen (the partition map), "
        "the link proxy, and the whole lab (the cascade's services included) per node.",
        "",
        "| nodes | metadata | a rack (per node) | loadgen | link proxy | the lab | per node |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in measured:
        m, by = r["memory"], r["memory"]["by_process_mb"]
        lines.append(
            f"| {r['nodes']:,} | {by.get('metadata', '-')} MB | {m['rack_mb']} MB ({m['per_rack_node_kb']} kB) | "
            f"{by.get('loadgen', '-')} MB | {by.get('linkproxy', '-')} MB | {m['total_mb']:,} MB | {m['per_node_kb']} kB |"
        )
    return [*lines, ""]


def _gsi(g: dict[str, Any] | None) -> str:
    if not g:
        return "-"
    return f"{g['over_50ms']:,} of {g['samples']:,} (the longest at most {g['worst_bucket_ms']:g} ms, {g['worst_by']})"


def _fleet(nodes: int | None) -> str:
    return f"**{nodes:,}** nodes" if nodes else "none among these runs"


def _racks(r: dict[str, Any]) -> str:
    """A run's racks and blipped racks, where they are not the 2015 demo's 10 and 3."""
    racks, blipped = r.get("racks", 10), r.get("blipped", 3)
    return "" if (racks, blipped) == (10, 3) else f" ({racks} racks, {blipped} blipped)"


def storms(rows: list[dict[str, Any]], big: dict[str, Any]) -> list[str]:
    lines = [
        "## The storm by fleet size",
        "",
        "`stormlab demo --json` runs (4 virtual cores per 100 nodes, the 2015 blip on 3 racks of 10, or in proportion: "
        "the racks each row names). The largest "
        f"fleet that kept the 2015 plateau (45-65%), holding and valid: at speed 1 {_fleet(big['speed_1'])}; "
        f"with `--speed auto` {_fleet(big['auto'])}.",
        "",
        "| run | nodes | speed asked | speed used | plateau | holds | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        verdict = "valid" if r["valid"] else "INVALID: " + "; ".join(r["invalid_reasons"])
        tried = "".join(f" (left {t['speed']:g}: {t['why']})" for t in r["speeds_tried"])
        lines.append(
            f"| {r['file']} | {r['nodes']:,}{_racks(r)} | {r['speed_requested']} | {r['speed']:g}{tried} | "
            f"{100 * (r['plateau'] or 0):.1f}% | {'yes' if r['holds'] else 'no'} | {verdict} |"
        )
    return [*lines, ""]
