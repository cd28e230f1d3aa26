"""`stormlab demo --profile aws-2025-10`: the second incident in one command.

Starts a lab of the profile (the storage racks play DynamoDB; the lease manager holds a lease on
each droplet; the customers launch instances), watches the healthy baseline, empties the database
endpoint's DNS record for ``--outage`` (the leases lapse, launches fail), lets the record come
back, and watches the lease manager after it: re-establishing every lease at once, its work
timing out and queued again, launches still failing although the trigger is gone. Then it
prints a summary and writes the samples.

``moves`` (a benchmark's, or a test's): the operators' moves at profile seconds after the repair,
as `stormlab ops` makes them (throttle, restart-host, queue-limit), to measure a way out.
Every time printed is profile time; the event-loop lag is the host's, in wall milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import aiohttp

from chaos import client
from stormcore.auth import ensure_token
from stormcore.errors import EXIT_INVALID
from stormcore.incidents.aws_2025_10 import NAME
from stormcore.settings import LabSettings, parse_duration
from stormlab.engine import launcher, observe
from stormlab.engine.reading import Reading
from stormlab.engine.story import Sample, host_fields, invalid_reasons

OUTAGE_S, WATCH_S = 300.0, 720.0  # the default story: 5 minutes of an empty record, then 12 watched
STATUS_WINDOW_S = 10.0  # wall seconds behind the lease manager's launch error ratio
COLLAPSED = 0.9  # launch errors above this, every sample, is a collapse held


@dataclass(frozen=True)
class LeaseSample:
    t: float  # profile seconds from the demo's start
    launch_error_ratio: float | None
    leases_active: int | None
    established_per_s: float | None
    timed_out_per_s: float | None
    queued: int | None
    endpoint: str | None


@dataclass(frozen=True)
class Move:
    """An operator's move ``after_s`` profile seconds after the repair: a fault of the catalog
    (throttle-work, restart-host, queue-limit) with its values as a person gives them."""

    after_s: float
    fault: str
    values: dict[str, Any]


def settle_after_repair_s(settings: LabSettings) -> float:
    """How long the leases established in the first moments after the repair last, and the window
    of the launch errors read after them: a lease's life past the last check that came in time, a
    timeout, a period, and the status's window (profile seconds)."""
    p = settings.profile_time()
    return p.lease_ttl_s + p.lease_timeout_s + p.lease_check_period_s + settings.pace.profile(STATUS_WINDOW_S)


def summarize(samples: Sequence[LeaseSample], repair_s: float, settings: LabSettings, end_s: float) -> dict[str, Any]:
    """The run's figures (pure): before, while the record is empty, after the repair; whether the
    collapse held every sample from the settle after the repair to the end, and for how long."""
    p = settings.profile_time()
    settle = repair_s + settle_after_repair_s(settings)

    def among(a: float, b: float) -> list[LeaseSample]:
        return [s for s in samples if a <= s.t < b]

    def mean(xs: Sequence[float | None]) -> float | None:
        got = [x for x in xs if x is not None]
        return round(sum(got) / len(got), 4) if got else None

    outage = among(repair_s - 60, repair_s)
    after = among(settle, end_s + 1)
    errors = [s.launch_error_ratio for s in after if s.launch_error_ratio is not None]
    recovered = next((s.t for s in among(repair_s, end_s + 1) if (s.leases_active or 0) >= 0.99 * p.lease_droplets), None)
    return {
        "droplets": p.lease_droplets,
        "hosts": p.lease_hosts,
        "repair_s": round(repair_s, 1),
        "launch_errors_before": mean([s.launch_error_ratio for s in samples if s.t < repair_s - 60 and s.endpoint == "ok"][:20]),
        "launch_errors_endpoint_empty": mean([s.launch_error_ratio for s in outage]),
        "launch_errors_after": mean(errors),
        "launch_errors_after_min": round(min(errors), 4) if errors else None,
        "established_per_s_after": mean([s.established_per_s for s in after]),
        "timed_out_per_s_after": mean([s.timed_out_per_s for s in after]),
        "leases_after_max": max((s.leases_active or 0 for s in after), default=None),
        "collapsed_from_s": round(settle - repair_s, 1),
        "collapsed_for_s": round(end_s - settle, 1) if errors and min(errors) > COLLAPSED else 0.0,
        "collapsed": bool(errors) and min(errors) > COLLAPSED,
        "recovered_s_after_repair": None if recovered is None else round(recovered - repair_s, 1),
    }


