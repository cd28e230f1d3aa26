"""A rack: many virtual storage nodes in one process, each with its own renewal loop.

The loops here only move bytes and wait; what to do is decided by the pure cores: the
refusal state machine, the retry policy and the fixed-rate schedule. A rack reaches the
metadata service through its own link (in the local lab, a port of the fault proxy), and
watches that link with a cheap probe: when the link fails and comes back, every node of the
rack re-fetches its membership at once. That re-fetch is what turns a blip into a herd.
"""
from __future__ import annotations

import asyncio
import json
import logging
import random

import aiohttp

from services.common.fleet import node_id, startup_phases
from services.common.settings import LabSettings
from services.common.window import Window
from storage_node import retry
from storage_node.metrics import ATTEMPTS, RENEWAL_OUTCOMES, RackMetrics
from storage_node.refusal import NodeState, Refusal, RenewalMissed, RenewalSucceeded
from storage_node.schedule import RenewalSchedule

log = logging.getLogger(__name__)
Owned = frozenset[tuple[str, str | None, int]]


class Node:
    def __init__(self, rack: "Rack", index: int, now: float, phase: float) -> None:
        s = rack.settings
        self.rack, self.id = rack, node_id(rack.index, index)
        self.rng = random.Random(f"{s.seed}/{self.id}")
        self.start_at = now + phase * s.renewal_period_s
        self.schedule = RenewalSchedule(self.start_at, s.renewal_period_s, s.renewal_jitter, self.rng)
        self.refusal = Refusal(now)
        self.owned: Owned = frozenset()
        self.version = 0
        self.misses = 0

    def owns(self, table: str, index: str | None, partition: int) -> bool:
        return (table, index, partition) in self.owned

    async def run(self) -> None:
        await self.rack.wait_until(self.start_at, wake_on_link=False)
        while True:
            await self.renew()
            await self.rack.wait_until(self.schedule.next_after(self.rack.now()))

    async def renew(self) -> None:
        """Renew until it succeeds or the retry policy says to wait for the next slot."""
        misses, delay, policy = 0, 0.0, self.rack.policy
        while True:
            started = self.rack.now()
            reason = await self._attempt("retry" if misses else "first")
            policy.record(reason is None)
            if reason is None:
                self.misses = 0
                self._handle(RenewalSucceeded(self.rack.now(), len(self.owned)))
                return
            misses += 1
            self.misses = misses
            self._handle(RenewalMissed(self.rack.now(), reason))
            next_delay = policy.next_delay(misses, delay, self.rng)
            if next_delay is None:
                return
            delay = next_delay
            # A fast failure (refused, paused) waits out its allowance so a dead or paused
            # service is not hit in a tight loop; a timeout has already used it up.
            retry_at = max(self.rack.now() + next_delay, started + self.rack.settings.allowance_s)
            await self.rack.wait_until(retry_at)

    def _handle(self, event: RenewalSucceeded | RenewalMissed) -> None:
        before = self.refusal.state
        after = self.refusal.handle(event)
        if after is NodeState.DISQUALIFIED and before is not NodeState.DISQUALIFIED:
            self.rack.metrics.disqualifications.labels(self.rack.label).inc()

    async def _attempt(self, attempt: str) -> str | None:
        """One renewal request; returns None on success or why it missed."""
        rack = self.rack
        started = rack.now()
        reason: str | None = "error"
        try:
            async with rack.session.get(f"{rack.link_url}/membership/{self.id}", timeout=rack.renewal_timeout) as resp:
                body = await resp.read()
                if resp.status == 200:
                    self._accept(body)
                    reason = None
                elif resp.status == 503:
                    reason = "paused"
        except asyncio.TimeoutError:
            reason = "timeout"
        except (aiohttp.ClientError, OSError):
            reason = "unreachable"
        except ValueError:
            reason = "error"
        elapsed = rack.now() - started
        rack.metrics.renewals.labels(rack.label, attempt, reason or "ok").inc()
        rack.metrics.renewal_seconds.labels(rack.label).observe(elapsed)
        rack.renewal_latency.add(rack.now(), elapsed)
        return reason

    def _accept(self, body: bytes) -> None:
        membership = json.loads(body)
        if membership.get("node") != self.id:
            raise ValueError("membership for another node")
        if membership["version"] != self.version or not self.owned:
            self.owned = frozenset((e["table"], e["index"], e["partition"]) for e in membership["entries"])
            self.version = membership["version"]

    def status(self) -> dict:
        return {"id": self.id, "state": self.refusal.state.value, "reason": None if self.refusal.serving else self.refusal.reason,
                "entries": len(self.owned), "misses": self.misses, "disqualifications": self.refusal.disqualifications}


