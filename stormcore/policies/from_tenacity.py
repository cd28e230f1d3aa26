"""tenacity's configuration run as a renewal's retry policy.

Give the lab a ``tenacity.Retrying`` (or a function decorated with ``@tenacity.retry``, or a
bare wait strategy) in a Python file: ``--retry-policy ./retrying.py:retrying``. Its parts are
read, not called: tenacity draws its jitter from the ``random`` module, which would make a storm
depend on everything else that draws from it, so each strategy is rebuilt here drawing from the
node's seeded generator, in the same order as tenacity (its delays are tenacity's own for the
same seed: tests/unit/test_policy_adapters.py).

Maps: ``wait`` — wait_none, wait_fixed, wait_random, wait_incrementing, wait_exponential,
wait_random_exponential, wait_exponential_jitter, their sums (``+``, wait_combine) and
wait_chain; ``stop`` — stop_never, stop_after_attempt, stop_after_delay, stop_before_delay and
their combinations (``|``, ``&``); ``retry`` — tenacity's default, retry_if_exception_type,
retry_if_exception, retry_always (every renewal miss is an exception to the client), retry_never.
Refused: any other strategy (a subclass, a custom callable, a predicate on results), named.
Give-up (``stop``) means the node waits for its next scheduled renewal. ``before``, ``after``,
``before_sleep`` and ``sleep`` do not change when a retry is sent and are not read.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from typing import Any

from stormcore import retry
from stormcore.policies.errors import PolicyError

try:
    import tenacity
    from tenacity import stop as ts
    from tenacity import wait as tw

    tr = importlib.import_module("tenacity.retry")  # the module (tenacity.retry is also the decorator)
except ImportError:  # tenacity is the service's, not the lab's: without it nothing here is asked for
    tenacity = ts = tw = tr = None  # type: ignore[assignment]

Wait = Callable[[int, random.Random], float]  # (attempt number, rng) -> seconds
Stop = Callable[[int, float, float], bool]  # (attempt number, seconds since start, upcoming sleep) -> give up


def is_tenacity(obj: Any) -> bool:
    if type(obj).__module__.split(".")[0] == "tenacity":
        return True
    return callable(obj) and type(getattr(obj, "retry", None)).__module__.split(".")[0] == "tenacity"


def adapt(obj: Any) -> tuple[Callable[[], retry.RetryPolicy], tuple[str, ...]]:
    retrying = obj if isinstance(obj, tenacity.BaseRetrying) else getattr(obj, "retry", None)
    if isinstance(retrying, tenacity.BaseRetrying):
        wait, wait_words = read_wait(retrying.wait)
        stop, stop_words = read_stop(retrying.stop)
        retries, retry_words = read_retry(retrying.retry)
    elif isinstance(obj, tenacity.wait.wait_base):
        (wait, wait_words), (stop, stop_words), (retries, retry_words) = (
            read_wait(obj),
            read_stop(tenacity.stop_never),
            (True, "every miss"),
        )
    else:
        raise PolicyError(f"tenacity's {type(obj).__name__} is not a retry configuration: give a Retrying, an @retry function or a wait")
    policy = Tenacity(wait, stop, retries)
    return (lambda: policy), (f"wait: {wait_words}", f"stop: {stop_words}", f"retried: {retry_words}")


class Tenacity(retry.Plain):
    """tenacity's order: after attempt n fails, the wait is drawn, then ``stop`` decides."""

    def __init__(self, wait: Wait, stop: Stop, retries: bool) -> None:
        self.wait, self.stop, self.retries = wait, stop, retries

    def next_delay(self, miss: retry.Miss, rng: random.Random) -> float | None:
        if not self.retries:
            return None
        sleep = self.wait(miss.attempt, rng)
        return None if self.stop(miss.attempt, miss.elapsed_s, sleep) else sleep


