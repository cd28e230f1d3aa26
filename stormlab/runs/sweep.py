"""`stormlab sweep`: the map of where the lab is metastable, and which fix moves the 2015 point.

A point is a trigger (how many racks are blipped, for how long), a membership size (the GSIs
each indexed table carries: 2 in 2015) and a panel: the 2015 settings or one fix (a longer
allowance, fewer renewals, more capacity, cells, a retry policy, …). Each point is judged by
the same story as the demo: the fleet settles, the racks are blipped, and ``--watch`` renewal
periods after the blip ends the customers' error over the last period says **stuck** (at least
20%, the demo's "the storm holds") or **recovered**.

The dense grid runs in the reference model (the lab's own cores in virtual time), on every core
of this machine; a seeded sample of its points runs live, on real processes, one after another,
and the agreement between the two verdicts is reported. Results go to CSV files in ``--out`` as
they come: a sweep stopped half way resumes where it stopped (points are keyed by what they are; a
result measured on other code, :func:`fresh` says, runs again).
The live points run through one link mechanism (``--link``: the kernel's links where the lab may,
the link proxy where it may not, or either asked for), and their results are kept per mechanism
(``live-kernel.csv``, ``live-proxy.csv``): a point measured through one is never reused for the
other, and the summary reports the agreement of each mechanism measured.
Outputs: ``model.csv``, ``live-<link>.csv``, ``map.png``, ``summary.md``, ``summary.json``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from stormcore.commandline import deprecated, page_and_json
from stormcore.errors import LabError, UsageError
from stormcore.labstate import running
from stormcore.settings import LabSettings, SettingsError, parse_duration
from stormlab.artefacts.blocks import replace_block
from stormlab.artefacts.sweep_map import draw
from stormlab.engine.speed import first_guess, parse_speed
from stormlab.model.grid import (
    PANELS,
    PHASE_PANELS,
    PHASES,
    PHASES_LIVE,
    Grid,
    Point,
    Verdict,
    agreement,
    estimate_check,
    judge_model,
    live_sample,
    markdown,
    summarize,
)
from stormlab.runs.live import (
    MEASURED_LINKS,
    QUICK,
    add_link_cut,
    append_result,
    commit,
    fresh,
    judge_live,
    live_link,
    live_path,
    run_live,
)


def parse_list(text: str, kind: Callable[[str], Any], what: str) -> tuple:
    try:
        values = tuple(kind(v.strip()) for v in text.split(",") if v.strip())
    except (ValueError, SettingsError) as exc:
        raise UsageError(f"{what}: {exc}") from None
    if not values:
        raise UsageError(f"{what}: give at least one value")
    return values


# -- the sweep ----------------------------------------------------------------------------------


def timed_judge_model(base: LabSettings, point: Point, watch_periods: float) -> Verdict:
    """The model's verdict on one point, with what it cost (run in a worker process)."""
    started = time.monotonic()
    verdict = judge_model(base, point, watch_periods)
    return dataclasses.replace(verdict, seconds=time.monotonic() - started)


def run_model(
    base: LabSettings, points: Sequence[Point], path: Path, watch_periods: float, jobs: int, say: Callable[[str], None]
) -> dict[str, Verdict]:
    """Every point not in ``path`` yet (or measured there on other code), on ``jobs`` processes; each
    result appended as it comes, stamped with the code it ran."""
    done = fresh(path, say)
    stamp = commit(path.parent)
    todo = [p for p in points if p.key not in done]
    say(f"model: {len(points)} points, {len(points) - len(todo)} already in {path}, {len(todo)} to run on {jobs} processes")
    if not todo:
        return done
    started, last_said = time.monotonic(), 0.0
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(timed_judge_model, base, p, watch_periods): p for p in todo}
        for n, future in enumerate(concurrent.futures.as_completed(futures), 1):
            point, verdict = futures[future], dataclasses.replace(future.result(), commit=stamp)
            append_result(path, point, verdict)
            done[point.key] = verdict
            now = time.monotonic()
            if now - last_said >= 5 or n == len(todo):
                last_said = now
                left = (now - started) / n * (len(todo) - n)
                say(f"  model {n}/{len(todo)}  {point.key}: {'stuck' if verdict.stuck else 'recovered'}  (~{left:.0f}s left)")
    return done


