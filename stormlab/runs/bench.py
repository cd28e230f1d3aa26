"""`stormlab bench`: the lab's costs on this machine, measured side by side in one run.

Prints each figure as it is measured and writes them to ``reports/benchmarks.md`` (``--page``;
`make bench` writes docs/benchmarks.md):

- the membership path (the metadata service's ``GET /membership/{node}`` with the virtual CPU's
  cost set to 0, so only the real path is timed: routing, admission, the store, the answer)
  against a bare aiohttp handler answering the same bytes on the same machine, alternated in
  rounds so both see the same host; the ratio is the figure;
- fault apply and revert latency: ``POST /faults`` (a blip on the link proxy: applied, its
  revert armed, before the answer) and ``DELETE /faults`` (every lease reverted), p50 and p99;
- ``up`` to healthy and to every node serving, at each fleet size asked for (``--fleets``, at
  the speed ``--speed auto`` picks for it unless ``--fleet-speed`` says); the lab's CPU per
  1,000 nodes in its baseline, and the cost of a Prometheus scrape of a rack (time and bytes);
- the storm at each fleet size, from demo runs given with ``--demos`` (their JSON files): the
  largest fleet that kept the 2015 plateau validly at speed 1, and at the speed auto picked.

Each lab it starts has its own state directory and free ports, and is stopped by pid.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from chaos import catalog
from chaos.kernel_link import available as kernel_links
from stormcore.auth import ensure_token, headers
from stormcore.commandline import deprecated
from stormcore.errors import LabError, UsageError
from stormcore.fleet import FLEETS_HELP, node_id, parse_fleets
from stormcore.settings import LabSettings
from stormcore.web import serve
from stormlab.artefacts import bench_page
from stormlab.engine import launcher, observe
from stormlab.engine.ports import free_port
from stormlab.engine.speed import first_guess, parse_speed
from stormlab.runs.renewal_bench import SIZES, RenewalBench, both_clients, rebuild_stall, wait_answering

DOC = Path("reports/benchmarks.md")  # `make bench` writes docs/benchmarks.md


RENEWAL_SIZES = tuple(sorted(SIZES))  # 20 and 138 entries


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=float, default=5.0, help="length of each request round (default 5)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of each side of a comparison, alternated (default 3)")
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight in the request rounds (default 32)")
    p.add_argument(
        "--renewal-nodes",
        type=int,
        default=500,
        help="renewals a second offered to the path in the end-to-end renewal figures (default 500)",
    )
    p.add_argument(
        "--both-clients", action=argparse.BooleanOptionalAction, default=True,
        help="run the 2015 storm with both renewal clients in one lab (about 3 minutes; default on)",
    )  # fmt: skip
    p.add_argument("--herd-nodes", type=int, default=1000, help="nodes in the herd figure (default 1000)")
    p.add_argument(
        "--renewal-sizes",
        default=",".join(map(str, RENEWAL_SIZES)),
        help="membership sizes (entries) whose renewal path is measured: 20, an ordinary node's, and 138, a large "
        "node's after the GSIs (default both; the herd is measured at 20, so 20 is always among them)",
    )
    p.add_argument("--faults", type=int, default=50, help="faults applied and reverted for the latency figures (default 50)")
    p.add_argument("--fleets", default="1000", help=FLEETS_HELP)
    p.add_argument(
        "--fleet-speed",
        default="auto",
        help="speed for the fleets: a number, or auto: the speed `up --speed auto` picks for each (default auto)",
    )
    p.add_argument(
        "--demos", nargs="*", default=[], type=Path, help="demo JSON files (reports/demo-*.json) for the storm table (default: none)"
    )
    p.add_argument(
        "--page", dest="out", type=Path, default=DOC, help=f"the Markdown page the figures are written into (default {DOC}; - for none)"
    )
    deprecated(p, "--out", "--page", dest="out", type=Path)
    p.add_argument("--json", action="store_true", help="the figures as one JSON document on stdout (progress on stderr)")


def serve_bare(port: int, body: bytes) -> None:
    """A bare aiohttp handler answering ``body`` (run in its own process by the bench)."""

    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/membership/{node}", answer)
    serve(app, "127.0.0.1", port)


async def request_round(url: str, seconds: float, concurrency: int) -> float:
    """Requests per second ``concurrency`` clients get from ``url`` in ``seconds``."""
    done = 0
    deadline = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def client() -> None:
            nonlocal done
            while time.monotonic() < deadline:
                async with session.get(url) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"{url} answered {resp.status}")
                done += 1

        start = time.monotonic()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        return done / (time.monotonic() - start)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.figures: dict[str, Any] = {"machine": {"cores": os.cpu_count(), "python": sys.version.split()[0]}}
        self.root = Path(tempfile.mkdtemp(prefix="stormlab-bench-"))

    def say(self, text: str) -> None:
        print(text, file=sys.stderr if self.args.json else sys.stdout, flush=True)  # --json: stdout holds the one document

    def lab(self, name: str, settings: LabSettings) -> tuple[dict, float]:
        """A lab of its own (state directory, free ports): its state and the seconds `up` took."""
        start = time.monotonic()
        state = launcher.up(settings, base_port=0, wait_s=600, directory=self.root / name)
        return state, time.monotonic() - start

    async def membership_vs_bare(self) -> None:
        a = self.args
        # the virtual CPU's cost 0: the real path is timed
        settings = LabSettings(
            racks=1, nodes_per_rack=20, customer_rate=0, cascade_rate=0, activity_rate=0, cost_base_s=0.0, cost_per_entry_s=0.0
        )
        state, _ = self.lab("membership", settings)
        try:
            meta = state["components"]["metadata"]["url"]
            node = node_id(0, 3)  # an ordinary node: 20 entries
            async with aiohttp.ClientSession() as session, session.get(f"{meta}/membership/{node}") as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"the membership of {node} was refused: {resp.status} {body[:200]!r}")
            port = free_port()
            bare = subprocess.Popen(
                [sys.executable, "-c", f"from stormlab.runs.bench import serve_bare; serve_bare({port}, {body!r})"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                await wait_answering(f"http://127.0.0.1:{port}/membership/{node}")
                lab_rates, bare_rates = [], []
                for r in range(a.rounds):
                    lab_rates.append(await request_round(f"{meta}/membership/{node}", a.seconds, a.concurrency))
                    bare_rates.append(await request_round(f"http://127.0.0.1:{port}/membership/{node}", a.seconds, a.concurrency))
                    self.say(f"  round {r + 1}: membership path {lab_rates[-1]:,.0f} req/s, bare handler {bare_rates[-1]:,.0f} req/s")
            finally:
                bare.terminate()
                bare.wait(10)
        finally:
            launcher.down(self.root / "membership")
        lab_rate, bare_rate = statistics.median(lab_rates), statistics.median(bare_rates)
        self.figures["membership_path"] = {
            "membership_req_per_s": round(lab_rate),
            "bare_req_per_s": round(bare_rate),
            "ratio": round(lab_rate / bare_rate, 3),
            "body_bytes": len(body),
            "concurrency": a.concurrency,
        }
        self.say(f"membership path: {lab_rate:,.0f} req/s, bare aiohttp handler {bare_rate:,.0f} req/s: {lab_rate / bare_rate:.2f}x")

    async def renewals(self) -> None:
        """The renewal end to end (old and new client) against bare, the herd, the rebuild stall."""
        a = self.args
        paths = RenewalBench(self.root, self.say, nodes=a.renewal_nodes, window_s=a.seconds * 2, herd_nodes=a.herd_nodes, rounds=a.rounds)
        rows = []
        # the racks' link carried by the proxy, and by the kernel too where the lab may (root, iptables)
        paths_to_take = [("protocol", "proxy"), *([("protocol", "kernel")] if kernel_links() is None else []), ("session", "proxy")]
        for entries in a.renewal_sizes:
            for client, links in paths_to_take:
                self.say(f"the renewal end to end: {entries} entries, the {client} client, the link carried by the {links} …")
                herd = entries == 20 and (client, links) == ("protocol", "proxy")
                rows.append(await paths.lab_path(entries, client, links, herd=herd))
                self.say(f"  {rows[-1]['us_total']} µs a renewal: {rows[-1]['us_per_request']}")
            self.say(f"the same bytes between a bare client and handler: {entries} entries …")
            rows.append(await paths.bare_path(entries))
            self.say(f"  {rows[-1]['us_total']} µs a request: {rows[-1]['us_per_request']}")
        herd = next(r.pop("herd") for r in rows if "herd" in r)
        self.figures["renewal_paths"] = {"rate": round(paths.rate), "window_s": paths.window_s, "rows": rows}
        self.figures["herd"] = herd
        for client, h in herd.items():
            self.say(
                f"the herd ({client} client): {h['ms_cpu_per_node']} ms of CPU a node, the loop's longest stall {h['longest_stall_ms']} ms"
            )
        self.figures["rebuild_stall"] = stall = rebuild_stall()
        self.say(f"a GSI fault at {stall['nodes']:,} nodes: {stall}")
        if a.both_clients:
            self.say("both renewal clients in one lab, one blip over both …")
            self.figures["both_clients"] = rows = await both_clients(self.root, self.say)
            for row in rows:
                self.say(f"  {row}")

    async def fault_latency(self) -> None:
        settings = LabSettings(racks=2, nodes_per_rack=20, renewal_period_s=1.0, customer_rate=20)
        state, _ = self.lab("faults", settings)
        applied, reverted = [], []
        try:
            proxy = state["components"]["linkproxy"]["url"]
            auth = headers(ensure_token(self.root / "faults"))
            body = {"fault": "blip", "racks": [1], "duration_s": 30.0}
            async with aiohttp.ClientSession(headers=auth) as session:
                for _ in range(self.args.faults):
                    start = time.monotonic()
                    async with session.post(f"{proxy}/faults", json=body) as resp:
                        if resp.status != 201:
                            raise RuntimeError(f"the blip was refused: {resp.status} {await resp.text()}")
                    applied.append(time.monotonic() - start)
                    start = time.monotonic()
                    async with session.delete(f"{proxy}/faults") as resp:
                        if resp.status != 200 or (await resp.json())["halted"] != 1:
                            raise RuntimeError("the blip was not reverted")
                    reverted.append(time.monotonic() - start)
        finally:
            launcher.down(self.root / "faults")
        self.figures["faults"] = {
            "links": state["settings"].get("STORMLAB_LINK_CUT", "proxy"),
            "count": len(applied),
            "apply_p50_ms": round(1000 * _percentile(applied, 0.5), 2),
            "apply_p99_ms": round(1000 * _percentile(applied, 0.99), 2),
            "revert_p50_ms": round(1000 * _percentile(reverted, 0.5), 2),
            "revert_p99_ms": round(1000 * _percentile(reverted, 0.99), 2),
        }
        f = self.figures["faults"]
        self.say(
            f"fault apply (POST /faults, a blip): p50 {f['apply_p50_ms']} ms, p99 {f['apply_p99_ms']} ms; "
            f"revert (DELETE /faults): p50 {f['revert_p50_ms']} ms, p99 {f['revert_p99_ms']} ms ({f['count']} each)"
        )

    async def fleet(self, nodes: int, per_rack: int) -> None:
        racks = nodes // per_rack
        requested = parse_speed(self.args.fleet_speed)
        speed = requested if requested is not None else first_guess(nodes)
        settings = LabSettings(racks=racks, nodes_per_rack=nodes // racks, capacity_cores=4.0 * nodes / 100).sped_up(speed)
        name = f"fleet-{nodes}"
        self.say(f"bringing up {nodes:,} nodes at speed {speed:g} …")
        state, healthy_s = self.lab(name, settings)
        row: dict[str, Any] = {"nodes": nodes, "racks": racks, "speed": speed, "up_to_healthy_s": round(healthy_s, 1)}
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
                try:
                    row["to_every_node_serving_s"] = round(healthy_s + await observe.wait_serving(session, state, 300), 1)
                except LabError:
                    pass  # the table says never
                await asyncio.sleep(settings.renewal_period_s * 2)  # a baseline of two renewal periods
                snap = await observe.snapshot(session, state, lag_window_s=settings.renewal_period_s * 2)
                row["lab_cpu_cores"] = round(snap.lab_cpu_cores or 0.0, 3)
                # at speed 1: the work per second scales with the speed
                row["cpu_cores_per_1000_nodes"] = round(1000 * settings.pace.per_profile(snap.lab_cpu_cores or 0.0) / nodes, 3)
                row["loop_lag_p99_ms"] = round(1000 * (snap.loop_lag_p99_s or 0.0), 1)
                row["memory"] = observe.lab_memory(state)
                rack = state["components"]["rack-00"]["url"]
                times, size = [], 0
                for _ in range(10):
                    start = time.monotonic()
                    try:
                        async with session.get(f"{rack}/metrics") as resp:
                            size = len(await resp.read())
                    except (TimeoutError, aiohttp.ClientError):
                        continue  # a rack too busy to answer: the table says so
                    times.append(time.monotonic() - start)
                row["rack_scrape_ms"] = round(1000 * statistics.median(times), 2) if times else None
                row["rack_scrape_bytes"] = size
                row["gsi_faults"] = await gsi_faults_lag(session, state)
        finally:
            launcher.down(self.root / name)
        self.figures.setdefault("fleets", []).append(row)
        self.say(
            f"{nodes:,} nodes at speed {speed:g}: healthy after {row['up_to_healthy_s']}s, every node serving after "
            f"{row.get('to_every_node_serving_s', 'never')}s; the lab's CPU {row['lab_cpu_cores']} cores "
            f"({row['cpu_cores_per_1000_nodes']} per 1,000 nodes), lag p99 {row['loop_lag_p99_ms']} ms; "
            f"a rack's scrape {row['rack_scrape_ms']} ms, {row['rack_scrape_bytes']:,} bytes; "
            f"memory {row['memory']['total_mb'] if row['memory'] else '-'} MB"
        )

    def demos(self) -> None:
        rows = []
        for path in self.args.demos:
            doc = json.loads(path.read_text())
            s = doc["summary"]
            settings = s.get("settings", {})
            nodes = int(settings.get("racks", 10)) * int(settings.get("nodes_per_rack", 100))
            rows.append(
                {
                    "file": path.name,
                    "nodes": nodes,
                    "racks": int(settings.get("racks", 10)),
                    "blipped": len(s.get("blip_racks", [0, 1, 2])),
                    "speed": s.get("speed", 1.0),
                    "speed_requested": s.get("speed_requested", "1"),
                    "plateau": s["plateau_error_ratio"],
                    "holds": s["storm_holds"],
                    "valid": s["valid"],
                    "invalid_reasons": s.get("invalid_reasons", []),
                    "speeds_tried": s.get("speeds_tried", []),
                }
            )
        rows.sort(key=lambda r: (r["nodes"], -r["speed"]))
        self.figures["storms"] = rows

        def largest(speed_ok) -> int | None:
            good = [r["nodes"] for r in rows if speed_ok(r) and r["valid"] and r["holds"] and 0.45 <= (r["plateau"] or 0) <= 0.65]
            return max(good, default=None)

        self.figures["largest_valid_fleet"] = {
            "speed_1": largest(lambda r: r["speed"] == 1.0),
            "auto": largest(lambda r: r["speed_requested"] == "auto"),
        }

    def write(self) -> None:
        """The figures into ``--out`` (a profile section already there, from `make profile`, is kept)."""
        out = self.args.out
        out.parent.mkdir(parents=True, exist_ok=True)
        existing = out.read_text() if out.exists() else ""
        kept = existing[existing.index("## Profiles") :] if "## Profiles" in existing else ""
        out.write_text(bench_page.markdown(self.figures, time.strftime("%Y-%m-%d")) + ("\n" + kept if kept else ""))
        self.say(f"wrote {out}")


def with_section(existing: str, heading: str, text: str) -> str:
    """``existing`` (a page of ``## `` sections) with the section under ``heading`` replaced by
    ``text`` (which starts with that heading), up to the next ``## `` section; added at the end if
    it has none. The pages other measurements write keep theirs (`make profile`, the class's viewers)."""
    if heading not in existing:
        return existing.rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n"
    start = existing.index(heading)
    following = existing.find("\n## ", start + len(heading))
    rest = existing[following + 1 :] if following >= 0 else ""
    return existing[:start] + text.rstrip("\n") + "\n" + ("\n" + rest if rest else "")


async def _measure(bench: Bench, fleets: list[tuple[int, int]]) -> None:
    bench.say("membership path against a bare handler …")
    await bench.membership_vs_bare()
    await bench.renewals()
    bench.say("fault apply and revert …")
    await bench.fault_latency()
    for nodes, per_rack in fleets:
        await bench.fleet(nodes, per_rack)


GSI_FAULTS = 3  # GSI-growth faults applied one after another on each fleet, each held 3 s
STALL_S = 0.05  # the bound on what a GSI fault may cost any loop


async def gsi_faults_lag(session: aiohttp.ClientSession, state: dict) -> dict[str, Any]:
    """GSI_FAULTS GSI-growth faults on the metadata service (each applied, held 3 s, reverted:
    both rebuild memberships), live: every process's loop-lag samples in the while (a timer every
    0.1 s: a stall is caught when the timer falls due inside it), and those over STALL_S."""
    comps = state["components"]
    before = {name: await lag_buckets(session, c["url"]) for name, c in comps.items()}
    fault = catalog.request("gsi-growth", {"duration": "3s"}).body
    auth = headers(ensure_token(Path(state["directory"])))
    for _ in range(GSI_FAULTS):
        async with session.post(f"{comps['metadata']['url']}/faults", json=fault, headers=auth) as resp:
            if resp.status != 201:
                raise RuntimeError(f"the GSI fault was refused: {resp.status} {await resp.text()}")
        await asyncio.sleep(5.0)  # held 3 s, reverted, and a moment after
    samples = over = 0.0
    worst: dict[str, float] = {}
    for name, c in comps.items():
        after = await lag_buckets(session, c["url"])
        grown = {le: after.get(le, 0) - before[name].get(le, 0) for le in after}
        total = grown.get(float("inf"), 0)
        samples += total
        over += total - grown.get(STALL_S, 0)
        # the smallest bucket holding every new sample: this process's longest lag, to a bucket
        worst[name] = min((le for le, n in grown.items() if n == total), default=0.0)
    slowest = max(worst, key=lambda n: worst[n])
    return {
        "faults": GSI_FAULTS,
        "samples": round(samples),
        "over_50ms": round(over),
        "worst_bucket_ms": 1000 * worst[slowest],
        "worst_by": slowest,
    }


async def lag_buckets(session: aiohttp.ClientSession, url: str) -> dict[float, float]:
    """A process's loop-lag histogram: upper bound -> samples at or under it (cumulative)."""
    async with session.get(f"{url}/metrics") as resp:
        text = await resp.text()
    for family in text_string_to_metric_families(text):
        if family.name == "stormlab_event_loop_lag_seconds":
            return {float(s.labels["le"]): s.value for s in family.samples if s.name.endswith("_bucket")}
    return {}


def parse_renewal_sizes(text: str) -> list[int]:
    """``--renewal-sizes``: the sizes named, in order, each one the bench knows, 20 among them."""
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--renewal-sizes takes entries separated by commas (20,138), not {text!r}") from None
    if not sizes or any(s not in RENEWAL_SIZES for s in sizes) or len(set(sizes)) != len(sizes):
        raise UsageError(f"--renewal-sizes: each of {', '.join(map(str, RENEWAL_SIZES))} at most once, not {text!r}")
    if 20 not in sizes:
        raise UsageError("--renewal-sizes must include 20: the herd is measured at an ordinary node's 20 entries")
    return sizes


def run(args: argparse.Namespace) -> int:
    fleets = parse_fleets(args.fleets)
    if args.seconds <= 0 or min(args.rounds, args.concurrency, args.faults, args.renewal_nodes, args.herd_nodes) < 1:
        raise UsageError("--seconds, --rounds, --concurrency, --faults, --renewal-nodes and --herd-nodes must be positive")
    if args.renewal_nodes > 1000 or args.herd_nodes > 1000:
        raise UsageError("--renewal-nodes and --herd-nodes are nodes of one rack: at most 1000")
    args.renewal_sizes = parse_renewal_sizes(args.renewal_sizes)
    parse_speed(args.fleet_speed)
    for path in args.demos:
        if not path.is_file():
            raise UsageError(f"no demo file {path}")
    bench = Bench(args)
    bench.demos()
    try:
        asyncio.run(_measure(bench, fleets))
    finally:
        shutil.rmtree(bench.root, ignore_errors=True)  # the labs' state directories, every lab already down
    if str(args.out) != "-":
        bench.write()
    if args.json:
        print(json.dumps(bench.figures, indent=1))
    return 0
