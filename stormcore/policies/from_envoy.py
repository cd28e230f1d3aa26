"""An Envoy route's ``retry_policy`` run as a renewal's retry policy (no proxy: the file is read).

Give the lab the YAML (or JSON) of a route's ``retry_policy`` (the mapping itself, or a mapping
that holds it beside the route's ``timeout``): ``--retry-policy ./route.yaml``. What it does is
Envoy's router:

- ``num_retries`` retries at most (default 1);
- retry ``n`` waits a whole number of milliseconds drawn uniformly below a bound that starts at
  ``retry_back_off.base_interval`` (default 25 ms) and doubles each retry up to ``max_interval``
  (default 10 × base): Envoy's JitteredExponentialBackOffStrategy, with its random 64-bit draw
  taken from the node's seeded generator;
- ``retry_on`` decides which misses are retried: a timeout of ``per_try_timeout`` is a 504
  (``5xx``, ``gateway-error``), an unreachable link a connect failure (``connect-failure``,
  ``reset``, ``5xx``, ``gateway-error``), the metadata service's refusal a 503 (``5xx``,
  ``gateway-error``, or ``retriable-status-codes`` listing 503), a malformed answer a reset;
- ``per_try_timeout`` is the attempt's timeout (the lab's allowance); the route's ``timeout``
  (default 15 s) bounds every attempt together: no retry starts after it.

- the cluster's retry circuit breaker counts retries in flight across the rack (one Envoy, one
  cluster, per rack): a retry is open from when it is scheduled until its attempt is over, and
  one is scheduled only while fewer are open than the limit: ``max_retries`` (Envoy's default: 3),
  or with a ``retry_budget``, ``budget_percent`` (default 20%) of the attempts in flight (the one
  that just failed not counted), never fewer than ``min_retry_concurrency`` (default 3). A retry
  over the limit is not made (Envoy's ``upstream_rq_retry_overflow``): the node waits for its next
  renewal. Give the cluster's ``circuit_breakers`` beside ``retry_policy``; without it Envoy's
  defaults apply, as in a proxy.

Refused: ``rate_limited_retry_back_off``, ``retriable_headers``, ``retriable_request_headers``,
``per_try_idle_timeout``, ``retry_options_predicates`` and unknown fields (named); in
``circuit_breakers``, the limits on connections and requests (``max_connections``,
``max_pending_requests``, ``max_requests``, ``max_connection_pools``, ``per_host_thresholds``):
the lab's nodes hold one attempt in flight each, so a rack under Envoy's defaults (1,024) never
meets them, and other values are not modelled. Thresholds for the HIGH priority do not apply to a
route at the default priority and are read past. ``retry_host_predicate``,
``host_selection_retry_max_attempts`` and ``retry_priority`` choose among hosts; the lab has one
metadata service per cell, so they change nothing and are accepted.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stormcore import retry
from stormcore.policies.errors import PolicyError
from stormcore.settings import SettingsError, parse_duration

CONDITIONS = {
    "timeout": {"5xx", "gateway-error"},
    "unreachable": {"5xx", "gateway-error", "connect-failure", "reset"},
    "breaker": {"5xx", "gateway-error", "connect-failure", "reset"},
    "paused": {"5xx", "gateway-error"},
    "overloaded": {"5xx", "gateway-error"},
    "error": {"5xx", "reset"},
}
KNOWN_ON = {
    "5xx", "gateway-error", "reset", "reset-before-request", "connect-failure", "envoy-ratelimited", "retriable-4xx",
    "refused-stream", "retriable-status-codes", "retriable-headers", "http3-post-connect-failure",
    "cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable",
}  # fmt: skip
ACCEPTED = {"retry_on", "num_retries", "per_try_timeout", "retry_back_off", "retriable_status_codes"}
HOSTS_ONLY = {"retry_host_predicate", "host_selection_retry_max_attempts", "retry_priority"}
REFUSED = {
    "rate_limited_retry_back_off",
    "retriable_headers",
    "retriable_request_headers",
    "per_try_idle_timeout",
    "retry_options_predicates",
}
DEFAULT_BASE_MS = 25
DEFAULT_MAX_RETRIES = 3  # Envoy's cluster default for circuit_breakers' max_retries
DEFAULT_BUDGET_PERCENT, DEFAULT_MIN_RETRY_CONCURRENCY = 20.0, 3  # a retry_budget's defaults
THRESHOLDS = {"priority", "max_retries", "retry_budget", "track_remaining"}
NOT_MODELLED = {"max_connections", "max_pending_requests", "max_requests", "max_connection_pools"}


def is_envoy(doc: dict[str, Any]) -> bool:
    return bool({"retry_policy", "retry_on", "num_retries", "retry_back_off"} & set(doc))


def adapt(doc: dict[str, Any]) -> tuple[Callable[[], retry.RetryPolicy], float | None, tuple[str, ...]]:
    route_timeout = _ms(doc["timeout"], "timeout") if "timeout" in doc else 15_000
    p = doc.get("retry_policy", doc)
    if not isinstance(p, dict):
        raise PolicyError("retry_policy is a mapping")
    outer = sorted(set(doc) - {"retry_policy", "timeout", "circuit_breakers"}) if "retry_policy" in doc else []
    if outer:
        raise PolicyError(
            f"beside retry_policy this file may hold the route's timeout and the cluster's circuit_breakers only, not {', '.join(outer)}"
        )
    if "circuit_breakers" in doc and "retry_policy" not in doc:
        raise PolicyError("give circuit_breakers beside a retry_policy: the file's mapping holds both")
    limit = read_breakers(doc.get("circuit_breakers"))
    refused = sorted(set(p) & REFUSED)
    if refused:
        raise PolicyError(f"retry_policy's {', '.join(refused)} is not supported (the lab answers no headers and no rate limits)")
    unknown = sorted(set(p) - ACCEPTED - HOSTS_ONLY - {"timeout"})
    if unknown:
        raise PolicyError(f"retry_policy has no {', '.join(unknown)} that the lab knows (it reads {', '.join(sorted(ACCEPTED))})")
    if "timeout" in p:
        route_timeout = _ms(p["timeout"], "timeout")
    on = {c.strip() for c in str(p.get("retry_on", "")).split(",") if c.strip()}
    if not on:
        raise PolicyError("retry_on is required: which failures to retry (e.g. 5xx,connect-failure,reset)")
    bad = sorted(on - KNOWN_ON)
    if bad:
        raise PolicyError(f"retry_on: {', '.join(bad)} is not an Envoy retry condition")
    statuses = p.get("retriable_status_codes", [])
    if not isinstance(statuses, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in statuses):
        raise PolicyError("retriable_status_codes is a list of HTTP status codes")
    retries = p.get("num_retries", 1)
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 1000:
        raise PolicyError(f"num_retries is a whole number between 0 and 1000, got {retries!r}")
    back_off = p.get("retry_back_off", {})
    if not isinstance(back_off, dict) or set(back_off) - {"base_interval", "max_interval"}:
        raise PolicyError("retry_back_off takes base_interval and max_interval")
    base = _ms(back_off["base_interval"], "retry_back_off.base_interval") if "base_interval" in back_off else DEFAULT_BASE_MS
    top = _ms(back_off["max_interval"], "retry_back_off.max_interval") if "max_interval" in back_off else 10 * base
    if base <= 0 or top < base:
        raise PolicyError("retry_back_off: base_interval above 0 and max_interval at least base_interval")
    per_try = _ms(p["per_try_timeout"], "per_try_timeout") / 1000 if "per_try_timeout" in p else None
    retried = {o for o, conditions in CONDITIONS.items() if conditions & on}
    if "retriable-status-codes" in on and 503 in statuses:
        retried |= {"paused", "overloaded"}
    deadline = route_timeout / 1000 if route_timeout else None  # 0: no route timeout

    def make() -> retry.RetryPolicy:
        return EnvoyRetry(retries, base, top, frozenset(retried), deadline, limit)

    words = (
        f"at most {retries} retries, back-off below {base} ms doubling to {top} ms (Envoy's fully jittered, whole ms)",
        limit.words,
        f"retry_on {','.join(sorted(on))}: retries {', '.join(sorted(retried)) or 'no miss of the lab'}",
        *([f"per-try timeout {per_try:g}s"] if per_try is not None else []),
        f"route timeout {deadline:g}s over every attempt" if deadline else "no route timeout",
    )
    return make, per_try, words


@dataclass(frozen=True)
class RetryLimit:
    """The cluster's retry circuit breaker: ``max_retries`` open at once, or a retry budget."""

    max_retries: int = DEFAULT_MAX_RETRIES
    budget_percent: float | None = None  # a retry_budget: this share of the attempts in flight …
    min_concurrency: int = DEFAULT_MIN_RETRY_CONCURRENCY  # … and never fewer than this

    def allowed(self, in_flight: int) -> int:
        """How many retries may be open with ``in_flight`` attempts in flight (Envoy's canCreate: open < this)."""
        if self.budget_percent is None:
            return self.max_retries
        return max(int(self.budget_percent / 100.0 * in_flight), self.min_concurrency)

    @property
    def words(self) -> str:
        if self.budget_percent is None:
            return f"at most {self.max_retries} retries open at once across the rack (circuit_breakers.max_retries)"
        return (
            f"retry budget: {self.budget_percent:g}% of the rack's attempts in flight open as retries at once, "
            f"at least {self.min_concurrency}"
        )


