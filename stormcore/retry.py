"""Retry policies: the renewal core's retry decision, and the lab's own policies.

The protocol (docs/policies.md), which the racks and the reference model call the same way,
one policy object per rack (a budget's or a breaker's scope is the rack):

- ``next_delay(miss, rng)``: after a missed attempt, the delay in seconds before the next one,
  or ``None`` for "give up: wait for the next scheduled renewal". ``miss`` says which miss in a
  row it is (1 after the first), why it missed, how long this renewal has taken so far, the
  delay chosen before, and every miss of this renewal; ``rng`` is the node's own seeded
  generator (draw jitter from it, so the same seed gives the same storm).
- ``record(ok, now)``: every attempt's outcome, for a policy that keeps state (a budget).
- ``admits(now)``: whether the rack may send at all now (an open breaker says no: the node
  counts a miss without a request).
- ``sent(retry, now)`` and ``finished(retry, now)``: an attempt left for the metadata service
  (``retry``: it is not its renewal's first), and that attempt is over (answered, refused, timed
  out or failed; called before ``record`` and ``next_delay`` for it). Every sent attempt is
  finished once; one an open breaker kept back is neither. For a policy that counts what is in
  flight across the rack (Envoy's retry circuit breakers).

Whatever the policy says, a retry never comes sooner than the allowance after the attempt
began (the renewal core's floor; storage_node/renewal.py).

When to use which:

- ``immediate``: what the storage servers did in 2015. Every failing node keeps one request
  in flight at all times, so a saturated metadata service never gets a moment to drain.
- ``exponential``: spreads each node's own retries out, but nodes that failed together
  retry together: plain exponential backoff does not resolve contention between many
  clients.
- ``full-jitter``: a uniform delay in ``[0, min(cap, base * 2**(n-1))]``; breaks the
  synchronisation between nodes and is the usual best choice for a herd.
- ``decorrelated-jitter``: ``min(cap, uniform(base, 3 * last))``; like full jitter, with
  delays that grow from the previous one rather than from the attempt count.
- ``+budget``: a token bucket in the style of gRPC retry throttling, shared by a rack:
  each miss takes a token, each success returns ``ratio``; below half the bucket nobody
  retries and nodes wait for their next scheduled renewal. Caps the retry amplification
  whatever the inner policy is.
- ``+adaptive``: client-side adaptive throttling (Google's SRE book, "Handling Overload"),
  shared by a rack: it counts the rack's attempts and the accepted ones (decaying, about the
  last ``ADAPTIVE_WINDOW`` attempts) and gives up a retry with probability
  ``max(0, (requests - K * accepts) / (requests + 1))``, ``K = 2``: once more than half the
  attempts fail, retries thin out in proportion, and come back as the service answers again.
- ``+breaker``: a circuit breaker shared by a rack: after ``failures`` misses in a row across
  the rack it opens for ``open_s``: no node of the rack sends a renewal (scheduled or retry;
  each counts as a miss without a request) and none retries. Then it closes on trial: the
  next miss opens it again, a success closes it for good. The metadata service gets the
  rack's whole load off its back at once, which also means the rack's nodes go without
  memberships while it is open.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

OUTCOMES = ("timeout", "unreachable", "paused", "overloaded", "breaker", "error")  # why an attempt missed


class Miss(NamedTuple):
    """What a policy is told after a missed attempt (a tuple: one is made after every miss)."""

    attempt: int  # misses in a row in this renewal: 1 after the first
    outcome: str  # why it missed: one of OUTCOMES
    elapsed_s: float  # since this renewal's first attempt began, the missed attempt included
    last_delay_s: float = 0.0  # the delay this policy chose before the missed attempt (0 before the first retry)
    outcomes: tuple[str, ...] = ()  # every miss of this renewal so far, oldest first (the last is ``outcome``)


CALLS = ("next_delay", "record", "admits", "sent", "finished")  # the protocol's calls, by name (a broken one is counted by it)


class RetryPolicy(Protocol):
    def next_delay(self, miss: Miss, rng: random.Random) -> float | None: ...

    def record(self, ok: bool, now: float = 0.0) -> None: ...

    def admits(self, now: float) -> bool: ...

    def sent(self, retry: bool, now: float) -> None: ...

    def finished(self, retry: bool, now: float) -> None: ...


class Plain:
    """The protocol's optional parts for a policy that keeps no count: nothing to record, always admits."""

    def record(self, ok: bool, now: float = 0.0) -> None:
        return None

    def admits(self, now: float) -> bool:
        return True

    def sent(self, retry: bool, now: float) -> None:
        return None

    def finished(self, retry: bool, now: float) -> None:
        return None


class Around:
    """A policy around an ``inner`` one: what it does not decide itself is the inner policy's."""

    inner: RetryPolicy

    def record(self, ok: bool, now: float = 0.0) -> None:
        self.inner.record(ok, now)

    def admits(self, now: float) -> bool:
        return self.inner.admits(now)

    def sent(self, retry: bool, now: float) -> None:
        self.inner.sent(retry, now)

    def finished(self, retry: bool, now: float) -> None:
        self.inner.finished(retry, now)


@dataclass(frozen=True)
class Immediate(Plain):
    def next_delay(self, miss: Miss, rng: random.Random) -> float | None:
        return 0.0


@dataclass(frozen=True)
class Exponential(Plain):
    base_s: float
    cap_s: float

    def next_delay(self, miss: Miss, rng: random.Random) -> float | None:
        return _ceiling(self.base_s, self.cap_s, miss.attempt)


@dataclass(frozen=True)
class FullJitter(Plain):
    base_s: float
    cap_s: float

    def next_delay(self, miss: Miss, rng: random.Random) -> float | None:
        return rng.uniform(0.0, _ceiling(self.base_s, self.cap_s, miss.attempt))