class Rack:
    def __init__(self, settings: LabSettings, index: int, link_url: str, metrics: RackMetrics) -> None:
        self.settings, self.index, self.link_url, self.metrics = settings, index, link_url.rstrip("/"), metrics
        self.label = str(index)
        self.policy = retry.build(settings.retry_policy, settings.retry_base_s, settings.retry_cap_s,
                                  settings.budget_tokens, settings.budget_ratio)
        self.renewal_timeout = aiohttp.ClientTimeout(total=settings.allowance_s)
        self.renewal_latency = Window(span_s=10.0)
        self.link_up = True
        self._loop = asyncio.get_running_loop()
        self._restored = asyncio.Event()
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None))
        now, phases = self.now(), startup_phases(settings)
        nodes = (Node(self, i, now, phases[node_id(index, i)]) for i in range(settings.nodes_per_rack))
        self.nodes = {n.id: n for n in nodes}
        self._tasks: list[asyncio.Task] = []

    def now(self) -> float:
        return self._loop.time()

    def attempts_total(self) -> dict[str, float]:
        """Renewal attempts so far, first attempts and retries (from the rack's own counter)."""
        registry = self.metrics.registry
        return {attempt: sum(registry.get_sample_value("stormlab_renewals_total",
                                                       {"rack": self.label, "attempt": attempt, "outcome": o}) or 0.0
                             for o in RENEWAL_OUTCOMES) for attempt in ATTEMPTS}

    async def wait_until(self, at: float, wake_on_link: bool = True) -> None:
        """Sleep until ``at``, or until the link comes back after a disruption."""
        delay = at - self.now()
        if delay <= 0:
            return
        if not wake_on_link:
            await asyncio.sleep(delay)
            return
        try:
            await asyncio.wait_for(self._restored.wait(), delay)
        except asyncio.TimeoutError:
            pass

    def start(self) -> None:
        self._tasks = [asyncio.create_task(n.run(), name=n.id) for n in self.nodes.values()]
        self._tasks.append(asyncio.create_task(self._watch_link(), name="link-probe"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.session.close()

    async def _watch_link(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.settings.probe_timeout_s)
        failures = 0
        while True:
            started = self.now()
            try:
                async with self.session.get(f"{self.link_url}/healthz", timeout=timeout) as resp:
                    await resp.read()
                    ok = resp.status == 200
            except (asyncio.TimeoutError, aiohttp.ClientError, OSError):
                ok = False
            failures = 0 if ok else failures + 1
            if failures >= self.settings.probe_failures and self.link_up:
                self._set_link(False)
            elif ok and not self.link_up:
                self._set_link(True)
            await asyncio.sleep(max(0.0, started + self.settings.probe_interval_s - self.now()))

    def _set_link(self, up: bool) -> None:
        self.link_up = up
        self.metrics.link_up.labels(self.label).set(1 if up else 0)
        log.info("rack %s link %s", self.index, "restored: every node renews now" if up else "down")
        if up:
            self.metrics.link_restores.labels(self.label).inc()
            restored, self._restored = self._restored, asyncio.Event()
            restored.set()

    def count(self) -> dict[str, int]:
        counts = {state.value: 0 for state in NodeState}
        for node in self.nodes.values():
            counts[node.refusal.state.value] += 1
        return counts

    def sync_metrics(self) -> None:
        for state, n in self.count().items():
            self.metrics.nodes.labels(self.label, state).set(n)
