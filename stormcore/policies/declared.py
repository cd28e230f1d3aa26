"""A stormlab policy file: a retry policy as settings, for those who do not write code.

Its schema is scenarios/policy.schema.json; every field is optional::

    name: checkout-service        # what the certificate calls it
    attempt_timeout: 1s           # per attempt (the lab's allowance; default: the lab's 1 s)
    deadline: 8s                  # give up once a renewal has taken this long
    max_attempts: 5               # attempts per renewal, the first included
    backoff: {base: 0.5s, cap: 10s, multiplier: 2}
    jitter: full                  # none, full, equal or decorrelated
    retry_budget: {tokens: 10, ratio: 0.1}
    circuit_breaker: {threshold: 10, open: 5s, half_open_probes: 1}
    adaptive_throttling: {k: 2, window: 500}

The delay before retry ``n`` (after the n-th miss in a row) is ``min(cap, base * multiplier**(n-1))``
jittered: ``none`` as it is, ``full`` uniform in [0, d], ``equal`` d/2 + uniform in [0, d/2],
``decorrelated`` ``min(cap, uniform(base, 3 * previous delay))``. Giving up (``max_attempts``,
``deadline``, the budget, the throttle, an open breaker) means: wait for the next scheduled
renewal. The budget, the throttle and the breaker are the lab's own (stormcore/retry.py) and
their scope is the rack, as for the lab's built-in policies.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stormcore import retry
from stormcore.documents import is_number
from stormcore.policies.errors import PolicyError
from stormcore.settings import SettingsError, parse_duration

JITTERS = ("none", "full", "equal", "decorrelated")
FIELDS: dict[str, tuple[str, ...] | None] = {
    "name": None,
    "attempt_timeout": None,
    "deadline": None,
    "max_attempts": None,
    "backoff": ("base", "cap", "multiplier"),
    "jitter": None,
    "retry_budget": ("tokens", "ratio"),
    "circuit_breaker": ("threshold", "open", "half_open_probes"),
    "adaptive_throttling": ("k", "window"),
}


@dataclass(frozen=True)
class Backoff(retry.Plain):
    base_s: float
    cap_s: float
    multiplier: float
    jitter: str

    def next_delay(self, miss: retry.Miss, rng: random.Random) -> float | None:
        if self.jitter == "decorrelated":
            return min(self.cap_s, rng.uniform(self.base_s, max(self.base_s, 3.0 * miss.last_delay_s)))
        try:
            d = min(self.cap_s, self.base_s * self.multiplier ** (miss.attempt - 1))
        except OverflowError:
            d = self.cap_s
        if self.jitter == "full":
            return rng.uniform(0.0, d)
        if self.jitter == "equal":
            return d / 2 + rng.uniform(0.0, d / 2)
        return d


@dataclass
class Limits(retry.Around):
    """Gives up after ``max_attempts`` attempts, or when the next attempt would start past the deadline."""

    inner: retry.RetryPolicy
    max_attempts: int | None
    deadline_s: float | None

    def next_delay(self, miss: retry.Miss, rng: random.Random) -> float | None:
        if self.max_attempts is not None and miss.attempt >= self.max_attempts:
            return None
        delay = self.inner.next_delay(miss, rng)
        if delay is not None and self.deadline_s is not None and miss.elapsed_s + delay >= self.deadline_s:
            return None
        return delay


def adapt(doc: dict[str, Any]) -> tuple[Callable[[], retry.RetryPolicy], float | None, tuple[str, ...]]:
    """A policy file's mapping as a policy maker, its attempt timeout and what it says in words."""
    unknown = sorted(set(doc) - set(FIELDS))
    if unknown:
        raise PolicyError(f"a policy file has no {', '.join(map(repr, unknown))}; its fields: {', '.join(FIELDS)} (policy.schema.json)")
    for key, parts in FIELDS.items():
        if parts and key in doc:
            if not isinstance(doc[key], dict):
                raise PolicyError(f"{key} takes a mapping of {', '.join(parts)}")
            extra = sorted(set(doc[key]) - set(parts))
            if extra:
                raise PolicyError(f"{key} has no {', '.join(map(repr, extra))}; it takes {', '.join(parts)}")
    b = doc.get("backoff") or {}
    base = _seconds(b.get("base", 0.0), "backoff.base", 0.0, 3600.0)
    cap = _seconds(b.get("cap", max(base, 10.0) if b else 0.0), "backoff.cap", base, 3600.0)
    multiplier = _number(b.get("multiplier", 2.0), "backoff.multiplier", 1.0, 100.0)
    jitter = doc.get("jitter", "none")
    if jitter not in JITTERS:
        raise PolicyError(f"jitter is one of {', '.join(JITTERS)}, not {jitter!r}")
    attempts = doc.get("max_attempts")
    if attempts is not None:
        attempts = int(_number(attempts, "max_attempts", 1, 1000, integer=True))
    deadline = _seconds(doc["deadline"], "deadline", 0.001, 3600.0) if "deadline" in doc else None
    timeout = _seconds(doc["attempt_timeout"], "attempt_timeout", 0.01, 600.0) if "attempt_timeout" in doc else None
    budget, breaker, adaptive = doc.get("retry_budget"), doc.get("circuit_breaker"), doc.get("adaptive_throttling")
    if budget is not None:
        tokens = _number(budget.get("tokens", 10), "retry_budget.tokens", 1, 1e6)
        ratio = _number(budget.get("ratio", 0.1), "retry_budget.ratio", 0, 1e6)
    if breaker is not None:
        threshold = int(_number(breaker.get("threshold", 10), "circuit_breaker.threshold", 1, 1_000_000, integer=True))
        open_s = _seconds(breaker.get("open", 5.0), "circuit_breaker.open", 0.01, 3600.0)
        probes = breaker.get("half_open_probes")
        probes = None if probes is None else int(_number(probes, "circuit_breaker.half_open_probes", 1, 1_000_000, integer=True))
    if adaptive is not None:
        k = _number(adaptive.get("k", retry.ADAPTIVE_K), "adaptive_throttling.k", 1.0, 100.0)
        window = _number(adaptive.get("window", retry.ADAPTIVE_WINDOW), "adaptive_throttling.window", 1.0, 1e6)
    if "name" in doc and not isinstance(doc["name"], str):
        raise PolicyError("name is text")

    def make() -> retry.RetryPolicy:
        policy: retry.RetryPolicy = Backoff(base, cap, multiplier, jitter)
        if attempts is not None or deadline is not None:
            policy = Limits(policy, attempts, deadline)
        if budget is not None:
            policy = retry.RetryBudget(policy, tokens, ratio)
        if adaptive is not None:
            policy = retry.AdaptiveThrottle(policy, k, window)
        if breaker is not None:
            policy = retry.CircuitBreaker(policy, threshold, open_s, probes=probes)
        return policy

    words = [f"backoff base {base:g}s, cap {cap:g}s, x{multiplier:g}, jitter {jitter}"]
    words += [f"at most {attempts} attempts"] if attempts is not None else []
    words += [f"deadline {deadline:g}s"] if deadline is not None else []
    words += [f"attempt timeout {timeout:g}s"] if timeout is not None else []
    words += [f"retry budget {tokens:g} tokens, {ratio:g} back per success"] if budget is not None else []
    words += [f"adaptive throttling K={k:g} over ~{window:g} attempts"] if adaptive is not None else []
    if breaker is not None:
        words.append(f"circuit breaker at {threshold} misses, open {open_s:g}s" + (f", {probes} half-open probes" if probes else ""))
    return make, timeout, tuple(words)


def _seconds(value: Any, what: str, lo: float, hi: float) -> float:
    if isinstance(value, bool):
        raise PolicyError(f"{what} is a duration (1s, 500ms, or seconds), not {value!r}")
    try:
        seconds = float(value) if isinstance(value, int | float) else parse_duration(str(value))
    except (SettingsError, ValueError):
        raise PolicyError(f"{what} is a duration (1s, 500ms, or seconds), not {value!r}") from None
    if not lo <= seconds <= hi:
        raise PolicyError(f"{what} must be between {lo:g}s and {hi:g}s, got {value!r}")
    return seconds


def _number(value: Any, what: str, lo: float, hi: float, integer: bool = False) -> float:
    if not is_number(value, integer) or not lo <= value <= hi:
        kind = "a whole number" if integer else "a number"
        raise PolicyError(f"{what} is {kind} between {lo:g} and {hi:g}, got {value!r}")
    return float(value)
