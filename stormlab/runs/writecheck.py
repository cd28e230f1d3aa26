"""A write checker in the style of a Jepsen set test: nothing acknowledged is ever lost.

A client writes unique items through the customer API (each to the node the partition map
names, as loadgen's customers do) while faults hit the lab, then reads back every item. Each
write ends one of three ways, as the client saw it:

- acknowledged: the node answered 200, so the item must be there at the end (else: lost);
- refused: the node answered an error (503 disqualified, 409 wrong owner, 507 quota) or the
  connection was refused (a killed rack): the client was told it failed, so the item must not
  be there (else: a failure that was not one);
- indeterminate: the request timed out or the connection broke after it was sent: the client
  does not know, and either ending is correct.

    stormlab writecheck --duration 2m [--rate 40] [--kill-every 20s] [--queues]   (against the running lab)

Prints the counts and exits 1 if anything acknowledged was lost or anything refused was stored.
With --queues the queues service is checked too (queuecheck.py: every acknowledged send
received at least once), its process SIGKILLed every --kill-queues-every.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from chaos import client
from services.storage import Storage, StorageError, keep_map_fresh
from stormcore.auth import ensure_token
from stormcore.errors import LabError, UsageError
from stormcore.labstate import running, state_dir
from stormcore.racks import RackUrls
from stormcore.settings import parse_duration
from stormlab.runs.queuecheck import QueueVerdict, check_queues

ACKED, REFUSED, UNKNOWN = "acknowledged", "refused", "indeterminate"
TABLES = ("orders", "carts", "sessions", "catalog")


@dataclass
class Ledger:
    """Every write the client made, by how it ended for the client."""

    outcomes: dict[str, dict[tuple[str, str], Any]] = field(default_factory=lambda: {ACKED: {}, REFUSED: {}, UNKNOWN: {}})

    def record(self, outcome: str, table: str, key: str, value: Any) -> None:
        self.outcomes[outcome][(table, key)] = value


@dataclass(frozen=True)
class Verdict:
    written: int
    acknowledged: int
    refused: int
    indeterminate: int
    read_back: int  # acknowledged items found with their value
    lost: int  # acknowledged, not found (or another value)
    refused_but_stored: int  # the client was told it failed, yet the item is there
    unreadable: int  # acknowledged items whose read never got an answer by the deadline

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.refused_but_stored == 0 and self.unreadable == 0


def verdict(ledger: Ledger, found: dict[tuple[str, str], Any], unreadable: set[tuple[str, str]]) -> Verdict:
    """Compare what the client was told with what the lab holds (pure)."""
    acked, refused = ledger.outcomes[ACKED], ledger.outcomes[REFUSED]
    read_back = sum(1 for item, value in acked.items() if item in found and found[item] == value)
    lost = sum(1 for item, value in acked.items() if item not in unreadable and found.get(item) != value)
    return Verdict(
        written=sum(len(v) for v in ledger.outcomes.values()),
        acknowledged=len(acked),
        refused=len(refused),
        indeterminate=len(ledger.outcomes[UNKNOWN]),
        read_back=read_back,
        lost=lost,
        refused_but_stored=sum(1 for item in refused if found.get(item) is not None),
        unreadable=len(unreadable & set(acked)),
    )


async def write_one(storage: Storage, session: aiohttp.ClientSession, table: str, key: str, value: Any, timeout_s: float) -> str:
    """One write, and how it ended for the client."""
    try:
        url = storage.url(table, key)
    except (StorageError, ValueError):  # no route yet: never sent
        return REFUSED
    try:
        async with session.put(url, json={"value": value}, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            await resp.read()
            return ACKED if resp.status == 200 else REFUSED
    except aiohttp.ClientConnectorError:  # the connection was refused: nothing was sent
        return REFUSED
    except (TimeoutError, aiohttp.ClientError, OSError):  # sent, answer lost: either way is right
        return UNKNOWN


async def write_loop(
    storage: Storage, session: aiohttp.ClientSession, ledger: Ledger, rate: float, until: float, tag: str, stop: Callable[[], bool]
) -> None:
    loop, n, pending = asyncio.get_running_loop(), 0, set()
    while loop.time() < until and not stop():
        table, key, value = TABLES[n % len(TABLES)], f"wc-{tag}-{n}", {"n": n, "tag": tag}
        n += 1

        async def one(table: str = table, key: str = key, value: Any = value) -> None:
            ledger.record(await write_one(storage, session, table, key, value, 2.0), table, key, value)

        task = asyncio.create_task(one())
        pending.add(task)
        task.add_done_callback(pending.discard)
        await asyncio.sleep(1.0 / rate)
    await asyncio.gather(*pending)


async def read_back(
    storage: Storage, items: list[tuple[str, str]], deadline_s: float = 120.0
) -> tuple[dict[tuple[str, str], Any], set[tuple[str, str]]]:
    """Every item's value (None: not there), reading again while a node refuses; the items
    that never got an answer by the deadline are returned apart."""
    loop = asyncio.get_running_loop()
    end, found, left = loop.time() + deadline_s, {}, list(items)
    while left and loop.time() < end:
        retry = []
        for table, key in left:
            try:
                found[(table, key)] = await storage.get(table, key, timeout_s=2.0)
            except StorageError:  # refused, moved, timed out: ask again
                retry.append((table, key))
        left = retry
        if left:
            await asyncio.sleep(1.0)
            await storage.refresh_map()
    return found, set(left)


async def check(
    state: dict[str, Any],
    duration_s: float,
    rate: float,
    faults: Callable[[], Coroutine[Any, Any, None]] | None = None,
    tag: str | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> Verdict:
    """Write for ``duration_s`` (or until ``stop()``) while ``faults`` runs, then read everything back."""
    comps = state["components"]
    racks = [comps[n]["url"] for n in sorted(comps) if n.startswith("rack-")]
    tag = tag or f"{int(time.time())}"
    ledger = Ledger()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        storage = Storage(comps["metadata"]["url"], RackUrls(racks), session, 2.0)
        fresh = asyncio.create_task(keep_map_fresh(storage, 1.0))
        chaos = asyncio.create_task(faults()) if faults else None
        try:
            for _ in range(300):  # the partition map, before the first write (30 s at most)
                if storage.map is not None:
                    break
                await asyncio.sleep(0.1)
            else:
                raise LabError("the metadata service gave no partition map within 30 s")
            await write_loop(storage, session, ledger, rate, asyncio.get_running_loop().time() + duration_s, tag, stop)
        finally:
            if chaos is not None:
                chaos.cancel()
                await asyncio.gather(chaos, return_exceptions=True)
        items = [*ledger.outcomes[ACKED], *ledger.outcomes[REFUSED]]
        found, unreadable = await read_back(storage, items)
        fresh.cancel()
    return verdict(ledger, found, unreadable)


def rack_killer(state: dict[str, Any], every_s: float, seed: int = 0) -> Callable[[], Coroutine[Any, Any, None]]:
    """SIGKILL a random rack through the chaos tool every ``every_s`` (restarted 2 s later)."""
    return killer(state, every_s, seed, sorted(n for n in state["components"] if n.startswith("rack-")))


def killer(state: dict[str, Any], every_s: float, seed: int, targets: list[str]) -> Callable[[], Coroutine[Any, Any, None]]:
    """SIGKILL one of ``targets`` through the chaos tool every ``every_s`` (restarted 2 s later)."""
    token, rng = ensure_token(state_dir()), random.Random(seed)

    async def kill() -> None:
        while True:
            await asyncio.sleep(every_s)
            target = rng.choice(targets)
            try:
                await asyncio.to_thread(client.apply, state, "kill", {"target": target, "duration": "2s"}, token)
                print(f"writecheck: killed {target}", file=sys.stderr, flush=True)
            except (UsageError, LabError) as exc:  # already down, being restarted: the next one
                print(f"writecheck: kill {target}: {exc}", file=sys.stderr, flush=True)

    return kill


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", default="60s", help="how long to write (default 60s)")
    p.add_argument("--rate", type=float, default=40.0, help="writes per second (default 40)")
    p.add_argument("--kill-every", default="20s", help="SIGKILL a random rack this often (0: never; default 20s)")
    p.add_argument("--seed", type=int, default=0, help="seed for which racks are killed (default 0)")
    p.add_argument(
        "--queues",
        action="store_true",
        help="also check the queues service (Jepsen's total-queue): every acknowledged send received at least once, "
        "nothing received that was never sent, duplicates counted",
    )
    p.add_argument("--kill-queues-every", default="30s", help="with --queues: SIGKILL the queues service this often (0: never)")
    p.add_argument("--json", action="store_true", help="the result is one JSON document on stdout either way (kills on stderr)")


def run(args: argparse.Namespace) -> int:
    duration, every = parse_duration(args.duration), parse_duration(args.kill_every)
    if not 0 < duration <= 24 * 3600 or not 0 < args.rate <= 1000 or every < 0:
        raise UsageError("--duration must be more than 0 (at most 24h), --rate more than 0 and at most 1000, --kill-every not negative")
    state = running()
    if not state:
        raise LabError("no lab is up: start one with `stormlab up`")
    if args.queues and "queues" not in state["components"]:
        raise LabError("--queues needs the cascade's queues service in the lab (`stormlab up` starts it unless --cascade none)")
    kill_queues = parse_duration(args.kill_queues_every) if args.queues else 0.0
    if kill_queues < 0:
        raise UsageError("--kill-queues-every must not be negative")

    async def both() -> tuple[Verdict, QueueVerdict | None]:
        items = check(state, duration, args.rate, rack_killer(state, every, args.seed) if every else None)
        if not args.queues:
            return await items, None
        queues = check_queues(state, duration, args.rate, killer(state, kill_queues, args.seed, ["queues"]) if kill_queues else None,
                              tag=f"qc-{int(time.time())}")  # fmt: skip
        return tuple(await asyncio.gather(items, queues))  # type: ignore[return-value]

    result, queues = asyncio.run(both())
    ok = result.ok and (queues is None or queues.ok)
    report = asdict(result) | ({"queues": asdict(queues) | {"ok": queues.ok}} if queues else {}) | {"ok": ok}
    print(json.dumps(report, indent=1))
    return 0 if ok else 1
