"""A queue checker in the style of Jepsen's total-queue test: every acknowledged send is
received at least once, and nothing is received that was never sent.

A producer sends unique messages to the queues service's ``checks`` queue while a consumer
receives and deletes them (as SQS's clients do: receive, work, DeleteMessage), and faults hit
the lab; at the end the queue is drained. Each send ends as the client saw it:

- acknowledged: 201, so the message must be received at least once (else: lost);
- refused: an error answer, or the connection was refused: it may not be received (else: a
  refusal that was not one);
- indeterminate: the answer never came; either ending is correct.

A message received more than once is a duplicate: allowed (delivery is at least once), counted.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp

ACKED, REFUSED, UNKNOWN = "acknowledged", "refused", "indeterminate"
QUEUE = "checks"
VISIBILITY_S = 5.0  # how long a received message stays hidden (profile time) before it is handed out again


@dataclass
class QueueLedger:
    """Every send by how it ended for the client, and every message the consumer received."""

    sends: dict[str, set[int]] = field(default_factory=lambda: {ACKED: set(), REFUSED: set(), UNKNOWN: set()})
    received: collections.Counter[int] = field(default_factory=collections.Counter)
    foreign: int = 0  # messages on the queue from another run (received and deleted, not judged)

    def sent(self, outcome: str, n: int) -> None:
        self.sends[outcome].add(n)

    def got(self, body: Any, tag: str) -> None:
        if isinstance(body, dict) and body.get("qc") == tag and isinstance(body.get("n"), int):
            self.received[body["n"]] += 1
        else:
            self.foreign += 1


@dataclass(frozen=True)
class QueueVerdict:
    sent: int
    acknowledged: int
    refused: int
    indeterminate: int
    received: int  # distinct messages received
    lost: int  # acknowledged, never received
    unexpected: int  # received, yet never sent or refused
    duplicates: int  # receptions beyond the first
    recovered: int  # indeterminate sends that were received
    drained: bool  # the queue was empty, nothing in flight, at the end
    foreign: int = 0  # another run's messages found on the queue

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.unexpected == 0 and self.drained


def queue_verdict(ledger: QueueLedger, drained: bool) -> QueueVerdict:
    """Compare what the producer was told with what the consumer received (pure)."""
    acked, refused, unknown = ledger.sends[ACKED], ledger.sends[REFUSED], ledger.sends[UNKNOWN]
    got = set(ledger.received)
    attempted_ok = acked | unknown
    return QueueVerdict(
        sent=len(acked) + len(refused) + len(unknown),
        acknowledged=len(acked),
        refused=len(refused),
        indeterminate=len(unknown),
        received=len(got),
        lost=len(acked - got),
        unexpected=len(got - attempted_ok),
        duplicates=sum(ledger.received.values()) - len(got),
        recovered=len(unknown & got),
        drained=drained,
        foreign=ledger.foreign,
    )


async def send_one(session: aiohttp.ClientSession, url: str, body: dict[str, Any], timeout_s: float) -> str:
    try:
        async with session.post(f"{url}/queues/{QUEUE}/messages", json={"body": body}, timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            await r.read()
            return ACKED if r.status == 201 else REFUSED
    except aiohttp.ClientConnectorError:  # refused: nothing was sent
        return REFUSED
    except (TimeoutError, aiohttp.ClientError, OSError):  # sent, the answer lost
        return UNKNOWN


async def receive_some(session: aiohttp.ClientSession, url: str, ledger: QueueLedger, tag: str, visibility_s: float) -> int | None:
    """One receive of up to 10, each message recorded, then deleted; how many came (None: no answer)."""
    try:
        async with session.post(
            f"{url}/queues/{QUEUE}/receive",
            json={"max": 10, "visibility_timeout_s": visibility_s},
            timeout=aiohttp.ClientTimeout(total=2.0),
        ) as r:
            if r.status != 200:
                return None
            messages = (await r.json())["messages"]
        for m in messages:
            ledger.got(m["body"], tag)
            async with session.delete(f"{url}/queues/{QUEUE}/messages/{m['receipt']}", timeout=aiohttp.ClientTimeout(total=2.0)) as d:
                await d.read()  # a delete that fails leaves the message to be received again: a duplicate
        return len(messages)
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError, KeyError):
        return None


async def consume(
    session: aiohttp.ClientSession, url: str, ledger: QueueLedger, tag: str, visibility_s: float, stop: Callable[[], bool]
) -> None:
    while not stop():
        got = await receive_some(session, url, ledger, tag, visibility_s)
        if not got:
            await asyncio.sleep(0.1)


async def drain(session: aiohttp.ClientSession, url: str, ledger: QueueLedger, tag: str, visibility_s: float, limit_s: float) -> bool:
    """Receive until the queue is empty with nothing in flight (hidden messages come back after
    their visibility timeout), within ``limit_s``; whether it got there."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while loop.time() < deadline:
        got = await receive_some(session, url, ledger, tag, visibility_s)
        if got:
            continue
        try:
            async with session.get(f"{url}/queues/{QUEUE}", timeout=aiohttp.ClientTimeout(total=2.0)) as r:
                stored = (await r.json())["stored"] if r.status == 200 else None
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError, KeyError):
            stored = None
        if got == 0 and stored == 0:
            return True
        await asyncio.sleep(0.5)
    return False


async def check_queues(
    state: dict[str, Any],
    duration_s: float,
    rate: float,
    faults: Callable[[], Coroutine[Any, Any, None]] | None = None,
    tag: str = "qc",
    stop: Callable[[], bool] = lambda: False,
    drain_s: float = 180.0,
) -> QueueVerdict:
    """Send for ``duration_s`` (or until ``stop()``) while consuming and while ``faults`` runs;
    then drain the queue and judge."""
    url = state["components"]["queues"]["url"]
    speed = float(state.get("settings", {}).get("STORMLAB_SPEED", 1.0) or 1.0)
    visibility_s = VISIBILITY_S  # the service scales it to the lab's speed
    ledger, loop = QueueLedger(), asyncio.get_running_loop()
    until = loop.time() + duration_s
    producing = True
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        consumer = asyncio.create_task(consume(session, url, ledger, tag, visibility_s, lambda: not producing))
        chaos = asyncio.create_task(faults()) if faults else None
        pending: set[asyncio.Task[None]] = set()
        n = 0
        try:
            while loop.time() < until and not stop():

                async def one(n: int = n) -> None:
                    ledger.sent(await send_one(session, url, {"qc": tag, "n": n}, 2.0), n)

                task = asyncio.create_task(one())
                pending.add(task)
                task.add_done_callback(pending.discard)
                n += 1
                await asyncio.sleep(1.0 / rate)
            await asyncio.gather(*pending)
        finally:
            if chaos is not None:
                chaos.cancel()
                await asyncio.gather(chaos, return_exceptions=True)
            producing = False
            await asyncio.gather(consumer, return_exceptions=True)
        drained = await drain(session, url, ledger, tag, visibility_s, drain_s + visibility_s / speed)
    return queue_verdict(ledger, drained)
