"""The renewal path's costs, side by side in one run (a part of `stormlab bench`).

- End to end: a one-rack lab (no cascade, no customers, the virtual CPU's cost 0 so only the
  real path is timed) renews at a fixed offered rate (nodes / period); its rack (the client),
  link proxy and metadata service's CPU seconds are read from /proc over a window and divided
  by the renewals the service answered in it. Against it, at the same rate and with the same
  bytes: a bare client (a loop sending the request's bytes on keep-alive connections: the
  renewal client without a node) and a bare aiohttp handler answering the membership's bytes,
  each its own process, read the same way. Both renewal clients (``protocol`` and the old
  ``session``) and both membership sizes (20 entries: a standard instance; 138: a large one
  under the 2015 GSIs) are measured; the ratio is the figure.
- The herd: a rack of ``herd_nodes`` nodes in a process of its own on a rack's loop (uvloop),
  each renewed once (its membership decoded, as before a blip), every node asleep until its
  link's return wakes them (50 a loop iteration, as a rack does) to renew on fresh connections
  (their timed-out attempts dropped theirs), against the lab's link: that process's CPU per node
  (the median of ``rounds``), and the longest the loop went without running a 1 ms ticker.
- The rebuild stall: what a GSI-growth fault costs the metadata service's loop at 10,000 nodes
  (the change, the next partition map, the membership sizes) and loadgen's (decoding the new map
  and routing by it), each timed alone.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from metadata_service.membership import MembershipStore
from services.loadgen.traffic import Routes
from storage_node.client import RenewalClient
from storage_node.metrics import RackMetrics
from storage_node.rack import Rack
from stormcore.auth import ensure_token, headers
from stormcore.settings import LabSettings
from stormcore.web import uvloop
from stormcore.wire import DEADLINE_HEADER, REFUSAL_HEADER, PartitionMap
from stormlab.engine import launcher, observe
from stormlab.engine.ports import free_port
from stormlab.runs.sizing import TICKS, read_processes

SIZES: dict[int, dict[str, Any]] = {  # membership entries -> the settings that give every node that many
    20: {"big_per_every": 0},
    138: {"big_every": 1, "big_per_every": 1},
}


def cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / TICKS


def bare_client(port: int, paths: list[str], rate: float) -> None:
    """Send ``rate`` requests a second, round the paths, until killed (the bench's bare client)."""

    async def main() -> None:
        client = RenewalClient(f"http://127.0.0.1:{port}", REFUSAL_HEADER)
        requests = [client.request(p, {DEADLINE_HEADER: "1"}) for p in paths]
        loop = asyncio.get_running_loop()
        tasks: set[asyncio.Task] = set()
        at, k = loop.time(), 0
        while True:
            at += 1 / rate
            await asyncio.sleep(max(0.0, at - loop.time()))
            task = asyncio.ensure_future(client.get(requests[k % len(requests)], loop.time() + 2))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            k += 1

    if uvloop is not None:
        uvloop.run(main())
    else:  # pragma: no cover
        asyncio.run(main())


async def answered(session: aiohttp.ClientSession, metadata_url: str) -> float:
    async with session.get(f"{metadata_url}/metrics") as resp:
        text = await resp.text()
    for family in text_string_to_metric_families(text):
        if family.name == "stormlab_metadata_requests":
            return sum(s.value for s in family.samples if s.labels.get("kind") == "membership" and s.labels.get("outcome") == "ok")
    return 0.0


class RenewalBench:
    def __init__(
        self, root: Path, say, nodes: int = 500, period_s: float = 1.0, window_s: float = 10.0, herd_nodes: int = 1000, rounds: int = 3
    ) -> None:
        self.root, self.say = root, say
        self.nodes, self.period_s, self.window_s, self.herd_nodes, self.rounds = nodes, period_s, window_s, herd_nodes, rounds

    @property
    def rate(self) -> float:
        """Renewals a second offered to the path (and by the bare client)."""
        return self.nodes / self.period_s

    def settings(self, entries: int, client: str, links: str = "proxy") -> LabSettings:
        """A one-rack lab of ``herd_nodes`` (at least ``nodes``) nodes renewing at ``rate`` a second,
        its link carried by ``links`` (the link proxy or the kernel)."""
        nodes = max(self.nodes, self.herd_nodes)
        return LabSettings(
            racks=1,
            nodes_per_rack=nodes,
            renewal_period_s=nodes / self.rate,
            cost_base_s=0.0,
            cost_per_entry_s=0.0,
            customer_rate=0.0,
            cascade_rate=0.0,
            renewal_client=client,
            link_cut=links,
            **SIZES[entries],
        )

    async def lab_path(self, entries: int, client: str, links: str = "proxy", herd: bool = False) -> dict[str, Any]:
        """CPU per renewal of each process on the path, in a one-rack lab at the offered rate."""
        name = f"renewals-{entries}-{client}-{links}"
        settings = self.settings(entries, client, links)
        state = launcher.up(settings, base_port=0, wait_s=120, directory=self.root / name, cascade=[])
        try:
            meta = state["components"]["metadata"]["url"]
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
                await observe.wait_serving(session, state, 120)
                await asyncio.sleep(2 * self.period_s)  # every membership encoded, every connection pooled
                before, count = read_processes(state["supervisor_pid"]), await answered(session, meta)
                start = time.monotonic()
                await asyncio.sleep(self.window_s)
                after, count = read_processes(state["supervisor_pid"]), await answered(session, meta) - count
                wall = time.monotonic() - start
                was = {r.pid: r.cpu_s for r in before}
                per_request = {
                    r.kind: (r.cpu_s - was[r.pid]) / count for r in after if r.pid in was and r.kind in ("rack", "linkproxy", "metadata")
                }
                row = {
                    "entries": entries,
                    "client": client,
                    "links": links,
                    "rate": round(count / wall),
                    "us_per_request": {k: round(1e6 * v, 1) for k, v in sorted(per_request.items())},
                    "us_total": round(1e6 * sum(per_request.values()), 1),
                }
                if herd:
                    row["herd"] = await self.herd(settings, rack_link(self.root / name, "rack-00"))
                return row
        finally:
            launcher.down(self.root / name)

    async def bare_path(self, entries: int) -> dict[str, Any]:
        """The same bytes at the same rate between a bare client and a bare aiohttp handler."""
        store = MembershipStore.for_fleet(self.settings(entries, "protocol"))
        body = store.membership(store.nodes[0])
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-c", f"from stormlab.runs.bench import serve_bare; serve_bare({port}, {body!r})"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = None
        try:
            await wait_answering(f"http://127.0.0.1:{port}/membership/x")
            paths = [f"/membership/{n}" for n in store.nodes]  # round the whole rack, as its nodes renew
            rate = self.rate
            client = subprocess.Popen(
                [sys.executable, "-c", f"from stormlab.runs.renewal_bench import bare_client; bare_client({port}, {paths!r}, {rate})"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            await asyncio.sleep(2 * self.period_s + 1.0)
            before = {p.pid: cpu_seconds(p.pid) for p in (server, client)}
            await asyncio.sleep(self.window_s)
            spent = {p.pid: cpu_seconds(p.pid) - before[p.pid] for p in (server, client)}
            count = rate * self.window_s  # the bare client holds its rate (it is far from saturated)
            return {
                "entries": entries,
                "client": "bare",
                "rate": round(rate),
                "us_per_request": {
                    "client": round(1e6 * spent[client.pid] / count, 1),
                    "server": round(1e6 * spent[server.pid] / count, 1),
                },
                "us_total": round(1e6 * sum(spent.values()) / count, 1),
            }
        finally:
            for p in (client, server):
                if p is not None:
                    p.terminate()
                    p.wait(10)

    async def herd(self, settings: LabSettings, link_url: str) -> dict[str, Any]:
        """Every node of a rack renews as its link returns: CPU per node, longest stall, each
        client's median round. Each round is its own process on the loop a rack runs on (uvloop)."""
        runs: dict[str, list[dict[str, Any]]] = {"protocol": [], "session": []}
        for _ in range(self.rounds):
            for client in runs:
                runs[client].append(await herd_round(settings.replace(renewal_client=client), link_url))
        # the median round of each, by CPU per node
        return {client: sorted(rs, key=lambda r: r["ms_cpu_per_node"])[len(rs) // 2] | {"rounds": len(rs)} for client, rs in runs.items()}


async def herd_round(settings: LabSettings, link_url: str) -> dict[str, Any]:
    """One herd in a child process (``herd_child``), its figures read from what it prints."""
    env = json.dumps(settings.to_env())
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        f"from stormlab.runs.renewal_bench import herd_child; herd_child({env!r}, {link_url!r})",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"the herd's process failed ({child.returncode}): {err.decode(errors='replace')[-2000:]}")
    return json.loads(out)


def herd_child(env: str, link_url: str) -> None:
    """A rack of ``settings``' nodes against ``link_url``, on the loop a rack runs on: each node
    renews once (its membership decoded, as before a blip), every connection is dropped (as the
    blip's timed-out attempts dropped theirs), every node sleeps until the link's return wakes
    it (50 a loop iteration) and renews on a fresh connection. Prints the figures as JSON."""
    settings = LabSettings.from_env(json.loads(env))

    async def main() -> dict[str, Any]:
        rack = Rack(settings, 0, link_url, RackMetrics.create(0))
        try:
            nodes = list(rack.nodes.values())
            before: list[str] = []
            first = time.process_time()
            await asyncio.gather(*(_renew(node, before) for node in nodes))
            first = time.process_time() - first
            if before.count("ok") != len(nodes):
                raise RuntimeError(f"before the herd, {len(nodes) - before.count('ok')} of {len(nodes)} nodes did not renew")
            await _drop_connections(rack)
            loop = asyncio.get_running_loop()
            outcomes: list[str] = []
            tasks = [asyncio.create_task(_asleep_then_renew(rack, node, loop.time() + 3600, outcomes)) for node in nodes]
            await asyncio.sleep(0.05)  # every node asleep until its next slot
            async with LongestStall() as stall:
                cpu = time.process_time()
                rack._set_link(True)  # the link is back: every node renews now, as after a blip
                await asyncio.gather(*tasks)
                cpu = time.process_time() - cpu
            return {
                "nodes": len(nodes),
                "ms_cpu_per_node": round(1000 * cpu / len(nodes), 3),
                "longest_stall_ms": round(1000 * stall.longest_s, 1),
                "ok": outcomes.count("ok"),
                "first_ms_cpu_per_node": round(1000 * first / len(nodes), 3),  # the renewal before: a decode, a connect, no slices
            }
        finally:
            await rack.stop()

    figures = uvloop.run(main()) if uvloop is not None else asyncio.run(main())
    print(json.dumps(figures))


async def _drop_connections(rack: Rack) -> None:
    """Every connection the rack's nodes renewed on, closed: what a blip's timeouts leave."""
    if rack.client is not None:
        rack.client.close()
    else:
        await rack.session.close()
        rack.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None))


async def _renew(node, outcomes: list[str]) -> None:
    outcomes.append(await node._attempt("first"))


async def both_clients(root: Path, say, watch_s: float = 120.0) -> list[dict[str, Any]]:
    """The 2015 lab with even racks on the plain client and odd racks on the old one
    (``renewal_client=half``), one blip over racks 0-2 (both kinds): each rack's nodes and renewal
    attempts ``watch_s`` after it. The same storm from both is the same rows for both kinds."""
    name = "both-clients"
    state = launcher.up(LabSettings(renewal_client="half"), base_port=0, wait_s=120, directory=root / name)
    try:
        auth = headers(ensure_token(root / name))
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            await observe.wait_serving(session, state, 120)

            async def racks() -> list[dict[str, Any]]:
                rows = []
                for r in range(10):
                    async with session.get(state["components"][f"rack-{r:02d}"]["url"] + "/status") as resp:
                        rows.append(await resp.json())
                return rows

            before = await racks()
            blip = {"fault": "blip", "racks": [0, 1, 2], "duration_s": 5.0}
            async with session.post(state["components"]["linkproxy"]["url"] + "/faults", json=blip, headers=auth) as resp:
                if resp.status != 201:
                    raise RuntimeError(f"the blip was refused: {resp.status} {await resp.text()}")
            say(f"  blipped racks 0-2 for 5 s; watching {watch_s:g} s …")
            await asyncio.sleep(5.0 + watch_s)
            after = await racks()
    finally:
        launcher.down(root / name)
    return [
        {
            "rack": r,
            "client": "protocol" if r % 2 == 0 else "session",
            "blipped": r < 3,
            "serving": a["nodes_serving"],
            "disqualified": a["nodes_disqualified"],
            "first_attempts": round(a["renewal_attempts_total"]["first"] - b["renewal_attempts_total"]["first"]),
            "retries": round(a["renewal_attempts_total"]["retry"] - b["renewal_attempts_total"]["retry"]),
        }
        for r, (b, a) in enumerate(zip(before, after, strict=True))
    ]


async def _asleep_then_renew(rack: Rack, node, until: float, outcomes: list[str]) -> None:
    await rack.wait_until(until)
    await _renew(node, outcomes)


class LongestStall:
    """The longest the loop went without running a 1 ms ticker, while in the block."""

    def __init__(self) -> None:
        self.longest_s = 0.0
        self._running = True
        self._task: asyncio.Task | None = None

    async def __aenter__(self) -> LongestStall:
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._running = False
        assert self._task is not None
        await self._task

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while self._running:
            await asyncio.sleep(0.001)
            now = loop.time()
            self.longest_s, last = max(self.longest_s, now - last), now


def rack_link(directory: Path, rack: str) -> str:
    """The URL a lab's rack reaches the metadata service by (its link), from the lab's plan."""
    plan = json.loads((directory / "plan.json").read_text())
    return next(c["env"]["STORMLAB_LINK_URL"] for c in plan["components"] if c["name"] == rack)


async def wait_answering(url: str, limit_s: float = 20.0) -> None:
    """Until ``url`` answers 200 (a process just started), or RuntimeError after ``limit_s``."""
    deadline = time.monotonic() + limit_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url) as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} never answered")


def rebuild_stall(nodes: int = 10_000) -> dict[str, float]:
    """What a GSI-growth fault costs each loop at ``nodes`` nodes, each step timed alone (ms)."""
    s = LabSettings(racks=10, nodes_per_rack=nodes // 10)
    store = MembershipStore.for_fleet(s)
    store.partition_map()
    steps: dict[str, float] = {}

    def timed(name: str, step):
        start = time.perf_counter()
        out = step()
        steps[name] = round(1000 * (time.perf_counter() - start), 2)
        return out

    timed("metadata: the fault (GSIs added)", lambda: store.add_gsis("catalog", 2))
    body = timed("metadata: the next partition map", store.partition_map)
    timed("metadata: the membership sizes (status, scrape)", store.size_distribution)
    big = next(n for n in store.nodes if n in store.index_nodes)
    timed("metadata: one large node's next renewal (its payload)", lambda: store.membership(big))
    parsed = timed("loadgen: decoding the new map", lambda: PartitionMap.decode(body))
    timed("loadgen: routing by it", lambda: Routes(parsed))
    return {"nodes": nodes, "map_bytes": len(body), **steps}
