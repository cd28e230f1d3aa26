"""Retry policies: small pure callables that say how long a node waits before retrying.

``next_delay(misses, last_delay, rng)`` gets the number of consecutive misses so far
(1 after the first) and returns the delay in seconds, or ``None`` for "do not retry; wait
for the next scheduled renewal". ``record(ok)`` tells a stateful policy (the budget) how
each attempt went.

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
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


class RetryPolicy(Protocol):
    def next_delay(self, misses: int, last_delay: float, rng: random.Random) -> float | None: ...

    def record(self, ok: bool) -> None: ...


class _Stateless:
    def record(self, ok: bool) -> None:
        return None


@dataclass(frozen=True)
class Immediate(_Stateless):
    def next_delay(self, misses: int, last_delay: float, rng: random.Random) -> float | None:
        return 0.0


@dataclass(frozen=True)
class Exponential(_Stateless):
    base_s: float
    cap_s: float

    def next_delay(self, misses: int, last_delay: float, rng: random.Random) -> float | None:
        return _ceiling(self.base_s, self.cap_s, misses)


@dataclass(frozen=True)
class FullJitter(_Stateless):
    base_s: float
    cap_s: float

    def next_delay(self, misses: int, last_delay: float, rng: random.Random) -> float | None:
        return rng.uniform(0.0, _ceiling(self.base_s, self.cap_s, misses))


@dataclass(frozen=True)
class DecorrelatedJitter(_Stateless):
    base_s: float
    cap_s: float

    def next_delay(self, misses: int, last_delay: float, rng: random.Random) -> float | None:
        return min(self.cap_s, rng.uniform(self.base_s, max(self.base_s, 3.0 * last_delay)))


@dataclass
class RetryBudget:
    inner: RetryPolicy
    max_tokens: float
    ratio: float
    tokens: float = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = self.max_tokens

    def record(self, ok: bool) -> None:
        self.inner.record(ok)
        self.tokens = min(self.max_tokens, self.tokens + self.ratio) if ok else max(0.0, self.tokens - 1.0)

    def next_delay(self, misses: int, last_delay: float, rng: random.Random) -> float | None:
        if self.tokens <= self.max_tokens / 2:
            return None
        return self.inner.next_delay(misses, last_delay, rng)


ADAPTIVE_K = 2.0
ADAPTIVE_WINDOW = 500.0  # attempts: the counts decay by 1/window per attempt


@dataclass
class AdaptiveThrottle:
    inner: RetryPolicy
    k: float = ADAPTIVE_K
    window: float = ADAPTIVE_WINDOW
    requests: float = 0.0
    accepts: float = 0.0

    def record(self, ok: bool) -> None:
        self.inner.record(ok)
        keep = 1.0 - 1.0 / self.window
        self.requests = self.requests * keep + 1.0
        self.accepts = self.accepts * keep + (1.0 if ok else 0.0)

    def rejection(self) -> float:
        return max(0.0, (self.requests - self.k * self.accepts) / (self.requests + 1.0))

    def next_delay(self, misses: int, last_delay: float, rng: random.Random) -> float | None:
        if rng.random() < self.rejection():
            return None
        return self.inner.next_delay(misses, last_delay, rng)


def _ceiling(base_s: float, cap_s: float, misses: int) -> float:
    return min(cap_s, base_s * 2.0 ** min(max(misses - 1, 0), 60))


def build(name: str, base_s: float, cap_s: float, budget_tokens: float, budget_ratio: float) -> RetryPolicy:
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
    if inner_name not in makers or suffix not in ("", "budget", "adaptive"):
        raise ValueError(f"unknown retry policy {name!r}")
    policy = makers[inner_name]()
    if suffix == "adaptive":
        return AdaptiveThrottle(policy)
    return RetryBudget(policy, budget_tokens, budget_ratio) if suffix else policy
