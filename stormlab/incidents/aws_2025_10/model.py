"""The aws-2025-10 profile in virtual time: the lease manager's hosts, their queues and virtual
CPUs, the droplets' asks and the customers' launches, with no process and no clock (pure).

The same :class:`~services.leases.host.LeaseHost` the live service runs decides every item;
this loop stands in for the event loop: each host's workers take items from its queue and share
its virtual cores (:class:`~stormcore.vcpu.VirtualCpu`), the database answers at once or
not at all (its endpoint broken), and the operators' moves land at the times a plan gives.
A run returns what a person watches: launch errors, leases held, leases established a second,
the queues, the work timing out, per window.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from services.leases.host import DROPPED, ESTABLISHED, LAUNCHED, TIMED_OUT, Fleet, Item, LeaseHost, hosts_of
from stormcore.settings import LabSettings
from stormcore.vcpu import VirtualCpu

STEP_S = 0.1  # the asks and the launches are dealt out per step; the CPU's finishes are exact


@dataclass(frozen=True)
class Move:
    """Something that happens at ``at_s`` (profile seconds): the endpoint breaks or is repaired
    (``endpoint``: False, True), a throttle (``throttle``: admissions a second per host, 0 lifts
    it), a queue limit, or a restart of some hosts (``restart``: their indices)."""

    at_s: float
    endpoint: bool | None = None
    throttle: float | None = None
    queue_limit: int | None = None
    restart: tuple[int, ...] = ()


@dataclass
class Window:
    start_s: float
    launches: int = 0
    launch_errors: int = 0
    established: int = 0
    timed_out: int = 0
    leases: int = 0  # held at the window's end
    queued: int = 0  # waiting at the window's end, every host

    @property
    def launch_error_ratio(self) -> float | None:
        return self.launch_errors / self.launches if self.launches else None


@dataclass
class Run:
    windows: list[Window] = field(default_factory=list)
    droplets: int = 0
    window_s: float = 10.0

    def between(self, start_s: float, end_s: float) -> list[Window]:
        return [w for w in self.windows if start_s <= w.start_s and w.start_s + self.window_s <= end_s + 1e-9]

    def error_ratio(self, start_s: float, end_s: float) -> float:
        ws = self.between(start_s, end_s)
        launches = sum(w.launches for w in ws)
        return sum(w.launch_errors for w in ws) / launches if launches else 0.0

    def established_per_s(self, start_s: float, end_s: float) -> float:
        ws = self.between(start_s, end_s)
        return sum(w.established for w in ws) / (len(ws) * self.window_s) if ws else 0.0

    def recovered_at(self, after_s: float, share: float = 0.99) -> float | None:
        """The first window's end after ``after_s`` with ``share`` of the fleet leased."""
        for w in self.windows:
            if w.start_s >= after_s and w.leases >= share * self.droplets:
                return w.start_s + self.window_s
        return None


class _Host:
    """A host with its workers and its virtual CPU."""

    def __init__(self, host: LeaseHost, cores: float, workers: int) -> None:
        self.host, self.workers = host, workers
        self.cpu = VirtualCpu(cores)
        self.flight: dict[int, tuple[Item, int]] = {}
        self.jobs = 0

    def fill(self, now: float, db_up: bool) -> None:
        while len(self.flight) < self.workers:
            item = self.host.take()
            if item is None:
                return
            if not db_up:  # the database call fails at once: no CPU spent
                self.host.finish(item, now, False, self.host.generation)
                continue
            self.jobs += 1
            self.flight[self.jobs] = (item, self.host.generation)
            self.cpu.submit(self.jobs, self.host.rules.cost(item.kind), now)

    def run_to(self, end: float, db_up: bool, window: Window) -> None:
        while True:
            at = self.cpu.next_completion()
            at = end if at is None or at > end else at
            done = self.cpu.advance(at)  # at ``end`` too: a job due within the CPU's rounding of it finishes there
            for job in done:
                item, generation = self.flight.pop(job)  # type: ignore[call-overload]
                outcome = self.host.finish(item, at, True, generation)
                window.established += outcome == ESTABLISHED
                window.timed_out += outcome in (TIMED_OUT, DROPPED)
            self.fill(at, db_up)
            if at >= end:
                return

    def restart(self, now: float) -> None:
        for job in list(self.flight):
            self.cpu.cancel(job, now)
        self.host.restart(len(self.flight))
        self.flight.clear()