class LeaseStory:
    """Drives the second incident against a running lab and keeps its samples."""

    def __init__(self, state: dict, out: TextIO, settle_s: float, outage_s: float, watch_s: float, moves: Sequence[Move] = ()) -> None:
        self.state, self.out = state, out
        self.settings = LabSettings.from_env(state["settings"])
        self.pace = self.settings.pace
        self.settle_s, self.outage_s, self.watch_s, self.moves = settle_s, outage_s, watch_s, sorted(moves, key=lambda m: m.after_s)
        self.samples: list[LeaseSample] = []
        self.host: list[Sample] = []
        self.t0 = time.monotonic()
        self.token = ensure_token(Path(state["directory"]))

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def now(self) -> float:
        return self.pace.profile(time.monotonic() - self.t0)

    def fault(self, name: str, values: dict[str, Any]) -> None:
        """A fault or a move, its duration given in profile seconds (sent in the run's own)."""
        sent = dict(values)
        if "duration" in sent:
            sent["duration"] = self.pace.wall(float(sent["duration"]))
        lease, req = client.apply(self.state, name, sent, self.token, via="demo")
        self.say(f"t={self.now():.0f}s  {client.describe(lease, req)}")

    async def watch(self, session: aiohttp.ClientSession, until_s: float, label: str, pending: list[Move], repair_s: float) -> None:
        tick = 0
        while self.now() < until_s:
            taken = time.monotonic()
            while pending and self.now() >= repair_s + pending[0].after_s:
                move = pending.pop(0)
                await asyncio.to_thread(self.fault, move.fault, move.values)
            snap = await observe.snapshot(session, self.state)
            self.keep(snap)
            if tick % 5 == 0:
                self.line(snap, label)
            tick += 1
            await asyncio.sleep(max(0.0, taken + 1.0 - time.monotonic()))

    def keep(self, snap: Reading) -> None:
        t = self.now()
        self.samples.append(
            LeaseSample(
                t,
                snap.launch_error_ratio,
                snap.leases_active,
                snap.leases_established_per_s,
                snap.lease_timed_out_per_s,
                snap.lease_queue,
                snap.lease_endpoint,
            )
        )
        self.host.append(
            Sample(
                t,
                snap.customer_requests_total or 0,
                snap.customer_failures_total or 0,
                snap.nodes_disqualified,
                snap.metadata_inflight or 0,
                snap.renewal_p99_s,
                snap.metadata_processing_p99_s,
                snap.loop_lag_p99_s or 0.0,
                **host_fields(snap),
            )
        )

    def line(self, snap: Reading, label: str) -> None:
        errors = "-" if snap.launch_error_ratio is None else f"{100 * snap.launch_error_ratio:5.1f}%"
        self.say(
            f"t={self.now():6.0f}s {label:<9} launches failing {errors}  leases {snap.leases_active}/{snap.lease_droplets}  "
            f"established {snap.leases_established_per_s}/s  timed out {snap.lease_timed_out_per_s}/s  "
            f"queued {snap.lease_queue}  endpoint {snap.lease_endpoint}  lag p99 {1000 * (snap.loop_lag_p99_s or 0):.0f} ms"
        )

    async def run(self) -> dict[str, Any]:
        p = self.settings.profile_time()
        async with aiohttp.ClientSession() as session:
            await observe.wait_serving(session, self.state, 3 * self.settings.renewal_period_s + 30, self.say)
            self.t0 = time.monotonic()
            self.say(f"the lease manager holds {p.lease_droplets} leases on {p.lease_hosts} hosts; watching the healthy lab …")
            await self.watch(session, self.settle_s, "baseline", [], float("inf"))
            self.say(f"DNS: the database endpoint's record is empty for {self.outage_s:g}s: new connections fail to resolve")
            await asyncio.to_thread(self.fault, "dns-empty", {"duration": self.outage_s})
            repair_s = self.now() + self.outage_s
            await self.watch(session, repair_s, "outage", [], repair_s)
            self.say("REPAIRED: the record is back; every droplet without a lease asks for one")
            pending = list(self.moves)
            await self.watch(session, repair_s + self.watch_s, "after", pending, repair_s)
            end = self.now()
            run_lag = (await observe.snapshot(session, self.state, lag_window_s=self.pace.wall(end))).loop_lag_p99_s
        result = summarize(self.samples, repair_s, self.settings, end)
        reasons = invalid_reasons(self.host, 0.0, None, self.settings.allowance_s, self.settings.renewal_period_s, run_lag)
        return result | {
            "profile": NAME,
            "speed": self.settings.speed,
            "moves": [asdict(m) for m in self.moves],
            "run_lag_p99_s": run_lag,
            "valid": not reasons,
            "invalid_reasons": reasons,
        }