@dataclass(frozen=True)
class DecorrelatedJitter(Plain):
    base_s: float
    cap_s: float

    def next_delay(self, miss: Miss, rng: random.Random) -> float | None:
        return min(self.cap_s, rng.uniform(self.base_s, max(self.base_s, 3.0 * miss.last_delay_s)))


@dataclass
class TokenBucket:
    """gRPC's retry-throttling bucket: starts full, a failure takes a token, a success gives
    ``ratio`` back, and retries go only while more than half of ``size`` is left."""

    size: float
    ratio: float
    tokens: float = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = self.size

    def succeeded(self) -> None:
        self.tokens = min(self.size, self.tokens + self.ratio)

    def failed(self) -> None:
        self.tokens = max(0.0, self.tokens - 1.0)

    def allows_retry(self) -> bool:
        return self.tokens > self.size / 2


@dataclass
class RetryBudget(Around):
    """The bucket shared by a rack: every miss takes a token."""

    inner: RetryPolicy
    max_tokens: float
    ratio: float
    bucket: TokenBucket = field(init=False)

    def __post_init__(self) -> None:
        self.bucket = TokenBucket(self.max_tokens, self.ratio)

    def record(self, ok: bool, now: float = 0.0) -> None:
        self.inner.record(ok, now)
        if ok:
            self.bucket.succeeded()
        else:
            self.bucket.failed()

    def next_delay(self, miss: Miss, rng: random.Random) -> float | None:
        if not self.bucket.allows_retry():
            return None
        return self.inner.next_delay(miss, rng)


ADAPTIVE_K = 2.0
ADAPTIVE_WINDOW = 500.0  # attempts: the counts decay by 1/window per attempt


@dataclass
class AdaptiveThrottle(Around):
    inner: RetryPolicy
    k: float = ADAPTIVE_K
    window: float = ADAPTIVE_WINDOW
    requests: float = 0.0
    accepts: float = 0.0

    def record(self, ok: bool, now: float = 0.0) -> None:
        self.inner.record(ok, now)
        keep = 1.0 - 1.0 / self.window
        self.requests = self.requests * keep + 1.0
        self.accepts = self.accepts * keep + (1.0 if ok else 0.0)

    def rejection(self) -> float:
        return max(0.0, (self.requests - self.k * self.accepts) / (self.requests + 1.0))

    def next_delay(self, miss: Miss, rng: random.Random) -> float | None:
        if rng.random() < self.rejection():
            return None
        return self.inner.next_delay(miss, rng)


@dataclass
class CircuitBreaker(Around):
    inner: RetryPolicy
    failures: int
    open_s: float
    misses: int = 0  # in a row, across the rack
    open_until: float = float("-inf")
    trial: bool = False  # closed on trial after an opening: one miss opens it again
    now: float = 0.0  # the time of the last outcome recorded
    openings: int = 0
    probes: int | None = None  # half-open: at most this many attempts until an outcome decides (None: every node's)
    probing: int = 0  # attempts admitted while half-open
    held: int = 0  # attempts it kept back half-open whose misses are still to be recorded

    def record(self, ok: bool, now: float = 0.0) -> None:
        self.inner.record(ok, now)
        self.now = max(self.now, now)
        if ok:
            self.misses, self.trial = 0, False
            return
        if now < self.open_until:
            return  # a miss the breaker itself caused, or an answer from before it opened
        if self.held:
            self.held -= 1  # a miss it caused half-open (its probes out): the probes decide
            return
        self.misses += 1
        if self.trial or self.misses >= self.failures:
            self.open_until, self.misses, self.trial, self.probing = now + self.open_s, 0, True, 0
            self.openings += 1

    def admits(self, now: float) -> bool:
        if now < self.open_until or not self.inner.admits(now):
            return False
        if self.trial and self.probes is not None:
            if self.probing >= self.probes:
                self.held += 1  # half-open, its probes out: the rest wait for what they find
                return False
            self.probing += 1
        return True

    def next_delay(self, miss: Miss, rng: random.Random) -> float | None:
        if self.now < self.open_until:
            return None  # open: wait for the next scheduled slot
        return self.inner.next_delay(miss, rng)


def _ceiling(base_s: float, cap_s: float, misses: int) -> float:
    return min(cap_s, base_s * 2.0 ** min(max(misses - 1, 0), 60))


def build(
    name: str,
    base_s: float,
    cap_s: float,
    budget_tokens: float,
    budget_ratio: float,
    breaker_failures: int = 10,
    breaker_open_s: float = 5.0,
) -> RetryPolicy:
    """A policy from its settings name: ``immediate``, ``full-jitter+budget``, ``budget`` …"""
    inner_name, _, suffix = name.partition("+")
    if inner_name == "budget":
        inner_name, suffix = "immediate", "budget"
    makers: dict[str, Callable[[], RetryPolicy]] = {
        "immediate": Immediate,
        "exponential": lambda: Exponential(base_s, cap_s),
        "full-jitter": lambda: FullJitter(base_s, cap_s),
        "decorrelated-jitter": lambda: DecorrelatedJitter(base_s, cap_s),
    }
    if inner_name not in makers or suffix not in ("", "budget", "adaptive", "breaker"):
        raise ValueError(f"unknown retry policy {name!r}")
    policy = makers[inner_name]()
    if suffix == "adaptive":
        return AdaptiveThrottle(policy)
    if suffix == "breaker":
        return CircuitBreaker(policy, breaker_failures, breaker_open_s)
    return RetryBudget(policy, budget_tokens, budget_ratio) if suffix else policy