def simulate(settings: LabSettings, moves: Sequence[Move], duration_s: float, window_s: float = 10.0) -> Run:
    """The profile (at speed 1) for ``duration_s``, every lease held at the start."""
    s = settings.profile_time()
    fleet = Fleet(s.lease_droplets, s.lease_hosts)
    hosts = [_Host(host, s.lease_host_cores, s.lease_workers) for host in hosts_of(s, 0.0, s.lease_ttl_s)]
    rng = random.Random(f"{s.seed}/launches")
    pending = sorted(moves, key=lambda m: m.at_s)
    run = Run(droplets=s.lease_droplets, window_s=window_s)
    db_up, launch_debt, now = True, 0.0, 0.0
    window = Window(0.0)
    while now < duration_s - 1e-9:
        end = min(duration_s, now + STEP_S)
        while pending and pending[0].at_s <= now + 1e-9:
            db_up = _apply(pending.pop(0), hosts, db_up, now)
        for h in hosts:
            h.run_to(end, db_up, window)
            h.host.release(end)
            for droplet in h.host.due(now, end):
                h.host.ask(droplet, end)
            h.fill(end, db_up)
        launch_debt += s.launch_rate * (end - now)
        while launch_debt >= 1.0:
            launch_debt -= 1.0
            droplet = rng.randrange(s.lease_droplets)
            outcome = hosts[fleet.host_of(droplet)].host.launch(droplet, end)
            window.launches += 1
            window.launch_errors += outcome != LAUNCHED
        now = end
        if now >= window.start_s + window_s - 1e-9:
            window.leases = sum(h.host.active(now) for h in hosts)
            window.queued = sum(len(h.host.queue) for h in hosts)
            run.windows.append(window)
            window = Window(now)
    return run


def _apply(move: Move, hosts: list[_Host], db_up: bool, now: float) -> bool:
    if move.endpoint is not None:
        db_up = move.endpoint
    if move.throttle is not None:
        for h in hosts:
            h.host.throttle(move.throttle, now)
    if move.queue_limit is not None:
        for h in hosts:
            h.host.set_queue_limit(move.queue_limit)
    for index in move.restart:
        hosts[index].restart(now)
    return db_up


# The account's trigger, in the profile's time: the endpoint breaks at 60 s and is repaired at
# 360 s, long past a lease's 60 s (every lease has lapsed), and then one watches.
BREAK_S, REPAIR_S = 60.0, 360.0


def outage(outage_s: float) -> tuple[Move, Move]:
    """The endpoint's record empty for ``outage_s`` from BREAK_S on."""
    return (Move(BREAK_S, endpoint=False), Move(BREAK_S + outage_s, endpoint=True))


OUTAGE = outage(REPAIR_S - BREAK_S)


def recovers(settings: LabSettings, watch_s: float = 300.0) -> bool:
    """Whether the lease manager gets its leases back by itself after the outage: launch errors
    under 10% over the last 60 s of ``watch_s`` after the repair, with no move of anyone's."""
    run = simulate(settings, OUTAGE, REPAIR_S + watch_s)
    return run.error_ratio(REPAIR_S + watch_s - 60, REPAIR_S + watch_s) < 0.1


def largest_fleet(settings: LabSettings, high: int = 40_000) -> int:
    """The largest fleet (a multiple of the hosts) that recovers by itself: where the collapse
    begins, by bisection (recovery is monotone in the fleet's size: more droplets, more work)."""
    hosts = settings.lease_hosts
    lo, hi = 0, high // hosts  # droplets per host: lo recovers (or is none), hi is assumed not to
    while hi - lo > max(1, lo // 50):  # to 2%
        mid = (lo + hi) // 2
        if recovers(settings.replace(lease_droplets=mid * hosts)):
            lo = mid
        else:
            hi = mid
    return lo * hosts


def threshold_map(settings: LabSettings, timeouts_s: Sequence[float]) -> list[tuple[float, int]]:
    """Per work-item timeout, the largest fleet that recovers by itself."""
    return [(t, largest_fleet(settings.replace(lease_timeout_s=t))) for t in timeouts_s]


if __name__ == "__main__":  # python -m stormlab.incidents.aws_2025_10.model: the collapse's threshold, fleet against timeout
    import sys

    from stormcore.incidents.aws_2025_10 import NAME
    from stormcore.settings import profile

    base = profile(NAME)
    timeouts = [float(a) for a in sys.argv[1:]] or [10.0, 20.0, 40.0, 60.0]
    print(
        f"{'timeout':>8}  {'largest fleet that recovers':>28}   (hosts {base.lease_hosts}, {base.lease_host_cores:g} cores each, "
        f"{base.lease_establish_cost_s:g} core-s a lease; the profile: {base.lease_droplets} droplets, {base.lease_timeout_s:g}s)"
    )
    for timeout, fleet in threshold_map(base, timeouts):
        print(f"{timeout:>7g}s  {fleet:>28}", flush=True)
