"""docs/sizing.md from `stormlab sizing`'s figures (pure: figures in, Markdown out): what each
process costs, measured, how many nodes a rack and racks a host hold, and what a big fleet needs."""

from __future__ import annotations

from typing import Any

from stormcore.settings import Pace


def markdown(figures: dict[str, Any]) -> str:
    return "\n".join([*measured(figures), *racks_per_host(figures["fleets"]), *big_fleet(figures["plan"], figures["plan_from"])])


def measured(f: dict[str, Any]) -> list[str]:
    """Per process, measured; an empty rack; nodes per rack process."""
    m = f["machine"]
    lines = [
        "# Sizing: what a lab costs, and what a big fleet needs",
        "",
        f"Measured by `stormlab sizing` (`make sizing`) on {f['date']}: {m['cores']} cores, Python {m['python']}. Each fleet is a "
        "local lab left to serve, then two renewal periods of its baseline read from /proc (CPU and resident memory of each "
        "process) and from each kind's `/metrics` (its Prometheus series). CPU is scaled to speed 1: a lab at speed 0.25 does "
        "a quarter of the work per second.",
        "",
        "## Per process, measured",
        "",
        "| fleet | nodes per rack | speed | kind | processes | CPU of one (cores, at speed 1) | memory of one | series in its scrape |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for fl in f["fleets"]:
        for kind, k in fl["kinds"].items():
            lines.append(
                f"| {fl['nodes']:,} | {fl['nodes_per_rack']:,} | {fl['speed']:g} | {kind} | {k['processes']} | "
                f"{Pace(fl['speed']).per_profile(k['cpu_cores']):.3f} | {k['rss_mib']:.0f} MiB | {fl['series'].get(kind, 0):,} |"
            )
    lines += [
        "",
        f"An empty rack process (0 nodes: Python, aiohttp, uvloop, the metrics) holds {f['fleets'][0]['empty_rack_mib']:.0f} MiB. "
        "A rack's series do not grow with its nodes: every label is bounded (rack, outcome, state …, never a node id), so "
        "Prometheus keeps the same series for a rack of 100 nodes as for a rack of 1,000.",
        "",
        "## Nodes per rack process",
        "",
        "The limit is not the baseline but the herd: when a blip ends, every node of the blipped racks renews at once and "
        "the rack's one event loop must keep its timers on time (the validity check refuses a run whose loop ran late by "
        "more than 10% of the allowance). The storm runs by fleet size in [scale.md](scale.md) measured it on this machine, "
        "with 10 racks, the metadata service and loadgen sharing 2 cores: 500 nodes per rack is valid at speed 1 (even "
        "with two busy loops on both cores); 1,000 per rack is at the edge (valid in 1 of 4 runs, the others INVALID by "
        "3-31 ms), the herd woken 50 nodes a loop iteration at ~0.1 ms of CPU a node ([benchmarks.md](benchmarks.md)). "
        "A rack pod with a core of its own does better than a rack sharing two cores with ten others; these are the "
        "figures measured here.",
        "",
    ]
    return lines


def racks_per_host(fleets: list[dict[str, Any]]) -> list[str]:
    lines = ["## Racks per host", ""]
    for fl in fleets:
        rack = fl["kinds"]["rack"]
        per_core = 1 / max(Pace(fl["speed"]).per_profile(rack["cpu_cores"]), 1e-6)
        lines.append(
            f"- {fl['nodes_per_rack']:,} nodes per rack, at speed 1: one rack uses {1 / per_core:.3f} cores in "
            f"its baseline, so a core holds about {per_core:.0f} such racks' baseline, and the herd after a blip needs the "
            f"headroom above (run at most half that: {per_core / 2:.0f} racks per core); memory {rack['rss_mib']:.0f} MiB each."
        )
    return lines


def big_fleet(plan: dict[str, Any], plan_from: int) -> list[str]:
    return [
        "",
        f"## What {plan['nodes']:,} nodes need on a cluster",
        "",
        f"Worked out from the {plan_from:,}-node fleet measured above, {plan['nodes_per_rack']:,} nodes per rack "
        "(the `fleet-100k` overlay in deploy/k8s runs it in cells at speed 1):",
        "",
        "| what | how much |",
        "| --- | --- |",
        f"| rack pods (StatefulSet replicas, `racks` setting) | {plan['racks']} |",
        f"| cells at speed 1 (`STORMLAB_CELLS`) | {plan['cells_speed_1']}: the metadata service's baseline at speed 1 is "
        f"{plan['metadata_cpu_cores_speed_1']} cores, so each cell's service takes {plan['cell_cpu_cores_speed_1']} cores of a core "
        f"of its own (the rest is for its herd); the racks then {plan['racks_cpu_cores_speed_1']} cores |",
        f"| or one cell, in slow motion (`STORMLAB_SPEED`) | {plan['speed']:g}: the one metadata service takes "
        f"{plan['metadata_cpu_cores']} cores of its one core (the rest is for the herd) |",
        f"| CPU per rack pod, baseline, in slow motion | {plan['rack_cpu_cores']} cores (request 2× that for the herd) |",
        f"| memory per rack pod | {plan['rack_mib']} MiB |",
        f"| all racks, in slow motion | {plan['racks_cpu_cores']} cores, {plan['racks_gib']} GiB |",
        f"| Prometheus series (the racks', metadata's, loadgen's and the cascade's) | {plan['series']:,} (every 5 s: "
        f"{plan['series'] / 5:,.0f} samples/s) |",
        "",
        "Caveats, said plainly: the figures for the target are arithmetic on per-node costs measured here, not a run of that "
        "many nodes (one host here holds 5,000 at speed 1, and 10,000 at the edge). Cells split the metadata service, not the "
        "fleet's storm: a blip inside one cell storms that cell alone (docs/fixes.md); compose, the swarm stack and Kubernetes run "
        "them (`STORMLAB_CELLS`, with `STORMLAB_MORE_CELLS` one fewer: the `metadata-cell` replicas).",
        "",
    ]