def agreement_by_link(
    sample: Sequence[Point], model: dict[str, Verdict], out: Path, say: Callable[[str], None], ran: tuple[str, dict[str, Verdict]]
) -> dict[str, dict[str, Any]]:
    """The model's agreement with the live points of ``sample`` through each link mechanism that has
    any on this code in ``out`` (``ran``: the mechanism this sweep ran, with its results)."""
    by_link = {}
    for link in MEASURED_LINKS:
        path = live_path(out, link)
        live = ran[1] if ran[0] == link else fresh(path, say) if path.exists() else {}
        if any(p.key in live for p in sample):
            by_link[link] = agreement(sample, model, live)
    return by_link


# -- what the results in --out were measured for ---------------------------------------------


def pin_what_was_measured(out: Path, base: LabSettings, watch_periods: float) -> None:
    """A point's key names its panel and trigger, not the fleet, the seed or the moment it is
    judged: ``sweep.json`` in ``out`` records those, and a sweep resumed there with others is refused
    (its results would answer a question they were not measured for)."""
    wanted = {
        "racks": base.racks,
        "nodes_per_rack": base.nodes_per_rack,
        "capacity_cores": base.capacity_cores,
        "seed": base.seed,
        "watch_periods": watch_periods,
    }
    path = out / "sweep.json"
    try:
        held = json.loads(path.read_text()) if path.exists() else None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not readable ({exc}); move it away to start this sweep afresh") from exc
    if isinstance(held, dict):
        differ = {k: (held.get(k), v) for k, v in wanted.items() if held.get(k) != v}
        if differ:
            said = ", ".join(f"{k} {then} there, {now} now" for k, (then, now) in differ.items())
            raise UsageError(f"{out} holds a sweep measured for other settings ({said}): run with the same, or another --out")
    path.write_text(json.dumps(wanted, indent=1) + "\n")


# -- the command -------------------------------------------------------------------------------

AGREE_VERDICT, AGREE_LEVEL = 0.9, 0.8  # the sweep exits 1 below these shares of live points agreeing with the model


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out",
        type=Path,
        default="reports/sweep",
        help="where the CSVs, map and summary go; a sweep there resumes (default reports/sweep)",
    )
    p.add_argument("--panels", default=",".join(PANELS), help=f"the 2015 settings and the fixes to map (default all: {', '.join(PANELS)})")
    p.add_argument(
        "--blip-sizes",
        dest="blip_racks",
        metavar="SIZES",
        default="1,2,3,4,5,6",
        help="the triggers' sizes: racks blipped, a comma list (default 1,…,6 of 10)",
    )
    p.add_argument(
        "--blip-durations",
        dest="blip",
        metavar="DURATIONS",
        default="2s,5s,10s",
        help="the triggers' durations, a comma list (default 2s,5s,10s)",
    )
    deprecated(p, "--blip-racks", "--blip-sizes", dest="blip_racks")
    deprecated(p, "--blip", "--blip-durations", dest="blip")
    p.add_argument("--gsis", default="0,1,2,3,4", help="membership growth: GSIs per indexed table (2015: 2; default 0,…,4)")
    p.add_argument(
        "--watch-periods",
        dest="watch",
        metavar="PERIODS",
        type=float,
        default=12,
        help="renewal periods after the blip when a point is judged (default 12)",
    )
    deprecated(p, "--watch", "--watch-periods", dest="watch", type=float)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes for the model's points (default: every core)")
    p.add_argument(
        "--live",
        type=int,
        default=30,
        help="points to run live as well, one after another (about 2.5 min each): the 2015 point, those near a threshold, "
        "then drawn uniformly (default 30; 0: none)",
    )
    p.add_argument(
        "--live-phases",
        type=int,
        default=PHASES_LIVE,
        help=f"and on top of those, this many blip moments of the 2015 point live in each panel where the moment matters "
        f"({', '.join(PHASE_PANELS)}), the blip placed at the model's moment of the renewal schedule (default {PHASES_LIVE})",
    )
    p.add_argument(
        "--live-retries",
        type=int,
        default=1,
        help="a live point the host shaped (an INVALID run) runs again up to this many times before it is left out (default 1)",
    )
    p.add_argument("--speed", default="1", help="time dilation of the live runs: a number (0.05-20) or auto (default 1)")
    add_link_cut(p, "results are kept per mechanism (live-kernel.csv, live-proxy.csv) and the summary reports each")
    p.add_argument("--seed", type=int, default=2015, help="the seed of every point and of the live sample (default 2015)")
    p.add_argument("--quick", action="store_true", help="a 400-node fleet (the tests'): minutes instead of an hour")
    page_and_json(p, "sweep", "make sweep: docs/sweep.md", "the summary")