def run(args: argparse.Namespace, settings: LabSettings) -> int:
    outage = parse_duration(args.outage)
    settle = parse_duration(args.settle)
    watch = parse_duration(args.watch) if args.watch else WATCH_S
    speed = 1.0 if args.speed in (None, "auto") else float(args.speed)
    out = sys.stderr if args.json else sys.stdout
    print(
        f"stormlab demo --profile {NAME}: {settings.lease_droplets} droplets on {settings.lease_hosts} lease manager hosts, "
        f"item timeout {settings.lease_timeout_s:g}s, the endpoint empty for {outage:g}s, speed {speed:g}",
        file=out,
        flush=True,
    )
    result, story = measure(settings.sped_up(speed), args.base_port, settle, outage, watch, (), out)
    result["samples"] = str(write_samples(story, result, Path(args.out)))
    print(json.dumps(result, indent=1) if args.json else render(result))
    return 0 if result["valid"] else EXIT_INVALID


def measure(
    settings: LabSettings, base_port: int, settle_s: float, outage_s: float, watch_s: float, moves: Sequence[Move], out: TextIO
) -> tuple[dict[str, Any], LeaseStory]:
    """One story on a lab of its own (``settings`` at their speed), the lab down after it."""
    state = launcher.up(settings, base_port)
    try:
        story = LeaseStory(state, out, settle_s, outage_s, watch_s, moves)
        result = asyncio.run(story.run())
        result["memory"] = observe.lab_memory(state)
    finally:
        launcher.down()
    return result, story


def write_samples(story: LeaseStory, result: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"demo-{NAME}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"summary": result, "samples": [asdict(s) for s in story.samples]}, indent=1))
    return path


def render(r: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    lines = [
        "",
        f"SUMMARY ({NAME}: the lease manager's congestive collapse; times in profile seconds)",
        f"  fleet                       {r['droplets']} droplets on {r['hosts']} lease manager hosts; speed {r['speed']:g}",
        f"  launches failing            before {pct(r['launch_errors_before'])}; "
        f"the endpoint empty {pct(r['launch_errors_endpoint_empty'])}; "
        f"after the repair {pct(r['launch_errors_after'])} (lowest {pct(r['launch_errors_after_min'])})",
        f"  after the repair            {r['established_per_s_after']} leases established/s, "
        f"{r['timed_out_per_s_after']} items timed out/s, "
        f"at most {r['leases_after_max']} leases held (from {r['collapsed_from_s']:g}s after the repair)",
    ]
    if r["collapsed"]:
        lines.append(
            f"  COLLAPSED                   launches failing above 90% every second for {r['collapsed_for_s']:g}s after the repair settled"
        )
    elif r["recovered_s_after_repair"] is not None:
        lines.append(f"  recovered                   every lease back {r['recovered_s_after_repair']:g}s after the repair")
    else:
        lines.append("  neither collapsed nor recovered within the watch")
    lines.append(f"  run                         {'valid' if r['valid'] else 'INVALID: ' + '; '.join(r['invalid_reasons'])}")
    lines.append(f"  samples                     {r.get('samples', '')}")
    return "\n".join(lines)
