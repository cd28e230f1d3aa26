"""`stormlab sizing`: what a lab costs per process, measured here, and what a fleet needs.

For each fleet it is asked for (``--fleets NODES[:PER_RACK]``, e.g. ``1000`` or ``10000:1000``), a local lab is
brought up, every node left to start serving, then two renewal periods of its baseline are
measured from /proc: each process's CPU (cores) and resident memory, by kind (a rack, the
metadata service, loadgen, the link proxy), and the Prometheus series each kind exposes. The
figures are scaled to speed 1 (the work per second scales with the speed) and to 1,000 nodes, and
the page (``--page``, default ``reports/sizing.md``; `make sizing` writes docs/sizing.md) works out
what ``--nodes`` nodes need on a cluster: racks (pods), cores and memory for them, the metadata
service and Prometheus's series.

Each lab has its own state directory and free ports, and is stopped by pid.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from stormcore import procs, roster
from stormcore.commandline import deprecated
from stormcore.errors import UsageError
from stormcore.fleet import FLEETS_HELP, parse_fleets
from stormcore.settings import MAX_CELLS, LabSettings, Pace
from stormlab.artefacts import sizing_page
from stormlab.engine import launcher, observe
from stormlab.engine.speed import first_guess

DOC = Path("reports/sizing.md")  # `make sizing` writes docs/sizing.md
KINDS = roster.module_kinds()  # python -m MODULE -> the kind of process (the link proxy: the local lab's network only)
SPEEDS = (1.0, 0.5, 0.25, 0.1, 0.05)  # the speeds a plan may pick
METADATA_BUSY = 0.5  # of its one core, in the baseline: the rest is the herd's
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Reading:
    pid: int
    kind: str
    cpu_s: float
    rss_bytes: int


def kind_of(cmdline: list[str]) -> str | None:
    """A lab process's kind from its command line (``python -m MODULE``)."""
    if "-m" in cmdline[:-1]:
        return KINDS.get(cmdline[cmdline.index("-m") + 1])
    return None


def read_processes(parent: int) -> list[Reading]:
    """The parent's children that are lab processes: their CPU seconds and resident memory."""
    try:
        children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    except OSError:
        return []
    out = []
    for pid in map(int, children):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone between the listing and the read
        kind, rss = kind_of(cmdline), procs.resident_bytes(pid)
        if kind and rss is not None:
            out.append(Reading(pid, kind, (int(stat[11]) + int(stat[12])) / TICKS, rss))
    return out


def per_kind(before: list[Reading], after: list[Reading], wall_s: float) -> dict[str, dict[str, float]]:
    """For each kind: how many processes, the mean CPU (cores) and resident memory (MiB) of one."""
    was = {r.pid: r.cpu_s for r in before}
    kinds: dict[str, list[tuple[float, int]]] = {}
    for r in after:
        if r.pid in was:
            kinds.setdefault(r.kind, []).append(((r.cpu_s - was[r.pid]) / wall_s, r.rss_bytes))
    return {
        k: {
            "processes": len(v),
            "cpu_cores": round(sum(c for c, _ in v) / len(v), 4),
            "rss_mib": round(sum(m for _, m in v) / len(v) / 2**20, 1),
        }
        for k, v in sorted(kinds.items())
    }


def series_in(exposition: str) -> int:
    """Prometheus series in a scrape: its sample lines."""
    return sum(1 for line in exposition.splitlines() if line and not line.startswith("#"))


def plan_for(measured: dict[str, Any], target_nodes: int, nodes_per_rack: int) -> dict[str, Any]:
    """What ``target_nodes`` need, from one measured fleet (pure): racks of ``nodes_per_rack``,
    each costing what a measured rack costs per node (CPU at speed 1, memory above the empty
    process's), the metadata service's CPU per node, and the series Prometheus keeps."""
    rack = measured["kinds"]["rack"]
    per_rack_nodes = measured["nodes_per_rack"]
    racks = math.ceil(target_nodes / nodes_per_rack)
    measured_at = Pace(measured["speed"])
    cpu_per_node = measured_at.per_profile(rack["cpu_cores"]) / per_rack_nodes
    mib_per_node = max(0.0, rack["rss_mib"] - measured["empty_rack_mib"]) / per_rack_nodes
    rack_cpu = cpu_per_node * nodes_per_rack
    rack_mib = measured["empty_rack_mib"] + mib_per_node * nodes_per_rack
    meta_cpu = measured_at.per_profile(measured["kinds"]["metadata"]["cpu_cores"]) * target_nodes / measured["nodes"]
    # the metadata service is one process on one core: the fastest speed that leaves it half idle
    speed = next((v for v in SPEEDS if meta_cpu * v <= METADATA_BUSY), SPEEDS[-1])
    # or, at speed 1, that many cells: each cell's service on a core of its own, as half idle
    cells = min(max(1, math.ceil(meta_cpu / METADATA_BUSY)), racks, MAX_CELLS)
    series = sum(n for kind, n in measured["series"].items() if kind not in ("rack", "linkproxy"))
    return {
        "nodes": target_nodes,
        "nodes_per_rack": nodes_per_rack,
        "racks": racks,
        "speed": speed,
        "rack_cpu_cores": round(Pace(speed).per_wall(rack_cpu), 3),
        "rack_mib": round(rack_mib),
        "racks_cpu_cores": round(Pace(speed).per_wall(rack_cpu) * racks, 1),
        "racks_gib": round(rack_mib * racks / 1024, 1),
        "metadata_cpu_cores_speed_1": round(meta_cpu, 2),
        "metadata_cpu_cores": round(Pace(speed).per_wall(meta_cpu), 2),
        "series": measured["series"]["rack"] * racks + series,
        "cells_speed_1": cells,
        "cell_cpu_cores_speed_1": round(meta_cpu / cells, 2),
        "racks_cpu_cores_speed_1": round(rack_cpu * racks, 1),
    }