class EnvoyRetry(retry.Plain):
    """One rack's Envoy: the route's retry policy and the cluster's retry circuit breaker, with
    the counts it keeps (attempts in flight, retries open)."""

    def __init__(
        self,
        retries: int,
        base_ms: int,
        max_ms: int,
        retried: frozenset[str],
        deadline: float | None,
        limit: RetryLimit | None = None,
    ) -> None:
        self.retries, self.base_ms, self.max_ms, self.retried, self.deadline = retries, base_ms, max_ms, retried, deadline
        self.limit = limit or RetryLimit()
        self.in_flight = 0  # attempts sent and not yet over
        self.open = 0  # retries scheduled whose attempt is not yet over
        self.overflows = 0  # retries the circuit breaker did not allow (upstream_rq_retry_overflow)

    def sent(self, retry: bool, now: float) -> None:
        self.in_flight += 1

    def finished(self, retry: bool, now: float) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        if retry:
            self.open = max(0, self.open - 1)

    def bound_ms(self, n: int) -> int:
        """The draw's bound before retry ``n``: Envoy doubles it each retry while it is under half the max."""
        bound = self.base_ms
        for _ in range(n - 1):
            bound = bound * 2 if bound < self.max_ms // 2 else self.max_ms
        return bound

    def next_delay(self, miss: retry.Miss, rng: random.Random) -> float | None:
        if miss.outcome not in self.retried or miss.attempt > self.retries:
            return None
        if self.deadline is not None and miss.elapsed_s >= self.deadline:
            return None
        if self.open >= self.limit.allowed(self.in_flight):
            self.overflows += 1
            return None
        self.open += 1
        return (rng.getrandbits(64) % self.bound_ms(miss.attempt)) / 1000


