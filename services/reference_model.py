"""The reference model: the lab's own pure cores run in virtual time, no sockets.

It wires the virtual CPU, the refusal state machine, the retry policies and the renewal
schedule together the way the live processes do, and steps through events in simulated
time, so a storm over 1,000 nodes and five minutes runs in seconds. It predicts what the
live lab should show and lets tests check the mechanism without a network. What it leaves
out (HTTP, the event loops, the probe's exact timing) is what the live lab adds.
"""
from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass

from metadata_service.membership import MembershipStore
from metadata_service.vcpu import VirtualCpu
from services.common.fleet import rack_of, startup_phases
from services.common.settings import LabSettings
from storage_node import retry
from storage_node.refusal import Refusal, RenewalMissed, RenewalSucceeded
from storage_node.schedule import RenewalSchedule

LINK_DETECT_S = 0.4  # the probe notices the link is back within about two probe intervals


@dataclass
class _Node:
    id: str
    rack: int
    entries: int
    schedule: RenewalSchedule
    refusal: Refusal
    rng: random.Random
    misses: int = 0
    delay: float = 0.0
    attempt: int | None = None  # the job in flight, if any


class ReferenceModel:
    def __init__(self, settings: LabSettings) -> None:
        s = self.s = settings
        store = MembershipStore.for_fleet(settings)
        phases = startup_phases(settings)
        self.cpu = VirtualCpu(s.capacity_cores)
        self.policy = retry.build(s.retry_policy, s.retry_base_s, s.retry_cap_s, s.budget_tokens, s.budget_ratio)
        self.nodes = {}
        for n in store.nodes:
            rng = random.Random(f"{s.seed}/{n}")
            start = phases[n] * s.renewal_period_s
            self.nodes[n] = _Node(n, rack_of(n), store.entries(n),
                                  RenewalSchedule(start, s.renewal_period_s, s.renewal_jitter, rng), Refusal(0.0), rng)
        self.total_entries = sum(n.entries for n in self.nodes.values())
        self._events: list = []
        self._seq = itertools.count()
        self._jobs = itertools.count()
        self._abandoned: set[int] = set()
        self.cut: tuple[set[int], float, float] = (set(), 0.0, 0.0)
        self.now = 0.0
        for node in self.nodes.values():
            self._at(node.schedule.next_after(-1.0), "renew", node)

    def blip(self, racks: set[int], start: float, duration: float) -> None:
        self.cut = (racks, start, start + duration)
        for node in self.nodes.values():
            if node.rack in racks:
                self._at(start + duration + LINK_DETECT_S, "link_restored", node)

    def error_ratio(self) -> float:
        """Customer traffic is uniform over partitions, so this is the refusing nodes' share."""
        refusing = sum(n.entries for n in self.nodes.values() if not n.refusal.serving)
        return refusing / self.total_entries

    def run_until(self, t_end: float) -> None:
        while True:
            cpu_next = self.cpu.next_completion()
            ev_next = self._events[0][0] if self._events else float("inf")
            t = min(cpu_next if cpu_next is not None else float("inf"), ev_next)
            if t > t_end:
                self.cpu.advance(t_end)
                self.now = t_end
                return
            self.now = t
            for job in self.cpu.advance(t):
                self._finished(job)
            while self._events and self._events[0][0] <= t:
                _, _, kind, node, job = heapq.heappop(self._events)
                getattr(self, f"_on_{kind}")(node, job)

    def _at(self, t: float, kind: str, node: _Node, job: int | None = None) -> None:
        heapq.heappush(self._events, (t, next(self._seq), kind, node, job))

    def _send(self, node: _Node) -> None:
        job = node.attempt = next(self._jobs)
        self._at(self.now + self.s.allowance_s, "timeout", node, job)
        racks, start, end = self.cut
        if node.rack in racks and start <= self.now < end:
            return  # black-holed: it never reaches the metadata service
        self.cpu.submit((node.id, job), self.s.cost_base_s + self.s.cost_per_entry_s * node.entries, self.now)

    def _on_renew(self, node: _Node, job: int | None) -> None:
        if node.attempt is None:
            node.misses, node.delay = 0, 0.0
            self._send(node)

    def _on_link_restored(self, node: _Node, job: int | None) -> None:
        self._on_renew(node, None)

    def _on_retry(self, node: _Node, job: int | None) -> None:
        if node.attempt is None:
            self._send(node)

    def _finished(self, key: tuple[str, int]) -> None:
        node_id, job = key
        node = self.nodes[node_id]
        if job in self._abandoned:
            self._abandoned.discard(job)
            return
        if node.attempt != job:
            return
        node.attempt = None
        self.policy.record(True)
        node.refusal.handle(RenewalSucceeded(self.now, node.entries))
        self._at(node.schedule.next_after(self.now), "renew", node)

    def _on_timeout(self, node: _Node, job: int) -> None:
        if node.attempt != job:
            return
        node.attempt = None
        if self.s.abandoned_work == "cancel":
            self.cpu.cancel((node.id, job), self.now)
        else:
            self._abandoned.add(job)
        self.policy.record(False)
        node.misses += 1
        node.refusal.handle(RenewalMissed(self.now, "timeout"))
        delay = self.policy.next_delay(node.misses, node.delay, node.rng)
        if delay is None:
            self._at(node.schedule.next_after(self.now), "renew", node)
        else:
            node.delay = delay
            self._at(self.now + delay, "retry", node)


def replay(settings: LabSettings, settle_s: float = 30.0, blip_racks: int = 3, blip_s: float = 5.0,
           watch_s: float = 240.0) -> dict[str, float]:
    """Error ratios of one story: before the blip, the mean of the last 60 s, and the mean after the blip."""
    model = ReferenceModel(settings)
    model.run_until(settle_s)
    baseline = model.error_ratio()
    model.blip(set(range(blip_racks)), settle_s, blip_s)
    samples = []
    t = settle_s
    while t < settle_s + blip_s + watch_s:
        t += 1.0
        model.run_until(t)
        samples.append((t, model.error_ratio()))
    end = samples[-1][0]
    last = [r for ts, r in samples if ts > end - 60]
    after = [r for ts, r in samples if ts > settle_s + blip_s]
    return {"baseline": baseline, "plateau": sum(last) / len(last), "post_blip": sum(after) / len(after),
            "peak": max(r for _, r in samples)}