def read_wait(w: Any) -> tuple[Wait, str]:
    kind = type(w)
    if kind is tw.wait_none:
        return (lambda n, rng: 0.0), "none"
    if kind is tw.wait_fixed:
        fixed = float(w.wait_fixed)
        return (lambda n, rng: fixed), f"fixed {fixed:g}s"
    if kind is tw.wait_random:
        lo, hi = float(w.wait_random_min), float(w.wait_random_max)
        return (lambda n, rng: lo + rng.random() * (hi - lo)), f"random {lo:g}-{hi:g}s"
    if kind is tw.wait_incrementing:
        start, inc, top = float(w.start), float(w.increment), float(w.max)
        return (lambda n, rng: max(0.0, min(start + inc * (n - 1), top))), f"incrementing {start:g}s by {inc:g}s up to {top:g}s"
    if kind in (tw.wait_exponential, tw.wait_random_exponential):
        mult, top, base, low = float(w.multiplier), float(w.max), float(w.exp_base), float(w.min)

        def high(n: int) -> float:
            try:
                return max(max(0.0, low), min(mult * base ** (n - 1), top))
            except OverflowError:
                return top

        if kind is tw.wait_exponential:
            return (lambda n, rng: high(n)), f"exponential {mult:g}*{base:g}^(n-1) in {low:g}-{top:g}s"
        return (lambda n, rng: rng.uniform(low, high(n))), f"random exponential up to {mult:g}*{base:g}^(n-1), {top:g}s at most"
    if kind is tw.wait_exponential_jitter:
        initial, top, base, jitter = float(w.initial), float(w.max), float(w.exp_base), float(w.jitter)

        def jittered(n: int, rng: random.Random) -> float:
            j = rng.uniform(0, jitter)
            try:
                result = initial * base ** (n - 1) + j
            except OverflowError:
                result = top
            return max(0.0, min(result, top))

        return jittered, f"exponential {initial:g}*{base:g}^(n-1) + up to {jitter:g}s jitter, {top:g}s at most"
    if kind is tw.wait_combine:
        parts = [read_wait(x) for x in w.wait_funcs]
        return (lambda n, rng: sum(p(n, rng) for p, _ in parts)), " + ".join(words for _, words in parts)
    if kind is tw.wait_chain:
        chain = [read_wait(x) for x in w.strategies]
        return (lambda n, rng: chain[min(max(n, 1), len(chain)) - 1][0](n, rng)), "chain of " + ", then ".join(x for _, x in chain)
    raise PolicyError(f"tenacity wait {_name(w)} is not supported (supported: {', '.join(WAITS)})")


def read_stop(s: Any) -> tuple[Stop, str]:
    kind = type(s)
    if kind is ts._stop_never:
        return (lambda n, t, sleep: False), "never"
    if kind is ts.stop_after_attempt:
        most = int(s.max_attempt_number)
        return (lambda n, t, sleep: n >= most), f"after {most} attempts"
    if kind is ts.stop_after_delay:
        limit = float(s.max_delay)
        return (lambda n, t, sleep: t >= limit), f"after {limit:g}s"
    if kind is ts.stop_before_delay:
        limit = float(s.max_delay)
        return (lambda n, t, sleep: t + sleep >= limit), f"before {limit:g}s"
    if kind in (ts.stop_any, ts.stop_all):
        parts = [read_stop(x) for x in s.stops]
        join = any if kind is ts.stop_any else all
        return (lambda n, t, sleep: join(p(n, t, sleep) for p, _ in parts)), (" or " if join is any else " and ").join(w for _, w in parts)
    raise PolicyError(f"tenacity stop {_name(s)} is not supported (supported: {', '.join(STOPS)})")


def read_retry(r: Any) -> tuple[bool, str]:
    kind = type(r)
    if kind in (tr.retry_if_exception_type, tr.retry_if_exception, tr._retry_always):
        return True, "every miss (each is an exception to the client: a timeout, a refused or reset connection, a 503)"
    if kind is tr._retry_never:
        return False, "never"
    raise PolicyError(
        f"tenacity retry {_name(r)} is not supported: the lab's misses are timeouts, unreachable links and 503 refusals, "
        "so it runs retry_if_exception_type, retry_if_exception, retry_always and retry_never, not predicates on results"
    )


WAITS = (
    "wait_none",
    "wait_fixed",
    "wait_random",
    "wait_incrementing",
    "wait_exponential",
    "wait_random_exponential",
    "wait_exponential_jitter",
    "wait_combine (+)",
    "wait_chain",
)
STOPS = ("stop_never", "stop_after_attempt", "stop_after_delay", "stop_before_delay", "stop_any (|)", "stop_all (&)")


def _name(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"
