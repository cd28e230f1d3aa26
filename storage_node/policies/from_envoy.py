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

Refused: ``rate_limited_retry_back_off``, ``retriable_headers``, ``retriable_request_headers``,
``per_try_idle_timeout``, ``retry_options_predicates`` and unknown fields (named). The cluster's
circuit breakers (``max_retries``, ``retry_budget``) count retries in flight across a proxy, which
the lab's policy protocol does not see: they are not read (a file holding ``circuit_breakers`` is
refused, so a budget is never silently dropped). ``retry_host_predicate``,
``host_selection_retry_max_attempts`` and ``retry_priority`` choose among hosts; the lab has one
metadata service per cell, so they change nothing and are accepted.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from storage_node import retry
from storage_node.policies.errors import PolicyError
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


def is_envoy(doc: dict[str, Any]) -> bool:
    return bool({"retry_policy", "retry_on", "num_retries", "retry_back_off"} & set(doc))


def adapt(doc: dict[str, Any]) -> tuple[Callable[[], retry.RetryPolicy], float | None, tuple[str, ...]]:
    if "circuit_breakers" in doc:
        raise PolicyError(
            "circuit_breakers (max_retries, retry_budget) is not supported: Envoy counts retries in flight across the proxy, "
            "which the lab's policy protocol does not see; give the route's retry_policy alone"
        )
    route_timeout = _ms(doc["timeout"], "timeout") if "timeout" in doc else 15_000
    p = doc.get("retry_policy", doc)
    if not isinstance(p, dict):
        raise PolicyError("retry_policy is a mapping")
    outer = sorted(set(doc) - {"retry_policy", "timeout"}) if "retry_policy" in doc else []
    if outer:
        raise PolicyError(f"beside retry_policy this file may hold the route's timeout only, not {', '.join(outer)}")
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
        return EnvoyRetry(retries, base, top, frozenset(retried), deadline)

    words = (
        f"at most {retries} retries, back-off below {base} ms doubling to {top} ms (Envoy's fully jittered, whole ms)",
        f"retry_on {','.join(sorted(on))}: retries {', '.join(sorted(retried)) or 'no miss of the lab'}",
        *([f"per-try timeout {per_try:g}s"] if per_try is not None else []),
        f"route timeout {deadline:g}s over every attempt" if deadline else "no route timeout",
    )
    return make, per_try, words


class EnvoyRetry:
    def __init__(self, retries: int, base_ms: int, max_ms: int, retried: frozenset[str], deadline: float | None) -> None:
        self.retries, self.base_ms, self.max_ms, self.retried, self.deadline = retries, base_ms, max_ms, retried, deadline

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
        return (rng.getrandbits(64) % self.bound_ms(miss.attempt)) / 1000

    def record(self, ok: bool, now: float = 0.0) -> None:
        return None

    def admits(self, now: float) -> bool:
        return True


def _ms(value: Any, what: str) -> int:
    """A duration as Envoy's YAML writes it ("0.25s", "25ms" is not protobuf JSON but is read too), in whole ms."""
    try:
        seconds = parse_duration(str(value)) if not isinstance(value, bool) else -1.0
    except SettingsError:
        seconds = -1.0
    if seconds < 0 or seconds > 3600:
        raise PolicyError(f'{what} is a duration such as "0.25s" (0 to 3600 s), got {value!r}')
    return round(seconds * 1000)
