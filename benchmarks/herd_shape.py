"""The herd after a heal, live and in the model, at one point of the map: how synchronised each
blipped rack's re-fetches reach the metadata service, and where the storm settles.

    .venv/bin/python benchmarks/herd_shape.py --blip-racks 4 --blip 5s [--link proxy|kernel] [--quick] [--runs 3]

Each live run is the sweep's own (`judge_live`: the demo's story, the blip at the moment of the
racks' schedule where the model blips); beside it a watcher reads the blip's lease from the link
proxy and, a few seconds after the heal, the metadata service's arrivals (`GET /arrivals`). For
each blipped rack it prints when its nodes' first requests after the heal arrived (offsets from
the heal: first, median, 90th percentile, last, in milliseconds), and the verdict and level of
the run beside the model's for the same point and seed. Run it alone: the host's load shapes the
herd. Prints one JSON line per run at the end (--json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from typing import Any

from chaos import client
from stormcore.auth import ensure_token
from stormcore.fleet import rack_of
from stormcore.labstate import running, state_dir
from stormcore.settings import LabSettings, parse_duration
from stormlab.model.grid import Point, judge_model
from stormlab.runs.live import QUICK, judge_live

WATCH_PERIODS = 12.0


def watch_the_heal(found: dict[str, Any], stop: threading.Event) -> None:
    """Find the blip's lease on the link proxy, then read the metadata service's arrivals after its heal."""
    while not stop.is_set():
        state = running()
        if state is None:
            time.sleep(0.2)
            continue
        token = ensure_token(state_dir())
        proxy, meta = state["components"]["linkproxy"]["url"], state["components"]["metadata"]["url"]
        try:
            faults = client.call("GET", f"{proxy}/faults", token, timeout=2)["faults"]
        except Exception:  # the lab starting or stopping: ask again
            time.sleep(0.2)
            continue
        blip = next((f for f in faults if f["fault"] == "blip"), None)
        if blip is None:
            time.sleep(0.1)
            continue
        heal = time.time() + float(blip["left_s"])
        found["heal"] = heal
        while time.time() < heal + 6 and not stop.is_set():
            time.sleep(0.2)
        found["arrivals"] = client.call("GET", f"{meta}/arrivals?since={heal - 0.5}", token, timeout=10)["arrivals"]
        return


def herd(arrivals: list[list[Any]], heal: float, racks: int) -> dict[int, dict[str, float]]:
    """Per blipped rack, each node's first arrival after the heal, as offsets in ms: first, median, p90, last."""
    first: dict[str, float] = {}
    for t, node in arrivals:
        if t >= heal and node not in first:
            first[node] = t - heal
    out = {}
    for rack in range(racks):
        offsets = sorted(1000 * dt for node, dt in first.items() if rack_of(node) == rack)
        if offsets:
            out[rack] = {
                "nodes": len(offsets),
                "first_ms": round(offsets[0], 1),
                "median_ms": round(statistics.median(offsets), 1),
                "p90_ms": round(offsets[int(0.9 * (len(offsets) - 1))], 1),
                "last_ms": round(offsets[-1], 1),
            }
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--blip-racks", type=int, default=4)
    p.add_argument("--blip", default="5s")
    p.add_argument("--gsis", type=int, default=2)
    p.add_argument("--link", choices=("auto", "proxy", "kernel"), default="auto")
    p.add_argument("--quick", action="store_true", help="the 400-node fleet")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--seed", type=int, default=2015)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    base = LabSettings(seed=args.seed, link_cut=args.link, **(QUICK if args.quick else {}))
    point = Point("2015", args.blip_racks, parse_duration(args.blip), args.gsis)
    model = judge_model(base, point, WATCH_PERIODS)
    print(f"model: {point.key}: {'stuck' if model.stuck else 'recovered'}, {100 * model.end_error:.1f}% at the end", flush=True)
    rows = []
    for n in range(args.runs):
        found: dict[str, Any] = {}
        stop = threading.Event()
        watcher = threading.Thread(target=watch_the_heal, args=(found, stop), daemon=True)
        watcher.start()
        live = judge_live(base, point, WATCH_PERIODS, 1.0)
        stop.set()
        shape = herd(found.get("arrivals", []), found.get("heal", 0.0), args.blip_racks) if "arrivals" in found else {}
        row = {
            "run": n + 1,
            "point": point.key,
            "link": args.link,
            "nodes": point.settings(base).nodes_total,
            "live": {"stuck": live.stuck, "end_error": round(live.end_error, 3), "valid": live.valid},
            "model": {"stuck": model.stuck, "end_error": round(model.end_error, 3)},
            "herd": shape,
        }
        rows.append(row)
        print(
            f"run {n + 1}: live {'stuck' if live.stuck else 'recovered'} {100 * live.end_error:.1f}%"
            f"{'' if live.valid else ' (INVALID)'}; model {100 * model.end_error:.1f}%",
            flush=True,
        )
        for rack, figures in shape.items():
            print(f"  rack {rack}: {figures}", flush=True)
    if args.json:
        for row in rows:
            print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
