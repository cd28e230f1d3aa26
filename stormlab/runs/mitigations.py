"""`stormlab mitigations`: the 2015 trigger against every policy and fix, live, in one table.

Each row is a lab of its own on real processes (1,000 nodes by default), the demo's story at
the 2015 point (racks 0-2 blipped for 5 s, GSI growth on): the 2015 settings, each fix and
policy of the sweep's panels, and two fixes deployed into the running storm (``ops deploy``,
5 steps 10 s apart, starting 30 s after the blip). For each: the plateau (the customers' error
over the last 60 s), the time from the end of the blip until they are back under 1%, the work
the metadata service did for clients that had given up (core-seconds), and the customers'
error-minutes from the blip to the end. Times are profile time (the 2015 profile runs ~50x
faster than 2015). Rows are appended to ``mitigations.csv`` as they finish: a stopped run
resumes; ``--page docs/fixes.md`` puts the table into that page's ``<!-- mitigations -->`` block.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos import client
from chaos.journal import Journal
from stormcore.auth import ensure_token
from stormcore.commandline import page_and_json
from stormcore.errors import LabError, UsageError
from stormcore.labstate import running
from stormcore.settings import LabSettings, Pace, parse_duration
from stormlab.artefacts.blocks import replace_block
from stormlab.engine import launcher, observe
from stormlab.engine.speed import first_guess, parse_speed
from stormlab.engine.story import ratio_between
from stormlab.model.grid import PANELS, POINT_2015, SETTLE_S, Point
from stormlab.runs.demo import Demo

DEPLOY_AFTER_S = 30.0  # profile seconds after the blip ends: the storm is on its plateau by then
DEPLOY_STEPS, DEPLOY_EVERY_S = 5, 10.0


@dataclass(frozen=True)
class Row:
    name: str
    panel: str = "2015"
    deploy: tuple[tuple[str, str], ...] = ()  # a live deploy's arguments (ops deploy), if any


ROWS = [Row(panel, panel) for panel in PANELS] + [
    Row("deploy full jitter live", deploy=(("retry_policy", "full-jitter"),)),
    Row("deploy allowance 2s live", deploy=(("allowance", "2s"),)),
]
COLUMNS = (
    "name", "plateau", "recovered_after_s", "wasted_core_s", "error_minutes", "blipped_cell_plateau", "blast_radius", "valid", "speed",
    "seconds",
)  # fmt: skip


def deploy_later(state: dict[str, Any], row: Row, speed: float) -> None:
    """Wait for the demo's blip (the link proxy holds it), then deploy ``row``'s change rack by rack."""
    if not observe.wait_for_link_fault(state, 300):
        return
    pace = Pace(speed)
    time.sleep(pace.wall(POINT_2015["blip_s"] + DEPLOY_AFTER_S))
    values = dict(row.deploy) | {"staged": DEPLOY_STEPS, "every": f"{pace.wall(DEPLOY_EVERY_S):g}s", "duration": f"{pace.wall(600):g}s"}
    directory = Path(state["directory"])
    client.apply(state, "deploy", values, ensure_token(directory), journal=Journal(directory), via="mitigations")


def wasted_core_s(state: dict[str, Any]) -> float:
    """The work every cell's metadata service did for clients that had given up (wall core-s)."""
    total = 0.0
    for name, component in state["components"].items():
        if name == "metadata" or name.startswith("metadata-"):
            with urllib.request.urlopen(f"{component['url']}/status", timeout=5) as resp:
                total += float(json.loads(resp.read())["wasted_work_s"])
    return total


def measure(base: LabSettings, row: Row, speed: float, watch_s: float, out: io.TextIOBase) -> dict[str, Any]:
    started = time.monotonic()
    point = Point(row.panel, POINT_2015["blip_racks"], POINT_2015["blip_s"], POINT_2015["gsis"])
    settings = point.settings(base)
    state = launcher.up(settings.sped_up(speed), base_port=0)
    beside = threading.Thread(target=deploy_later, args=(state, row, speed), daemon=True) if row.deploy else None
    try:
        demo = Demo(state, out, SETTLE_S, POINT_2015["blip_s"], watch_s, str(POINT_2015["blip_racks"]))
        if beside:
            beside.start()
        r = asyncio.run(demo.run())
        wasted = Pace(speed).profile(wasted_core_s(state))  # core-seconds of profile time
    finally:
        launcher.down()
    times, end = r["_times"], demo.samples[-1].t
    ratio = ratio_between(demo.samples, times["blip_start"], end) or 0.0
    return {
        "name": row.name,
        "plateau": r["plateau_error_ratio"],
        "recovered_after_s": r["recovery_s"],
        "wasted_core_s": wasted,
        "error_minutes": ratio * (end - times["blip_start"]) / 60,
        "blipped_cell_plateau": r["cell_plateau"]["0"] if "cell_plateau" in r else None,
        "blast_radius": r.get("outside_worst_error_ratio"),
        "valid": r["valid"],
        "speed": speed,
        "seconds": time.monotonic() - started,
    }


