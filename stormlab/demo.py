"""`stormlab demo`: the 2015 story in one command.

Starts the lab, waits for every node to serve, watches the healthy baseline, shows the margin
(how much of the allowance the biggest renewals use), blips the chosen racks, watches the
storm form and hold (or heal), then prints a summary and writes a PNG chart and the samples.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path

import aiohttp

from chaos import catalog
from common.auth import ensure_token, headers
from common.errors import LabError
from common.fleet import holds_gsi_heavy, node_index, rack_of
from common.settings import LabSettings, parse_duration
from stormlab import launcher, observe
from stormlab.chart import write_chart
from stormlab.story import Sample, rolling, summarize


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--blip-racks", default="3", help="racks to blip: a count (3 = racks 0,1,2) or a list (2,5,7)")
    p.add_argument("--blip", default="5s", help="how long the blip lasts (default 5s)")
    p.add_argument("--settle", default="30s", help="healthy baseline to watch before the blip (default 30s)")
    p.add_argument("--watch", default="240s", help="how long to watch after the blip ends (default 240s)")
    p.add_argument("--out", default="reports", help="directory for the PNG chart and the samples (default reports/)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout (progress goes to stderr)")


class Demo:
    """Drives one story against a running lab and keeps its samples."""

    def __init__(self, state: dict, out, settle_s: float, blip_s: float, watch_s: float, blip_racks: str) -> None:
        self.state, self.out = state, out
        self.settle_s, self.blip_s, self.watch_s = settle_s, blip_s, watch_s
        self.racks = catalog.RACKS_ARG.parse(blip_racks, int(state["settings"]["STORMLAB_RACKS"]))
        self.samples: list[Sample] = []
        self.t0 = time.monotonic()
        self.allowance_s = float(state["settings"]["STORMLAB_ALLOWANCE_S"])

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def sample(self, session: aiohttp.ClientSession) -> dict:
        snap = await observe.snapshot(session, self.state)
        self.samples.append(
            Sample(
                self.now(),
                snap["customer_requests_total"] or 0,
                snap["customer_failures_total"] or 0,
                snap["nodes_disqualified"],
                snap["metadata_inflight"] or 0,
                snap["renewal_p99_s"],
                snap["metadata_processing_p99_s"],
                snap["loop_lag_p99_s"] or 0.0,
            )
        )
        return snap

    def live_line(self, snap: dict, origin: float, label: str) -> None:
        recent = rolling(self.samples[-8:], 4.0)
        err = recent[-1][1] if recent else 0.0
        bar = "#" * round(30 * err)
        renewal = snap["renewal_p99_s"] or 0.0
        self.say(
            f"{label} {self.now() - origin:+6.0f}s  customer errors {100 * err:5.1f}% |{bar:<30}|  "
            f"disqualified {snap['nodes_disqualified']:4d}  metadata in flight {snap['metadata_inflight'] or 0:4d}  "
            f"renewal p99 {renewal:.2f}s/{self.allowance_s:.2f}s  lag {1000 * (snap['loop_lag_p99_s'] or 0):.0f}ms"
        )

    async def watch(self, session: aiohttp.ClientSession, seconds: float, origin: float, label: str, every: int) -> dict:
        end, tick, snap = self.now() + seconds, 0, {}
        while self.now() < end:
            snap = await self.sample(session)
            if tick % every == 0:
                self.live_line(snap, origin, label)
            tick += 1
            await asyncio.sleep(max(0.0, self.samples[-1].t + 1.0 - self.now()))
        return snap

    async def wait_serving(self, session: aiohttp.ClientSession, limit_s: float) -> None:
        deadline = self.now() + limit_s
        while self.now() < deadline:
            snap = await observe.snapshot(session, self.state)
            if snap["nodes_total"] and snap["nodes_serving"] == snap["nodes_total"]:
                self.say(f"all {snap['nodes_total']} nodes serving after {self.now():.0f}s")
                return
            self.say(f"  … {snap['nodes_serving']}/{snap['nodes_total']} nodes serving")
            await asyncio.sleep(2.0)
        raise LabError(f"not every node was serving after {limit_s:.0f}s")

    async def per_node(self, session: aiohttp.ClientSession) -> dict[str, dict]:
        snap = await observe.snapshot(session, self.state, nodes=True)
        return {n["id"]: n for r in snap["racks"].values() for n in r["nodes"]}

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
        period = float(self.state["settings"]["STORMLAB_RENEWAL_PERIOD_S"])
        async with aiohttp.ClientSession() as session:
            await self.wait_serving(session, 3 * period + 30)
            settle_start = self.now()
            self.say(f"watching the healthy lab for {settle:.0f}s (the baseline) …")
            snap = await self.watch(session, settle, settle_start, "baseline", every=5)
            self.say(self.margin(snap))
            before = await self.per_node(session)
            proxy = self.state["components"]["linkproxy"]["url"]
            blip_start = self.now()
            auth = headers(ensure_token(Path(self.state["directory"])))
            body = catalog.request("blip", {"racks": racks, "duration": blip}).body
            async with session.post(f"{proxy}/faults", json=body, headers=auth) as resp:
                resp.raise_for_status()
            self.say(f"BLIP: racks {racks} cannot reach the metadata service for {blip:g}s")
            await self.watch(session, blip + watch, blip_start, "storm", every=2)
            after = await self.per_node(session)
            run_lag = (await observe.snapshot(session, self.state, lag_window_s=self.now() - settle_start))["loop_lag_p99_s"]
        outside = sum(
            1 for n, node in after.items() if node["disqualifications"] > before[n]["disqualifications"] and rack_of(n) not in racks
        )
        summary = summarize(self.samples, settle_start, blip_start, blip_start + blip, self.allowance_s, period, run_lag)
        summary["disqualified_outside_blip"] = outside
        summary["disqualified_at_end"] = self.by_class(after)
        summary["blip_racks"] = racks
        summary["settings"] = {k.removeprefix("STORMLAB_").lower(): v for k, v in self.state["settings"].items()}
        return {**summary, "_times": {"settle_start": settle_start, "blip_start": blip_start, "blip_end": blip_start + blip}}

    def margin(self, snap: dict) -> str:
        sizes = snap["membership_sizes"]
        p99 = snap["metadata_processing_p99_s"] or 0.0
        return (
            f"THE MARGIN: membership sizes {sizes} (entries: nodes); the biggest renewals take "
            f"{p99:.2f}s of the {self.allowance_s:.2f}s allowance ({100 * p99 / self.allowance_s:.0f}% used), "
            "and nobody was watching membership size"
        )


def run(args: argparse.Namespace, settings: LabSettings) -> int:
    durations = parse_duration(args.settle), parse_duration(args.blip), parse_duration(args.watch)
    catalog.RACKS_ARG.parse(args.blip_racks, settings.racks)  # refuse bad input before starting anything
    out = sys.stderr if args.json else sys.stdout
    print(
        f"stormlab demo: {settings.nodes_total} nodes in {settings.racks} racks, allowance {settings.allowance_s:g}s, "
        f"retry {settings.retry_policy}, GSI growth {'on' if settings.gsi_growth else 'off'}, "
        f"abandoned work {settings.abandoned_work}",
        file=out,
        flush=True,
    )
    signal.signal(signal.SIGTERM, _interrupted)  # so `finally: down()` runs on SIGTERM too
    state = launcher.up(settings, args.base_port)
    try:
        demo = Demo(state, out, *durations, args.blip_racks)
        result = asyncio.run(demo.run())
    finally:
        launcher.down()
    times = result.pop("_times")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    chart = write_chart(demo.samples, times, demo.allowance_s, out_dir / f"demo-{stamp}.png", result)
    (out_dir / f"demo-{stamp}.json").write_text(
        json.dumps({"summary": result, "times": times, "samples": [s.__dict__ for s in demo.samples]}, indent=1)
    )
    result["chart"] = str(chart)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(render_summary(result))
    return 0


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def render_summary(r: dict) -> str:
    def pct(x):
        return "n/a" if x is None else f"{100 * x:.1f}%"

    onset = "n/a" if r["onset_s"] is None else f"{r['onset_s']:.0f}s"
    recovery = "never" if r["recovery_s"] is None else f"{r['recovery_s']:.0f}s"
    validity = "valid run" if r["valid"] else "INVALID: host overloaded"
    verdict = "THE STORM HOLDS: a metastable failure, long after the blip is gone" if r["storm_holds"] else "the lab healed by itself"
    return "\n".join(
        [
            "",
            verdict,
            f"  baseline customer error     {pct(r['baseline_error_ratio'])}",
            f"  peak customer error         {pct(r['peak_error_ratio'])}",
            f"  plateau (last 60 s)         {pct(r['plateau_error_ratio'])}   (2015: about 55%)",
            f"  onset (blip to plateau)     {onset}",
            f"  back under 1% after         {recovery}",
            f"  disqualified outside blip   {r['disqualified_outside_blip']} nodes",
            f"  event-loop lag p99          {1000 * r['loop_lag_p99_s']:.0f}ms ({validity})",
            f"  chart                       {r['chart']}",
        ]
    )