async def measure(settings: LabSettings, directory: Path, say: Any) -> dict[str, Any]:
    """One fleet: up, serving, two renewal periods of baseline, down."""
    nodes, per_rack, speed = settings.racks * settings.nodes_per_rack, settings.nodes_per_rack, settings.speed
    say(f"{nodes:,} nodes ({settings.racks} racks of {per_rack:,}) at speed {speed:g}: starting …")
    state = launcher.up(settings, base_port=0, wait_s=600, directory=directory)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            await observe.wait_serving(session, state, 600, say)
            window = 2 * settings.renewal_period_s
            before, start = read_processes(state["supervisor_pid"]), time.monotonic()
            await asyncio.sleep(window)
            after = read_processes(state["supervisor_pid"])
            kinds = per_kind(before, after, time.monotonic() - start)
            series = {}
            for name, kind in (("rack-00", "rack"), *((k, k) for k in KINDS.values() if k != "rack")):
                url = state["components"].get(name, {}).get("url")
                if url:
                    async with session.get(f"{url}/metrics") as resp:
                        series[kind] = series_in(await resp.text())
    finally:
        launcher.down(directory)
    say(f"{nodes:,} nodes: " + "; ".join(f"{k} {v['cpu_cores']} cores, {v['rss_mib']} MiB" for k, v in kinds.items()))
    return {"nodes": nodes, "nodes_per_rack": per_rack, "speed": speed, "kinds": kinds, "series": series}


async def empty_rack_mib(directory: Path) -> float:
    """A rack process with no nodes: the interpreter and libraries alone."""
    settings = LabSettings(racks=1, nodes_per_rack=1)
    state = launcher.up(settings, base_port=0, wait_s=120, directory=directory)
    try:
        rack = [r for r in read_processes(state["supervisor_pid"]) if r.kind == "rack"]
    finally:
        launcher.down(directory)
    return round(rack[0].rss_bytes / 2**20, 1) if rack else 0.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fleets", default="1000,10000:1000", help=FLEETS_HELP)
    p.add_argument("--nodes", dest="target", type=int, default=100_000, help="the fleet to size for, in nodes (default 100,000)")
    p.add_argument(
        "--nodes-per-rack", dest="target_per_rack", type=int, default=1000, help="nodes per rack pod of that fleet (default 1,000)"
    )
    p.add_argument(
        "--page", dest="out", type=Path, default=DOC, help=f"the Markdown page the figures are written into (default {DOC}; - for none)"
    )
    deprecated(p, "--target", "--nodes", dest="target", type=int)
    deprecated(p, "--target-per-rack", "--nodes-per-rack", dest="target_per_rack", type=int)
    deprecated(p, "--out", "--page", dest="out", type=Path)
    p.add_argument("--json", action="store_true", help="the figures as one JSON document on stdout (progress on stderr)")


def run(args: argparse.Namespace) -> int:
    fleets = parse_fleets(args.fleets)
    if not 1 <= args.target <= 10_000_000 or not 1 <= args.target_per_rack <= 1000:
        raise UsageError("--nodes is 1-10,000,000 and --nodes-per-rack 1-1,000")
    root = Path(tempfile.mkdtemp(prefix="stormlab-sizing-"))
    progress = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the one document
    say = lambda text: print(text, file=progress, flush=True)  # noqa: E731
    try:
        empty = asyncio.run(empty_rack_mib(root / "empty"))
        measured = []
        for i, (nodes, per_rack) in enumerate(fleets):
            settings = LabSettings(racks=nodes // per_rack, nodes_per_rack=per_rack, capacity_cores=4.0 * nodes / 100)
            measured.append(
                asyncio.run(measure(settings.sped_up(first_guess(nodes)), root / f"fleet-{i}", say)) | {"empty_rack_mib": empty}
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    biggest = max(measured, key=lambda fl: fl["nodes_per_rack"])
    figures = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cores": os.cpu_count(), "python": sys.version.split()[0]},
        "fleets": measured,
        "plan_from": biggest["nodes"],
        "plan": plan_for(biggest, args.target, args.target_per_rack),
    }
    if str(args.out) != "-":
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(sizing_page.markdown(figures))
        say(f"wrote {args.out}")
    if args.json:
        print(json.dumps(figures, indent=1))
    return 0