def read_rows(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    with path.open(newline="") as f:
        return {r["name"]: r for r in csv.DictReader(f) if r.get("seconds")}


def markdown(rows: list[dict[str, Any]]) -> str:
    def num(x: Any, fmt: str) -> str:
        return "n/a" if x in (None, "") else format(float(x), fmt)

    def pct(x: Any) -> str:
        return "–" if x in (None, "") else f"{100 * float(x):.1f}%"

    lines = [
        "| policy or fix | plateau (last 60 s) | back under 1% after the blip | wasted work (core-s) | customer error-minutes "
        "| cells: the blipped cell's plateau / blast radius | run |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        recovered = "never (held)" if r["recovered_after_s"] in (None, "") else f"{float(r['recovered_after_s']):.0f} s"
        plateau = "n/a" if r["plateau"] in (None, "") else f"{100 * float(r['plateau']):.1f}%"
        valid = "valid" if str(r["valid"]) == "True" else "INVALID"
        cells = f"{pct(r.get('blipped_cell_plateau'))} / {pct(r.get('blast_radius'))}" if r.get("blast_radius") not in (None, "") else "–"
        wasted, minutes = num(r["wasted_core_s"], ".0f"), num(r["error_minutes"], ".2f")
        lines.append(f"| {r['name']} | {plateau} | {recovered} | {wasted} | {minutes} | {cells} | {valid} |")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--only", help=f"a comma list of rows (default all: {', '.join(r.name for r in ROWS)})")
    p.add_argument("--racks", type=int, default=10, help="racks of each lab (default 10)")
    p.add_argument("--nodes-per-rack", type=int, default=100, help="nodes per rack (default 100; capacity scales with the fleet)")
    p.add_argument("--speed", default="1", help="time dilation of each run: a number (0.05-20) or auto (default 1)")
    p.add_argument("--watch", default="120s", help="profile time watched after the blip (default 120s: 12 renewal periods)")
    p.add_argument("--out", type=Path, default="reports/mitigations", help="where mitigations.csv and summary.md go; a run there resumes")
    page_and_json(p, "mitigations", "make mitigations: docs/fixes.md", "the rows")


def run(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.only.split(",")] if args.only else [r.name for r in ROWS]
    known = {r.name: r for r in ROWS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown rows {unknown}; rows: {', '.join(known)}")
    watch_s = parse_duration(args.watch)
    if not 30 <= watch_s <= 3600:
        raise UsageError("--watch: between 30s and 1h")
    nodes = args.racks * args.nodes_per_rack
    requested = parse_speed(args.speed)
    args.speed = requested if requested is not None else first_guess(nodes)
    base = LabSettings(racks=args.racks, nodes_per_rack=args.nodes_per_rack, capacity_cores=40.0 * nodes / 1000)
    if running():
        raise LabError("a lab is up: each row starts a lab of its own; `stormlab down` first")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "mitigations.csv"
    done = read_rows(path)
    for n, name in enumerate(names, 1):
        if name in done:
            _say(f"{n}/{len(names)} {name}: already in {path}")
            continue
        _say(
            f"{n}/{len(names)} {name}: a lab of {nodes} nodes at speed {args.speed:g} "
            f"(~{Pace(args.speed).wall(watch_s + 60) / 60:.0f} min) …"
        )
        result = measure(base, known[name], args.speed, watch_s, io.StringIO())
        new = not path.exists()
        with path.open("a", newline="") as f:
            w = csv.DictWriter(f, COLUMNS)
            if new:
                w.writeheader()
            w.writerow({k: "" if result[k] is None else result[k] for k in COLUMNS})
        done[name] = {k: result[k] for k in COLUMNS}
        _say(f"   plateau {100 * (result['plateau'] or 0):.1f}%, recovered after {result['recovered_after_s']}, valid {result['valid']}")
    table = markdown([done[n] for n in names])
    (out / "summary.md").write_text(table + "\n")
    if args.page:
        replace_block(Path(args.page), "mitigations", table)
    print(json.dumps([done[n] for n in names], indent=1) if args.json else table)
    return 0


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