def read_breakers(doc: Any) -> RetryLimit:
    """The cluster's ``circuit_breakers``, as far as retries go (its DEFAULT priority thresholds)."""
    if doc is None:
        return RetryLimit()
    if not isinstance(doc, dict):
        raise PolicyError("circuit_breakers is a mapping (Envoy's cluster circuit_breakers: thresholds)")
    if "per_host_thresholds" in doc:
        raise PolicyError("circuit_breakers' per_host_thresholds is not supported: they limit connections to a host, not retries")
    unknown = sorted(set(doc) - {"thresholds"})
    if unknown:
        raise PolicyError(f"circuit_breakers has no {', '.join(unknown)} that the lab knows (it reads thresholds)")
    thresholds = doc.get("thresholds", [])
    if not isinstance(thresholds, list) or not all(isinstance(t, dict) for t in thresholds):
        raise PolicyError("circuit_breakers.thresholds is a list of thresholds, one per priority")
    chosen = [t for t in thresholds if t.get("priority", "DEFAULT") == "DEFAULT"]
    if any(t.get("priority", "DEFAULT") not in ("DEFAULT", "HIGH") for t in thresholds):
        raise PolicyError("a threshold's priority is DEFAULT or HIGH")
    if len(chosen) > 1:
        raise PolicyError("circuit_breakers.thresholds holds the DEFAULT priority twice")
    if not chosen:
        return RetryLimit()
    t = chosen[0]
    modelled = sorted(set(t) & NOT_MODELLED)
    if modelled:
        raise PolicyError(
            f"circuit_breakers' {', '.join(modelled)} is not supported: it limits the proxy's connections and requests, "
            "which a rack of the lab (one attempt in flight a node) does not meet under Envoy's defaults"
        )
    unknown = sorted(set(t) - THRESHOLDS - NOT_MODELLED)
    if unknown:
        raise PolicyError(f"a threshold has no {', '.join(unknown)} that the lab knows (it reads max_retries and retry_budget)")
    max_retries = _count(t.get("max_retries", DEFAULT_MAX_RETRIES), "max_retries")
    if "retry_budget" not in t:
        return RetryLimit(max_retries)
    budget = t["retry_budget"] or {}
    if not isinstance(budget, dict) or set(budget) - {"budget_percent", "min_retry_concurrency"}:
        raise PolicyError("retry_budget takes budget_percent and min_retry_concurrency")
    percent = budget.get("budget_percent", {"value": DEFAULT_BUDGET_PERCENT})
    if not isinstance(percent, dict) or set(percent) != {"value"}:
        raise PolicyError(f"retry_budget.budget_percent is a Percent, written {{value: 20.0}}, got {percent!r}")
    value = percent["value"]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 100:
        raise PolicyError(f"retry_budget.budget_percent's value is a percentage from 0 to 100, got {value!r}")
    least = _count(budget.get("min_retry_concurrency", DEFAULT_MIN_RETRY_CONCURRENCY), "min_retry_concurrency")
    return RetryLimit(max_retries, float(value), least)


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1_000_000:
        raise PolicyError(f"{what} is a whole number from 0 to 1,000,000, got {value!r}")
    return value


def _ms(value: Any, what: str) -> int:
    """A duration as Envoy's YAML writes it ("0.25s", "25ms" is not protobuf JSON but is read too), in whole ms."""
    try:
        seconds = parse_duration(str(value)) if not isinstance(value, bool) else -1.0
    except SettingsError:
        seconds = -1.0
    if seconds < 0 or seconds > 3600:
        raise PolicyError(f'{what} is a duration such as "0.25s" (0 to 3600 s), got {value!r}')
    return round(seconds * 1000)
