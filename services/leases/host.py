"""One lease manager host (EC2's DropletWorkflow Manager, DWFM), its bookkeeping (pure).

A host holds a lease on each droplet (a physical server) of its share of the fleet. Every
``check_period_s`` each droplet asks for work: a **check** if its lease is active (a read of the
database, then a little CPU; success extends the lease by ``ttl_s``), an **establish** if it has
none (a write to the database, then the lease's cost in CPU). The work waits in one FIFO queue for
a worker; workers share the host's virtual cores (processor sharing, stormcore.vcpu).

Each item has a timeout, counted from when it was queued. A worker does an item to the end
whatever its age (nothing checks an item before starting it, as nothing did in DWFM); if it
finishes past its timeout the result is thrown away and the item is **queued again** at the back.
So when the queue holds more than the host finishes within one timeout, every item finishes too
late, is queued again, and the queue keeps its length: busy, and no forward progress. Nothing
here decides that; it comes from the queue, the timeout, the cost of a lease and the fleet's size.

What gets out (the operators' moves of 2025, and AWS's fixes after it):

- **throttle** (``admit_rate``): a token bucket on the new work that enters the queue (a lease to
  establish, first asked for or queued again after a timeout; the checks of leases already held
  pass); a refused item is dropped, its droplet asks again next period. Launches share the
  bucket, so a throttled host also refuses launches ("request limit exceeded").
- **queue limit** (``queue_limit``, AWS's fix: throttling by queue size): nothing enters a queue
  that holds this many.
- **restart**: the host's queue and the work in flight are dropped; the leases it holds stay.
- **a retry policy** (``retry``, the racks' protocol, stormcore/retry.py; ``stormlab certify
  --profile aws-2025-10`` measures one): asked after each timeout, its delay holds the item back
  before it is queued again (still the droplet's one item), its ``None`` drops it (the droplet asks
  again at its next moment); ``record`` hears every finished item's outcome, and while ``admits``
  says no (an open breaker) no new lease work enters the queue, as the throttle refuses it
  (``sent``/``finished`` are not called: a host's work in flight is its queue). Without one,
  DWFM: queued again at once.

Time is passed in; nothing here sleeps or reads a clock (the reference model replays it in
virtual time, the live service in the event loop's).
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import itertools
import random
from collections import deque
from dataclasses import dataclass, field

from stormcore import policies
from stormcore.retry import Miss, RetryPolicy
from stormcore.settings import LabSettings

CHECK, ESTABLISH = "check", "establish"
# What became of an item when a worker finished it (the metric's outcome label).
ESTABLISHED, CHECKED, LAPSED, TIMED_OUT, DROPPED, DB_FAILED, RESTARTED = (
    "established",
    "checked",
    "lapsed",
    "timed_out",
    "dropped",
    "db_failed",
    "restarted",
)
OUTCOMES = (ESTABLISHED, CHECKED, LAPSED, TIMED_OUT, DROPPED, DB_FAILED, RESTARTED)
# What became of a droplet's ask, and of a launch.
QUEUED, PENDING, THROTTLED, FULL = "queued", "pending", "throttled", "queue_full"
LAUNCHED, NO_CAPACITY, REQUEST_LIMIT = "launched", "insufficient_capacity", "request_limit_exceeded"
LAUNCH_OUTCOMES = (LAUNCHED, NO_CAPACITY, REQUEST_LIMIT)


@dataclass(frozen=True)
class Rules:
    """A host's settings, in the run's own time (wall seconds at its speed)."""

    check_period_s: float
    ttl_s: float
    timeout_s: float
    check_cost_s: float
    establish_cost_s: float
    admit_rate: float = 0.0  # admissions a second (0: no throttle)
    queue_limit: int = 0  # 0: no limit

    @classmethod
    def of(cls, s: LabSettings) -> Rules:
        """A lab's settings (already at its speed: wall seconds) as a host's rules."""
        return cls(
            check_period_s=s.lease_check_period_s,
            ttl_s=s.lease_ttl_s,
            timeout_s=s.lease_timeout_s,
            check_cost_s=s.lease_check_cost_s,
            establish_cost_s=s.lease_establish_cost_s,
            admit_rate=s.lease_admit_rate,
            queue_limit=s.lease_queue_limit,
        )

    def cost(self, kind: str) -> float:
        return self.check_cost_s if kind == CHECK else self.establish_cost_s


@dataclass
class Item:
    droplet: int
    kind: str
    queued_at: float
    id: int = 0
    tries: int = 1
    first_at: float = 0.0  # when the droplet's ask first queued it
    last_delay_s: float = 0.0  # the retry policy's delay before this try (0: none)


@dataclass
class Bucket:
    """Admissions a second, with a second's worth of burst, and never less than one admission's:
    a bucket that held fewer tokens than a take needs (a rate below one a second, or one slowed by
    ``--speed``) would admit nothing at all."""

    rate: float
    tokens: float = 0.0
    at: float = 0.0

    def take(self, now: float) -> bool:
        self.tokens = min(max(self.rate, 1.0), self.tokens + max(0.0, now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclass
class Counts:
    established: int = 0
    checked: int = 0
    lapsed: int = 0
    timed_out: int = 0
    dropped: int = 0  # timed out and refused a place in the queue again (or given up by the retry policy)
    db_failed: int = 0
    restarted: int = 0  # in the queue or in flight when the host restarted
    throttled: int = 0  # asks refused by the throttle or the queue limit
    wasted_s: float = 0.0  # core-seconds spent on work that timed out


class LeaseHost:
    def __init__(
        self,
        index: int,
        droplets: list[int],
        rules: Rules,
        now: float = 0.0,
        leased_until: float | None = None,
        retry: RetryPolicy | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.index, self.droplets, self.rules = index, droplets, rules
        self.retry, self.rng = retry, rng or random.Random(index)
        self.queue: deque[Item] = deque()
        self.held: list[tuple[float, int, Item]] = []  # timed-out items the retry policy holds back: (until, id, item)
        self.pending: set[int] = set()  # droplets with an item queued or in flight
        self.expiry: dict[int, float] = {} if leased_until is None else dict.fromkeys(droplets, leased_until)
        self.generation = 0  # a restart begins a new one: work from before it is dropped
        self.counts = Counts()
        self._bucket: Bucket | None = None
        self._ids = itertools.count(1)
        self.throttle(rules.admit_rate, now)
        # each droplet asks at its own moment of the period (spread evenly, in the order of the share)
        self._phases = [(i + 0.5) / max(1, len(droplets)) * rules.check_period_s for i in range(len(droplets))]

    # -- state ------------------------------------------------------------------------------
    def leased(self, droplet: int, now: float) -> bool:
        return self.expiry.get(droplet, float("-inf")) > now

    def active(self, now: float) -> int:
        return sum(1 for d in self.droplets if self.leased(d, now))

    @property
    def admit_rate(self) -> float:
        return self._bucket.rate if self._bucket else 0.0

    def throttle(self, rate: float, now: float) -> None:
        """Throttle what enters the queue to ``rate`` a second (0: lift it)."""
        self._bucket = Bucket(rate, 0.0, now) if rate > 0 else None

    def set_queue_limit(self, limit: int) -> None:
        self.rules = dataclasses.replace(self.rules, queue_limit=limit)

    def _admit(self, kind: str, now: float) -> bool:
        if kind == CHECK:
            return True  # a lease held is kept: its check is not new work
        if self.rules.queue_limit and len(self.queue) >= self.rules.queue_limit:
            return False
        if self.retry is not None and not self.retry.admits(now):
            return False  # an open breaker: no new lease work while it is open
        return self._bucket is None or self._bucket.take(now)

    # -- the droplets' asks ----------------------------------------------------------------
    def due(self, since: float, now: float) -> list[int]:
        """The droplets whose moment of the period falls in ``(since, now]``."""
        period = self.rules.check_period_s
        if now - since >= period:
            return list(self.droplets)
        a, b = bisect.bisect_right(self._phases, since % period), bisect.bisect_right(self._phases, now % period)
        return self.droplets[a:b] if a <= b else self.droplets[a:] + self.droplets[:b]

    def ask(self, droplet: int, now: float) -> str:
        """A droplet asks for its check, or for a lease if it holds none."""
        if droplet in self.pending:
            return PENDING
        kind = CHECK if self.leased(droplet, now) else ESTABLISH
        if not self._admit(kind, now):
            self.counts.throttled += 1
            return THROTTLED
        self.queue.append(Item(droplet, kind, now, next(self._ids), first_at=now))
        self.pending.add(droplet)
        return QUEUED

    def release(self, now: float) -> int:
        """The held-back items whose delay is over go to the back of the queue (through the
        throttle and the queue limit, as any new work; refused, they are dropped). How many went."""
        went = 0
        while self.held and self.held[0][0] <= now:
            _, _, item = heapq.heappop(self.held)
            if self._admit(item.kind, now):
                self.queue.append(dataclasses.replace(item, queued_at=now))
                went += 1
            else:
                self._drop(item)
        return went

    def _drop(self, item: Item) -> str:
        self.pending.discard(item.droplet)
        self.counts.dropped += 1
        return DROPPED

    def launch(self, droplet: int, now: float) -> str:
        """A customer's launch placed on ``droplet``: it needs the droplet's lease, and a place
        past the throttle."""
        if self._bucket is not None and not self._bucket.take(now):
            return REQUEST_LIMIT
        return LAUNCHED if self.leased(droplet, now) else NO_CAPACITY

    # -- the workers -----------------------------------------------------------------------
    def take(self) -> Item | None:
        return self.queue.popleft() if self.queue else None

    def finish(self, item: Item, now: float, db_ok: bool, generation: int) -> str:
        """A worker is done with ``item``: its database call went through (``db_ok``) and it had
        its CPU. Returns what became of it."""
        if generation != self.generation:
            return RESTARTED  # counted when the host restarted
        cost = self.rules.cost(item.kind)
        if not db_ok:
            if self.retry is not None:
                self.retry.record(False, now)
            self.pending.discard(item.droplet)
            self.counts.db_failed += 1
            return DB_FAILED
        if now - item.queued_at > self.rules.timeout_s:
            self.counts.timed_out += 1
            self.counts.wasted_s += cost
            return self._again(item, now)
        if self.retry is not None:
            self.retry.record(True, now)
        self.pending.discard(item.droplet)
        if item.kind == CHECK and not self.leased(item.droplet, now):
            self.counts.lapsed += 1  # it ran out while the check waited: the droplet asks for a lease
            return LAPSED
        self.expiry[item.droplet] = now + self.rules.ttl_s
        if item.kind == CHECK:
            self.counts.checked += 1
            return CHECKED
        self.counts.established += 1
        return ESTABLISHED

    def _again(self, item: Item, now: float) -> str:
        """A timed-out item: queued again at once (DWFM), or as its retry policy says."""
        delay: float | None = 0.0
        if self.retry is not None:
            self.retry.record(False, now)
            miss = Miss(item.tries, "timeout", now - item.first_at, item.last_delay_s, ("timeout",) * item.tries)
            delay = self.retry.next_delay(miss, self.rng)
        if delay is None:
            return self._drop(item)
        again = Item(item.droplet, item.kind, now, item.id, item.tries + 1, item.first_at, delay)
        if delay > 0:
            heapq.heappush(self.held, (now + delay, again.id, again))
            return TIMED_OUT
        if self._admit(item.kind, now):
            self.queue.append(again)
            return TIMED_OUT
        return self._drop(item)

    def restart(self, in_flight: int) -> None:
        """The host restarts: its queue, the items it held back and the ``in_flight`` items its
        workers were on are gone."""
        self.counts.restarted += len(self.queue) + len(self.held) + in_flight
        self.generation += 1
        self.queue.clear()
        self.held.clear()
        self.pending.clear()


@dataclass
class Fleet:
    """The droplets dealt out to the manager's hosts, in turn."""

    droplets: int
    hosts: int
    shares: list[list[int]] = field(init=False)

    def __post_init__(self) -> None:
        self.shares = [list(range(h, self.droplets, self.hosts)) for h in range(self.hosts)]

    def host_of(self, droplet: int) -> int:
        return droplet % self.hosts


def hosts_of(
    s: LabSettings, now: float, leased_until: float | None, strict: bool = True, told: policies.Told | None = None
) -> list[LeaseHost]:
    """The manager's hosts for settings ``s`` (at their speed), each with its share of the fleet
    and its own retry policy and generator (a budget's or a breaker's scope is the host). A call
    into a user's policy that raises or breaks its promise raises (``strict``: the model) or is
    answered by the protocol's default and told to ``told`` (live)."""
    rules, shares = Rules.of(s), Fleet(s.lease_droplets, s.lease_hosts).shares
    return [
        LeaseHost(
            h,
            share,
            rules,
            now,
            leased_until,
            policies.named(s.lease_retry_policy, s, strict, told) if s.lease_retry_policy else None,
            random.Random(f"{s.seed}/lease-retry/{h}"),
        )
        for h, share in enumerate(shares)
    ]