def run(args: argparse.Namespace) -> int:
    unknown = [p for p in args.panels.split(",") if p.strip() and p.strip() not in PANELS]
    if unknown:
        raise UsageError(f"unknown panels {unknown}; panels: {', '.join(PANELS)}")
    base = LabSettings(seed=args.seed, link_cut=args.link, **(QUICK if args.quick else {}))
    grid = Grid(
        tuple(p.strip() for p in args.panels.split(",") if p.strip()),
        parse_list(args.blip_racks, int, "--blip-sizes"),
        parse_list(args.blip, parse_duration, "--blip-durations"),
        parse_list(args.gsis, int, "--gsis"),
    )
    if any(not 1 <= r <= base.racks for r in grid.blip_racks):
        raise UsageError(f"--blip-racks: between 1 and {base.racks}")
    if any(d <= 0 or d > 600 for d in grid.blip_s):
        raise UsageError("--blip: between 0 and 10m")
    if any(not 0 <= g <= 20 for g in grid.gsis):
        raise UsageError("--gsis: between 0 and 20")
    if (
        not 1 <= args.watch <= 360
        or args.jobs < 1
        or args.live < 0
        or not 0 <= args.live_phases < PHASES
        or not 0 <= args.live_retries <= 5
    ):
        raise UsageError(
            f"--watch between 1 and 360 periods, --jobs at least 1, --live at least 0, --live-phases 0 to {PHASES - 1}, "
            "--live-retries 0 to 5"
        )
    if args.live and running():
        raise LabError("a lab is up: the live points start labs of their own; `stormlab down` first (or --live 0)")
    if args.live:
        base = live_link(base)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pin_what_was_measured(out, base, args.watch)
    say = _say
    points = grid.points()
    for p in points:
        p.settings(base)  # a panel that makes impossible settings fails here, before anything runs
    model = run_model(base, points, out / "model.csv", args.watch, args.jobs, say)
    sample = live_sample(base, points, args.live, args.seed, args.live_phases)
    speed = parse_speed(args.speed)
    live_speed = speed if speed is not None else first_guess(base.nodes_total)
    if (out / "live.csv").exists():
        say(f"{out / 'live.csv'}: live points from before results were kept per link mechanism; not reused")
    live = (
        run_live(base, sample, live_path(out, base.link_cut), args.watch, live_speed, say, judge_live, args.live_retries) if sample else {}
    )
    agreed = agreement(sample, model, live) if sample else None
    summary = summarize(grid, base, model, agreed, estimate_check(base, points, model))
    summary["link"] = base.link_cut if sample else None
    summary["agreement_by_link"] = agreement_by_link(sample, model, out, say, (base.link_cut, live)) if sample else {}
    summary["live_sample"] = [{**asdict(p), "model": asdict(model[p.key]), "live": asdict(live[p.key])} for p in sample if p.key in live]
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    table = markdown(summary)
    (out / "summary.md").write_text(table + "\n")
    png = draw(grid, base, model, live, out / "map.png")
    if args.page:
        replace_block(Path(args.page), "sweep", table)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(table)
        csvs = ", ".join(str(p) for p in [out / "model.csv", *(live_path(out, link) for link in summary["agreement_by_link"])])
        print(f"\nmap: {png}\nCSV: {csvs}\nsummary: {out / 'summary.md'}")
    measured = [a for a in summary["agreement_by_link"].values() if a["ratio"] is not None]
    return 0 if all(a["ratio"] >= AGREE_VERDICT and a["level_ratio"] >= AGREE_LEVEL for a in measured) else 1


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
