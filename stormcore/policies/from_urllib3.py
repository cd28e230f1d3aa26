"""urllib3's ``Retry`` run as a renewal's retry policy.

Give the lab a ``urllib3.Retry`` in a Python file: ``--retry-policy ./client.py:retries``.
urllib3 counts each error against ``total`` and against its kind, and is out of retries when
any count it keeps goes below zero (``Retry.is_exhausted``); before retry ``n`` it sleeps
``backoff_factor * 2**(n-1)`` (none before the first), plus up to ``backoff_jitter`` drawn from
``random``, at most ``backoff_max`` (``Retry.get_backoff_time``). Here the jitter is drawn from the
node's seeded generator in the same way (its delays are urllib3's own for the same seed:
tests/unit/test_policy_adapters.py).

The renewal's misses as urllib3 sees them: a timeout is a read error (the request went out on
a pooled connection); an unreachable link, a connection reset, or the rack's own breaker is a
connect error; the metadata service's refusal (paused, overloaded) is a 503 answer, retried only
if 503 is in ``status_forcelist``; a malformed answer is a read error. A read error or a 503 is
retried only if GET is in ``allowed_methods``. The lab's refusals carry no Retry-After, so
``respect_retry_after_header`` changes nothing. Refused: a subclass of Retry that overrides how
it counts or waits.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from stormcore import retry
from stormcore.policies.errors import PolicyError

try:
    from urllib3.util.retry import Retry
except ImportError:  # pragma: no cover - urllib3 comes with the lab's dependencies
    Retry = None  # type: ignore[assignment,misc]

KIND = {"timeout": "read", "error": "read", "unreachable": "connect", "breaker": "connect", "paused": "status", "overloaded": "status"}
OVERRIDDEN = ("get_backoff_time", "increment", "is_exhausted", "is_retry", "sleep", "_is_method_retryable", "new")


def is_retry(obj: Any) -> bool:
    return Retry is not None and isinstance(obj, Retry)


def adapt(r: Any) -> tuple[Callable[[], retry.RetryPolicy], tuple[str, ...]]:
    changed = [m for m in OVERRIDDEN if getattr(type(r), m) is not getattr(Retry, m)]
    if changed:
        raise PolicyError(f"{type(r).__qualname__} overrides urllib3's Retry.{', Retry.'.join(changed)}: the lab cannot read what it does")
    if r.history:
        raise PolicyError("this Retry has already counted errors (its history is not empty): give the one the client starts with")
    policy = Urllib3Retry(
        r.total, r.connect, r.read, r.status, r.other, float(r.backoff_factor), float(r.backoff_max), float(r.backoff_jitter),
        503 in (r.status_forcelist or ()), _get_allowed(r)
    )  # fmt: skip
    words = (
        f"total {r.total}, connect {r.connect}, read {r.read}, status {r.status}, other {r.other}",
        f"backoff {r.backoff_factor:g}*2^(n-1) (none before the first retry), up to {r.backoff_max:g}s"
        + (f", + up to {r.backoff_jitter:g}s jitter" if r.backoff_jitter else ""),
        "503 refusals retried" if policy.retry_503 else "503 refusals not retried (503 not in status_forcelist)",
        "timeouts are read errors, unreachable links connect errors",
    )
    return (lambda: policy), words


def _get_allowed(r: Any) -> bool:
    allowed = r.allowed_methods
    return allowed is None or allowed is False or "GET" in {m.upper() for m in allowed}


class Urllib3Retry(retry.Plain):
    def __init__(
        self,
        total: Any,
        connect: Any,
        read: Any,
        status: Any,
        other: Any,
        factor: float,
        backoff_max: float,
        jitter: float,
        retry_503: bool,
        get_allowed: bool,
    ) -> None:
        self.counts = {"total": total, "connect": connect, "read": read, "status": status, "other": other}
        self.factor, self.backoff_max, self.jitter = factor, backoff_max, jitter
        self.retry_503, self.get_allowed = retry_503, get_allowed

    def next_delay(self, miss: retry.Miss, rng: random.Random) -> float | None:
        kind = KIND.get(miss.outcome, "read")
        if kind == "status" and not (self.retry_503 and self.get_allowed):
            return None  # urllib3 hands the 503 back to the caller
        if kind != "status" and self.counts["total"] is False:
            return None  # retries disabled: urllib3 raises the error
        if kind == "read" and (self.counts["read"] is False or not self.get_allowed):
            return None
        if kind == "connect" and self.counts["connect"] is False:
            return None
        if self._exhausted(miss.outcomes):
            return None
        if miss.attempt <= 1:
            return 0.0
        value = self.factor * (2 ** (miss.attempt - 1))
        if self.jitter != 0.0:
            value += rng.random() * self.jitter
        return float(max(0, min(self.backoff_max, value)))

    def _exhausted(self, outcomes: tuple[str, ...]) -> bool:
        """urllib3's counts after these errors: each takes one from total and one from its kind."""
        left = dict(self.counts)
        for outcome in outcomes:
            kind = KIND.get(outcome, "read")
            if left["total"] is not None and left["total"] is not False:
                left["total"] -= 1
            if left[kind] is not None and left[kind] is not False:
                left[kind] -= 1
        counts = [x for x in left.values() if x]
        return bool(counts) and min(counts) < 0
