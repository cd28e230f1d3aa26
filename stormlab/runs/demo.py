"""`stormlab demo`: the 2015 story in one command.

Starts the lab, waits for every node to serve, watches the healthy baseline, shows the margin
(how much of the allowance the biggest renewals use), blips the chosen racks, watches the
storm form and hold (or heal), then prints a summary and writes a PNG chart and the samples.

At ``--speed X`` the whole profile runs X times faster (below 1: slow motion); every time the
demo prints (seconds from the blip, onset, recovery, renewal latency) is in profile time, and
the event-loop lag (the host's) in wall-clock milliseconds. ``--speed auto`` picks the speed
(stormlab.engine.speed): a baseline that cannot carry the herd restarts the lab slower, and an
INVALID run is run again slower; the summary says which speeds were tried and why.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import TextIO

import aiohttp

from chaos import catalog
from stormcore.auth import ensure_token, headers
from stormcore.errors import EXIT_INVALID, LabError
from stormcore.fleet import cell_of, grid_slot, holds_gsi_heavy, node_index, rack_of
from stormcore.settings import LabSettings, parse_duration
from stormlab.artefacts.chart import write_chart
from stormlab.engine import launcher, observe
from stormlab.engine.reading import Reading
from stormlab.engine.speed import Baseline, afford, first_guess, next_slower, parse_speed
from stormlab.engine.story import Sample, cell_figures, host_fields, host_figures, rolling, summarize


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--blip-racks", default="3", help="racks to blip: a count (3 = racks 0,1,2) or a list (2,5,7)")
    p.add_argument("--blip", default="5s", help="how long the blip lasts (default 5s)")
    p.add_argument("--settle", default="30s", help="healthy baseline to watch before the blip (default 30s)")
    p.add_argument(
        "--watch",
        default=None,
        help="how long to watch after the trigger (default 240s after the blip ends; the lease manager's story: 720s after the repair)",
    )
    p.add_argument(
        "--outage",
        default="5m",
        help="the lease manager's story (October 2025): how long the database endpoint's DNS record stays empty (default 5m)",
    )
    p.add_argument("--out", type=Path, default="reports", help="directory for the PNG chart and the samples (default reports/)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout (progress goes to stderr)")


class Slower(Exception):
    """The baseline says the herd would break the validity check at this speed."""

    def __init__(self, speed: float, why: str) -> None:
        super().__init__(why)
        self.speed, self.why = speed, why


LOADGEN_WINDOW_S = 10.0  # wall seconds of requests behind each of loadgen's error ratios


class Demo:
    """Drives one story against a running lab and keeps its samples."""

    def __init__(
        self,
        state: dict,
        out,
        settle_s: float,
        blip_s: float,
        watch_s: float,
        blip_racks: str,
        auto: bool = False,
        blip_phase: float | None = None,
    ) -> None:
        """``settle_s``, ``blip_s``, ``watch_s``: profile seconds. ``auto``: check the baseline
        against the herd (raise :class:`Slower` before the blip if it cannot carry it).
        ``blip_phase``: blip this fraction of a renewal period past a slot of the racks' schedule
        (as the reference model does), not whenever the baseline ends."""
        self.state, self.out, self.auto, self.blip_phase = state, out, auto, blip_phase
        self.settings = LabSettings.from_env(state["settings"])
        self.speed, self.pace = self.settings.speed, self.settings.pace
        self.settle_s, self.blip_s, self.watch_s = settle_s, blip_s, watch_s
        self.racks = catalog.RACKS_ARG.parse(blip_racks, self.settings.racks)
        self.samples: list[Sample] = []
        self.cell_readings: list[tuple[float, dict[str, float | None]]] = []  # with cells: each cell's customers
        self.t0 = time.monotonic()
        self.profile = self.settings.profile_time()
        self.allowance_s = self.profile.allowance_s  # profile time, as every figure shown

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def now(self) -> float:
        """Profile seconds since the demo began."""
        return self.pace.profile(time.monotonic() - self.t0)

    def profile_s(self, wall_s: float | None) -> float | None:
        return self.pace.profile(wall_s)

    async def sample(self, session: aiohttp.ClientSession) -> Reading:
        snap = await observe.snapshot(session, self.state)
        if snap.cell_error_ratio:
            self.cell_readings.append((self.now(), dict(snap.cell_error_ratio)))
        self.samples.append(
            Sample(
                self.now(),
                snap.customer_requests_total or 0,
                snap.customer_failures_total or 0,
                snap.nodes_disqualified,
                snap.metadata_inflight or 0,
                self.profile_s(snap.renewal_p99_s),
                self.profile_s(snap.metadata_processing_p99_s),
                snap.loop_lag_p99_s or 0.0,
                **host_fields(snap),
            )
        )
        return snap

    def live_line(self, snap: Reading, origin: float, label: str) -> None:
        recent = rolling([s for s in self.samples if s.t >= self.samples[-1].t - 8.0], 4.0)  # profile seconds
        err = recent[-1][1] if recent else 0.0
        bar = "#" * round(30 * err)
        renewal = self.profile_s(snap.renewal_p99_s) or 0.0
        self.say(
            f"{label} {self.now() - origin:+6.0f}s  customer errors {100 * err:5.1f}% |{bar:<30}|  "
            f"disqualified {snap.nodes_disqualified:4d}  metadata in flight {snap.metadata_inflight or 0:4d}  "
            f"renewal p99 {renewal:.2f}s/{self.allowance_s:.2f}s  lag {1000 * (snap.loop_lag_p99_s or 0):.0f}ms"
            + "".join(f"  cell {c} {100 * (r or 0):4.1f}%" for c, r in sorted((snap.cell_error_ratio or {}).items()))
        )

    async def watch(self, session: aiohttp.ClientSession, seconds: float, origin: float, label: str, every: int) -> Reading:
        """Sample once a wall-clock second for ``seconds`` of profile time."""
        end, tick, snap = self.now() + seconds, 0, Reading()
        while self.now() < end:
            taken = time.monotonic()
            snap = await self.sample(session)
            if tick % every == 0:
                self.live_line(snap, origin, label)
            tick += 1
            await asyncio.sleep(max(0.0, taken + 1.0 - time.monotonic()))
        return snap

    async def wait_for_moment(self, session: aiohttp.ClientSession, phase: float) -> None:
        """Until ``phase`` of a renewal period past a slot of the racks' schedules (counted from
        where each rack began them; the median rack's, the racks start within moments)."""
        origins = []
        for name, comp in self.state["components"].items():
            if name.startswith("rack-"):  # each rack's own status, without its nodes (a quick read)
                async with session.get(f"{comp['url']}/status") as resp:
                    origin = (await resp.json()).get("schedule_origin_unix")
                if origin:
                    origins.append(origin)
        origins.sort()
        if not origins:
            raise LabError("the racks do not say where their renewal schedules began: the blip cannot be placed")
        at = grid_slot(origins[len(origins) // 2], self.settings.renewal_period_s, phase, time.time() + 1.0)
        self.say(f"placing the blip {phase:.3f} of a renewal period past the racks' slots: in {at - time.time():.1f}s (wall clock)")
        await asyncio.sleep(max(0.0, at - time.time()))

    async def per_node(self, session: aiohttp.ClientSession) -> dict[str, dict]:
        snap = await observe.snapshot(session, self.state, nodes=True)
        return {n["id"]: n for r in (snap.racks or {}).values() for n in r["nodes"]}

    def by_class(self, nodes: dict[str, dict]) -> dict[str, float]:
        """The fraction of the big-membership and of the small-membership nodes refusing now."""
        settings = LabSettings.from_env(self.state["settings"])
        out = {}
        for name, big in (("big", True), ("small", False)):
            members = [n for n in nodes.values() if holds_gsi_heavy(rack_of(n["id"]), node_index(n["id"]), settings) == big]
            out[name] = sum(n["state"] != "serving" for n in members) / max(1, len(members))
        return out

    async def run(self) -> dict:
        settle, blip, watch, racks = self.settle_s, self.blip_s, self.watch_s, self.racks
        period = self.profile.renewal_period_s
        async with aiohttp.ClientSession() as session:
            await observe.wait_serving(session, self.state, 3 * self.settings.renewal_period_s + 30, self.say)
            self.say(f"all {self.settings.nodes_total} nodes serving after {time.monotonic() - self.t0:.0f}s (wall clock)")
            # every node's disqualifications so far, read now rather than at the blip: reading every
            # rack's nodes takes each rack a few milliseconds, all at once, and the moment of the
            # blip is the one the lab's loops must keep clear (a healthy baseline adds none)
            before = await self.per_node(session)
            settle_start = self.now()
            self.say(f"watching the healthy lab for {settle:.0f}s (the baseline) …")
            snap = await self.watch(session, settle, settle_start, "baseline", every=5)
            self.say(self.margin(snap))
            if self.auto:
                self.check_baseline(settle_start)
            if self.blip_phase is not None:
                await self.wait_for_moment(session, self.blip_phase)
            proxy = self.state["components"]["linkproxy"]["url"]
            blip_start = self.now()
            auth = headers(ensure_token(Path(self.state["directory"])))
            body = catalog.request("blip", {"racks": racks, "duration": self.pace.wall(blip)}).body
            async with session.post(f"{proxy}/faults", json=body, headers=auth) as resp:
                resp.raise_for_status()
            self.say(f"BLIP: racks {racks} cannot reach the metadata service for {blip:g}s")
            await self.watch(session, blip + watch, blip_start, "storm", every=2)
            after = await self.per_node(session)
            memory = observe.lab_memory(self.state)  # after the storm's herd and queues: near its most
            run_window = self.pace.wall(self.now() - settle_start)
            run_lag = (await observe.snapshot(session, self.state, lag_window_s=run_window)).loop_lag_p99_s
        outside = sum(
            1 for n, node in after.items() if node["disqualifications"] > before[n]["disqualifications"] and rack_of(n) not in racks
        )
        summary = summarize(self.samples, settle_start, blip_start, blip_start + blip, self.settings.allowance_s, period, run_lag)
        summary["speed"] = self.speed
        summary["disqualified_outside_blip"] = outside
        summary["disqualified_at_end"] = self.by_class(after)
        summary["blip_racks"] = racks
        summary["memory"] = memory
        if self.settings.cells > 1:
            blipped = {cell_of(r, self.settings) for r in racks}
            since = blip_start + self.pace.profile(LOADGEN_WINDOW_S)  # loadgen's window, in profile seconds
            summary |= cell_figures(self.cell_readings, blipped, since, period)
        summary["settings"] = {k.removeprefix("STORMLAB_").lower(): v for k, v in self.state["settings"].items()}
        return {**summary, "_times": {"settle_start": settle_start, "blip_start": blip_start, "blip_end": blip_start + blip}}

    def check_baseline(self, settle_start: float) -> None:
        """``--speed auto``: raise :class:`Slower` if the baseline cannot carry the herd."""
        worst = host_figures(self.samples, settle_start)
        baseline = Baseline(
            cpu_ratio=worst["cpu_busiest_ratio"],
            lab_cpu_cores=worst["lab_cpu_worst_cores"],
            host_cores=max((s.host_cores or 0 for s in self.samples), default=0) or None,
            cpu_wait_s=worst["cpu_wait_worst_s"],
            loop_lag_s=worst["loop_lag_worst_10s_p99_s"] or 0.0,
            allowance_s=self.settings.allowance_s,
        )
        speed, why = afford(self.speed, baseline)
        self.say(
            f"speed {self.speed:g}: baseline busiest process {baseline.cpu_ratio or 0:.0%} of a core, the lab "
            f"{baseline.lab_cpu_cores or 0:.2f} of {baseline.host_cores} cores, longest wait for a core "
            f"{1000 * (baseline.cpu_wait_s or 0):.1f}ms, lag {1000 * baseline.loop_lag_s:.0f}ms: {why}"
        )
        if speed < self.speed:
            raise Slower(speed, why)

    def margin(self, snap: Reading) -> str:
        sizes = dict(snap.membership_sizes)
        p99 = self.profile_s(snap.metadata_processing_p99_s) or 0.0
        return (
            f"THE MARGIN: membership sizes {sizes} (entries: nodes); the biggest renewals take "
            f"{p99:.2f}s of the {self.allowance_s:.2f}s allowance ({100 * (snap.margin or 0.0):.0f}% used), "
            "and nobody was watching membership size"
        )


def run(args: argparse.Namespace, settings: LabSettings) -> int:
    durations = parse_duration(args.settle), parse_duration(args.blip), parse_duration(args.watch or "240s")
    catalog.RACKS_ARG.parse(args.blip_racks, settings.racks)  # refuse bad input before starting anything
    requested = parse_speed(args.speed)
    out = sys.stderr if args.json else sys.stdout
    print(banner(settings, args.speed), file=out, flush=True)
    signal.signal(signal.SIGTERM, _interrupted)  # so `finally: down()` runs on SIGTERM too
    demo, result = run_at_a_valid_speed(settings, requested, args, durations, out)
    result["speed_requested"] = args.speed
    result["chart"] = str(write_report(demo, result, Path(args.out)))
    print(json.dumps(result, indent=1) if args.json else render_summary(result))
    return 0 if result["valid"] else EXIT_INVALID  # its figures are the host's: say so to whatever ran it


def banner(settings: LabSettings, speed: str) -> str:
    return (
        f"stormlab demo: {settings.nodes_total} nodes in {settings.racks} racks"
        + (f" in {settings.cells} cells" if settings.cells > 1 else "")
        + f", allowance {settings.allowance_s:g}s, retry {settings.retry_policy}, GSI growth {'on' if settings.gsi_growth else 'off'}, "
        f"abandoned work {settings.abandoned_work}, speed {speed}"
    )


def run_at_a_valid_speed(
    settings: LabSettings, requested: float | None, args: argparse.Namespace, durations: tuple[float, float, float], out: TextIO
) -> tuple[Demo, dict]:
    """The story on a lab of its own at ``requested`` speed, or with ``--speed auto`` (None) at the
    fastest speed whose baseline can carry the herd and whose run is valid; the summary says
    which speeds were tried and why they were left."""
    speed = requested if requested is not None else first_guess(settings.nodes_total)
    tried: list[dict] = []
    while True:
        if requested is None:
            print(f"speed auto: trying {speed:g} (profile time runs {speed:g}x the wall clock)", file=out, flush=True)
        external = {args.external_rack_at: args.external_rack} if getattr(args, "external_rack", None) else None
        state = launcher.up(settings.sped_up(speed), args.base_port, external=external)
        print(state["links"], file=out, flush=True)
        try:
            demo = Demo(state, out, *durations, args.blip_racks, auto=requested is None)
            result = asyncio.run(demo.run())
        except Slower as slower:
            tried.append({"speed": speed, "why": f"before the blip: {slower.why}"})
            print(f"speed auto: restarting at {slower.speed:g}: {slower.why}", file=out, flush=True)
            speed = slower.speed
            continue
        finally:
            launcher.down()
        slower_speed = next_slower(speed)
        if requested is not None or result["valid"] or slower_speed is None:
            return demo, result | {"speeds_tried": tried}
        tried.append({"speed": speed, "why": "INVALID: " + "; ".join(result["invalid_reasons"])})
        print(f"speed auto: the run at {speed:g} was INVALID; running it again at {slower_speed:g}", file=out, flush=True)
        speed = slower_speed


def write_report(demo: Demo, result: dict, out_dir: Path) -> Path:
    """The chart and the samples of a run (``demo-STAMP.png``, ``.json``); the chart's path."""
    times = result.pop("_times")
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    chart = write_chart(demo.samples, times, demo.allowance_s, out_dir / f"demo-{stamp}.png", result)
    samples = [s.__dict__ for s in demo.samples]
    (out_dir / f"demo-{stamp}.json").write_text(json.dumps({"summary": result, "times": times, "samples": samples}, indent=1))
    return chart


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _memory_lines(r: dict) -> list[str]:
    m = r.get("memory")
    if not m:
        return []
    return [
        f"  memory (resident)           the lab {m['total_mb']:,.0f} MB, {m['per_node_kb']:g} kB a node; "
        f"the largest rack {m['rack_mb']:g} MB ({m['per_rack_node_kb']:g} kB a node)"
    ]


def _cell_lines(r: dict, pct) -> list[str]:
    if "cell_plateau" not in r:
        return []
    plateaus = ", ".join(f"cell {c} {pct(v)}" for c, v in r["cell_plateau"].items())
    return [
        f"  cells (last 60 s)           {plateaus}; blipped: {', '.join(map(str, r['blipped_cells']))}",
        f"  blast radius                {pct(r['outside_worst_error_ratio'])} worst 10 s outside the blipped cells",
    ]


def render_summary(r: dict) -> str:
    def pct(x):
        return "n/a" if x is None else f"{100 * x:.1f}%"

    onset = "n/a" if r["onset_s"] is None else f"{r['onset_s']:.0f}s"
    recovery = "never" if r["recovery_s"] is None else f"{r['recovery_s']:.0f}s"
    verdict = "THE STORM HOLDS: a metastable failure, long after the blip is gone" if r["storm_holds"] else "the lab healed by itself"
    if not r["valid"]:
        verdict = "INVALID RUN: the host, not the model, shaped it; the figures below are not the storm's"
    speed = f"{r['speed']:g}x" + (" (chosen by --speed auto)" if r.get("speed_requested") == "auto" else "")
    lines = ["", verdict]
    lines += [f"  INVALID because {reason}" for reason in r["invalid_reasons"]]
    lines += [f"  speed {t['speed']:g} not used: {t['why']}" for t in r.get("speeds_tried", [])]
    lines += [
        f"  speed                       {speed}; times below in profile time",
        f"  baseline customer error     {pct(r['baseline_error_ratio'])}",
        f"  peak customer error         {pct(r['peak_error_ratio'])}",
        f"  plateau (last 60 s)         {pct(r['plateau_error_ratio'])}   (2015: about 55%)",
        f"  last renewal period         {pct(r['last_period_error_ratio'])}",
        f"  onset (blip to plateau)     {onset}",
        f"  back under 1% after         {recovery}",
        f"  disqualified outside blip   {r['disqualified_outside_blip']} nodes",
        *_cell_lines(r, pct),
        f"  event-loop lag p99          {1000 * r['loop_lag_p99_s']:.0f}ms over the run, "
        f"{1000 * r['loop_lag_worst_10s_p99_s']:.0f}ms in the worst 10 s (wall clock)",
        f"  CPU                         busiest process {pct(r['cpu_busiest_ratio'])} of a core; the lab up to "
        f"{r['lab_cpu_worst_cores'] or 0:.2f} cores; longest wait for a core {1000 * (r['cpu_wait_worst_s'] or 0):.1f}ms a run; "
        f"host busy up to {pct(r['host_cpu_worst_ratio'])}, steal {pct(r['host_steal_worst_ratio'])}",
        *_memory_lines(r),
        f"  validity                    {'valid run' if r['valid'] else 'INVALID'}",
        f"  chart                       {r['chart']}",
    ]
    return "\n".join(lines)
