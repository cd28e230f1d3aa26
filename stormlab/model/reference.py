"""The reference model: the lab's own pure cores run in virtual time, no sockets.

It wires the lab's pieces together the way the live processes do and steps through events in
simulated time, so a storm over 1,000 nodes and five minutes runs in seconds: the membership
store, the virtual CPU and the admission rule (pause, staged readmission) of the metadata
service; the renewal schedule, the renewal core (refusal, retry policy with its budget per rack,
the allowance floor for fast failures) and the link watch of the racks. What it leaves out (HTTP,
the event loops, the link proxy's bytes) is what the live lab adds; ``tests/integration/
test_storm.py`` compares the two.

The operator's moves are here too: pause, readmit (at once or staged), and capacity through the
admin path (which queues on the same virtual CPU and times out in a storm) or break-glass.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field
from typing import Any

from metadata_service.admission import Admission, door, membership_work_s
from metadata_service.membership import MembershipStore
from storage_node.link import RESTORED, LinkWatch
from storage_node.refusal import Refusal
from storage_node.renewal import KEPT_BACK, OK, Attempt, Renewal, rack_policy
from storage_node.schedule import RenewalSchedule
from stormcore.fleet import cell_cores, cell_of, holds_gsi_heavy, node_index, rack_of, startup_phases
from stormcore.settings import LabSettings
from stormcore.vcpu import VirtualCpu


@dataclass
class _Node:
    id: str
    rack: int
    cell: int
    entries: int
    big: bool
    schedule: RenewalSchedule
    renewal: Renewal
    rng: random.Random
    attempt: int | None = None  # the attempt in flight, if any
    started: float = 0.0
    waiting: str = "renew"  # what the node waits for between attempts: its next slot, or a retry
    wake: int = 0  # bumped when the node is woken early: events scheduled before are stale


@dataclass
class _Cell:
    """One metadata-service instance: its virtual CPU and its front door."""

    cpu: VirtualCpu
    admission: Admission = field(default_factory=Admission)


@dataclass
class _Rack:
    watch: LinkWatch
    cuts: list[tuple[float, float]] = field(default_factory=list)
    probe_started: float = 0.0  # when its last probe went out (the next goes a probe interval later)

    def cut_at(self, t: float) -> tuple[float, float] | None:
        return next(((a, b) for a, b in self.cuts if a <= t < b), None)


class ReferenceModel:
    def __init__(self, settings: LabSettings) -> None:
        s = self.s = settings
        store = MembershipStore.for_fleet(settings)
        phases = startup_phases(settings)
        self.cells = [_Cell(VirtualCpu(cell_cores(c, s))) for c in range(s.cells)]
        self.policies = {r: rack_policy(s) for r in range(s.racks)}  # the budget's scope is the rack
        self.racks = {r: _Rack(LinkWatch(s.probe_failures)) for r in range(s.racks)}
        self.nodes: dict[str, _Node] = {}
        for n in store.nodes:
            rng = random.Random(f"{s.seed}/{n}")
            rack = rack_of(n)
            big = holds_gsi_heavy(rack, node_index(n), s)
            self.nodes[n] = _Node(
                n,
                rack,
                cell_of(rack, s),
                store.entries(n),
                big,
                RenewalSchedule(phases[n] * s.renewal_period_s, s.renewal_period_s, s.renewal_jitter, rng),
                Renewal(Refusal(0.0)),
                rng,
            )
        self.total_entries = sum(n.entries for n in self.nodes.values())
        self.now = 0.0
        self.sent = 0  # renewal attempts that left a node (a rack's open breaker sends none)
        self.wasted_s = 0.0  # core-seconds the metadata service spent on answers whose node had given up
        self.admin = {"done": 0, "timed_out": 0}  # admin requests through the shared path
        self._events: list[tuple[float, int, str, Any, int]] = []
        self._seq = itertools.count()
        self._jobs = itertools.count()
        self._abandoned: list[dict[int, tuple[Any, int]]] = [{} for _ in self.cells]  # per cell: job -> its CPU key, oldest first
        self._admin: dict[int, tuple[int, float]] = {}  # admin jobs in flight -> their cell and the cores they set
        probe_rng = random.Random(f"{s.seed}/probes")
        for r in self.racks:
            self._at(probe_rng.uniform(0, s.probe_interval_s), "probe", r)
        for node in self.nodes.values():
            self._at(node.schedule.next_after(-1.0), "renew", node)

    # -- what the operator and the chaos tool do -------------------------------------------

    def blip(self, racks: set[int], start: float, duration: float) -> None:
        """Black-hole these racks' traffic to the metadata service from ``start`` for ``duration``."""
        for r in racks:
            self.racks[r].cuts.append((start, start + duration))

    @property
    def cpu(self) -> VirtualCpu:
        """The first cell's virtual CPU (the only one without cells)."""
        return self.cells[0].cpu

    def pause(self, cell: int = 0) -> None:
        self.cells[cell].admission.pause()

    def resume(self, groups: int = 1, every_s: float = 0.0, cell: int = 0) -> None:
        self.cells[cell].admission.resume(self.now, groups, every_s)

    def set_capacity(self, cores: float, break_glass: bool = False, timeout_s: float = 2.0, cell: int = 0) -> None:
        """Through the cell's shared admin path (a job on the same virtual CPU, given up after
        ``timeout_s``), or around it."""
        cpu = self.cells[cell].cpu
        if break_glass or self.s.admin_apart:
            self._settle(cpu.set_cores(cores, self.now))
            return
        job = next(self._jobs)
        self._admin[job] = (cell, cores)
        self._settle(cpu.submit(("admin", job), self.s.admin_cost_s, self.now))
        self._at(self.now + timeout_s, "admin_timeout", cell, job)

    # -- what the lab shows ----------------------------------------------------------------

    def error_ratio(self, cells: set[int] | None = None) -> float:
        """Customer traffic is uniform over partitions, so this is the refusing nodes' share
        (of the nodes of ``cells``, or of the whole fleet)."""
        members = [n for n in self.nodes.values() if cells is None or n.cell in cells]
        refusing = sum(n.entries for n in members if not n.renewal.refusal.serving)
        return refusing / max(1, sum(n.entries for n in members))

    def disqualified_by_class(self) -> dict[str, float]:
        """The fraction of the big-membership and of the small-membership nodes refusing now."""
        out = {}
        for name, big in (("big", True), ("small", False)):
            members = [n for n in self.nodes.values() if n.big == big]
            out[name] = sum(not n.renewal.refusal.serving for n in members) / max(1, len(members))
        return out

    # -- the clock -------------------------------------------------------------------------

    def run_until(self, t_end: float) -> None:
        while True:
            done = (c.cpu.next_completion() for c in self.cells)
            cpu_next = min((t for t in done if t is not None), default=float("inf"))
            ev_next = self._events[0][0] if self._events else float("inf")
            t = min(cpu_next, ev_next)
            if t > t_end:
                self._advance(t_end)
                self.now = t_end
                return
            self.now = t
            self._advance(t)
            while self._events and self._events[0][0] <= t:
                _, _, kind, subject, tag = heapq.heappop(self._events)
                getattr(self, f"_on_{kind}")(subject, tag)

    def _at(self, t: float, kind: str, subject: Any, tag: int = 0) -> None:
        heapq.heappush(self._events, (t, next(self._seq), kind, subject, tag))

    def _advance(self, t: float) -> None:
        for c in self.cells:
            self._settle(c.cpu.advance(t))

    def _settle(self, finished: list[Any]) -> None:
        for job in finished:
            self._finished(job)

    # -- a node's renewals -----------------------------------------------------------------

    def _send(self, node: _Node) -> None:
        policy = self.policies[node.rack]
        if not policy.admits(self.now):  # the rack's breaker is open: nothing is sent
            self._decide(node, Attempt(self.now, self.now, KEPT_BACK))
            return
        node.renewal.sending(policy, self.now)
        job = node.attempt = next(self._jobs)
        node.started = self.now
        self.sent += 1
        rack = self.racks[node.rack]
        cut = rack.cut_at(self.now)
        if cut is not None:  # black-holed: nothing resets it at the heal, it hangs until its deadline
            self._at(self.now + self.s.allowance_s, "lost", node, job)
            return
        cell, work = self.cells[node.cell], membership_work_s(self.s, node.entries)
        refused = door(cell.admission, node.id, self.now, work, cell.cpu.inflight, cell.cpu.cores, self.s.allowance_s, self.s)
        if refused:  # a pause or admission control: turned away at the door, for free
            node.attempt = None
            self._decide(node, Attempt(self.now, self.now, refused))
            return
        self._settle(cell.cpu.submit((node.id, job), work, self.now))
        self._at(self.now + self.s.allowance_s, "timeout", node, job)

    def _decide(self, node: _Node, attempt: Attempt) -> None:
        decision = node.renewal.after(attempt, self.policies[node.rack], node.rng, self.s.allowance_s)
        if decision.retry_at is None:
            node.waiting = "renew"
            self._at(node.schedule.next_after(self.now), "renew", node, node.wake)
        else:
            node.waiting = "retry"
            self._at(decision.retry_at, "retry", node, node.wake)

    def _on_renew(self, node: _Node, wake: int) -> None:
        if node.attempt is None and wake == node.wake:
            node.renewal.start()
            self._send(node)

    def _on_retry(self, node: _Node, wake: int) -> None:
        if node.attempt is None and wake == node.wake:
            self._send(node)

    def _finished(self, key: tuple[Any, int]) -> None:
        who, job = key
        if who == "admin":
            order = self._admin.pop(job, None)
            if order is not None:
                self.admin["done"] += 1
                cell, cores = order
                self._settle(self.cells[cell].cpu.set_cores(cores, self.now))
            return
        node = self.nodes[who]
        if job in self._abandoned[node.cell]:
            del self._abandoned[node.cell][job]
            self.wasted_s += membership_work_s(self.s, node.entries)
            return
        if node.attempt != job or self.racks[node.rack].cut_at(self.now):
            return  # given up already, or the answer is lost on a cut link (the node times out)
        node.attempt = None
        self._decide(node, Attempt(node.started, self.now, OK, node.entries))

    def _on_timeout(self, node: _Node, job: int) -> None:
        if node.attempt != job:
            return
        node.attempt = None
        cpu = self.cells[node.cell].cpu
        if self.s.abandoned_work == "cancel":
            wasted, finished = cpu.cancel((node.id, job), self.now)
            self.wasted_s += wasted
            self._settle(finished)
        else:  # the lab's bound: past abandoned_cap (per cell), the cell's oldest abandoned request is dropped
            abandoned = self._abandoned[node.cell]
            abandoned[job] = (node.id, job)
            while len(abandoned) > self.s.abandoned_cap:
                wasted, finished = cpu.cancel(abandoned.pop(next(iter(abandoned))), self.now)
                self.wasted_s += wasted
                self._settle(finished)
        self._decide(node, Attempt(node.started, self.now, "timeout"))

    def _on_lost(self, node: _Node, job: int) -> None:
        if node.attempt == job:
            node.attempt = None
            timed_out = self.now >= node.started + self.s.allowance_s
            self._decide(node, Attempt(node.started, self.now, "timeout" if timed_out else "unreachable"))

    def _on_admin_timeout(self, cell: int, job: int) -> None:
        if self._admin.pop(job, None) is not None:  # the admin request gave up: nothing changes
            self.admin["timed_out"] += 1
            _, finished = self.cells[cell].cpu.cancel(("admin", job), self.now)
            self._settle(finished)

    # -- a rack's link ---------------------------------------------------------------------

    def _on_probe(self, rack_index: int, hanging: int) -> None:
        """A rack's link probe, as the rack's own loop runs it: one every probe interval; a probe
        that meets the cut hangs until its timeout (the heal resets nothing), and fails; the next
        one goes at once if its interval has passed. So after the heal the rack sees its link up
        within a probe's timeout and an interval, and wakes the nodes that wait (for a slot or a
        retry); a node whose attempt hangs on the cut keeps waiting for it until its deadline.
        The herd is spread over the allowance, as measured live through the kernel's rules and
        the link proxy alike (benchmarks/herd_shape.py, docs/profile.md)."""
        rack, s = self.racks[rack_index], self.s
        if hanging:
            rack.watch.probe(False)
            self._at(max(rack.probe_started + s.probe_interval_s, self.now), "probe", rack_index)
            return
        rack.probe_started = self.now
        cut = rack.cut_at(self.now)
        if cut is not None:
            self._at(self.now + s.probe_timeout_s, "probe", rack_index, 1)
            return
        if rack.watch.probe(True) == RESTORED:
            for node in self.nodes.values():
                if node.rack == rack_index and node.attempt is None:
                    node.wake += 1  # every waiting node of the rack renews now: the herd
                    if node.waiting == "renew":
                        node.renewal.start()
                    self._send(node)
        self._at(self.now + s.probe_interval_s, "probe", rack_index)


def replay(
    settings: LabSettings, settle_s: float = 30.0, blip_racks: int = 3, blip_s: float = 5.0, watch_s: float = 240.0
) -> dict[str, Any]:
    """One story: error ratios before the blip, the mean of the last 60 s, the mean after the
    blip, the peak, and which node classes are disqualified at the end."""
    model = ReferenceModel(settings)
    blip_at = 1.5 * settings.renewal_period_s + settle_s  # every node has its membership, then the baseline
    model.run_until(blip_at)
    baseline = model.error_ratio()
    model.blip(set(range(blip_racks)), blip_at, blip_s)
    samples = []
    t = blip_at
    while t < blip_at + blip_s + watch_s:
        t += 1.0
        model.run_until(t)
        samples.append((t, model.error_ratio()))
    end = samples[-1][0]
    last = [r for ts, r in samples if ts > end - 6 * settings.renewal_period_s]
    after = [r for ts, r in samples if ts > blip_at + blip_s]
    return {
        "baseline": baseline,
        "plateau": sum(last) / len(last),
        "post_blip": sum(after) / len(after),
        "peak": max(r for _, r in samples),
        "disqualified_at_end": model.disqualified_by_class(),
    }
