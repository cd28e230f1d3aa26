"""A gRPC service config's ``retryPolicy`` and ``retryThrottling`` run as a renewal's retry policy.

Give the lab the service config a gRPC client ships (JSON or YAML):
``--retry-policy ./service_config.json``. The renewal is one call, so the config holds one
``retryPolicy`` (in one ``methodConfig``, or the same in several). What it does is gRFC A6's as
revised in 2024 (grpc/proposal#452), which gRPC's C core (grpcio), grpc-java, grpc-go and
grpc-js 1.14 on follow:

- ``maxAttempts`` attempts at most, the first included (values above 5 are taken as 5);
- retry ``n`` waits ``min(initialBackoff * backoffMultiplier**(n-1), maxBackoff) * random(0.8, 1.2)``,
  drawn here from the node's seeded generator (before the revision, and in grpc-js up to 1.13,
  ``random(0, …)`` of the same: a client that old jitters over the whole range, as
  ``jitter: full`` in a policy file does);
- only a status in ``retryableStatusCodes`` is retried: an unreachable link or a reset
  connection is UNAVAILABLE, the metadata service's refusal (an HTTP 503) is UNAVAILABLE, a
  timeout is DEADLINE_EXCEEDED, a malformed answer INTERNAL; the rack's own breaker UNAVAILABLE;
- the method's ``timeout`` is the call's deadline over every attempt: no retry starts after it;
- ``retryThrottling``: the client's token bucket (``maxTokens``, ``tokenRatio``): an attempt that
  fails with a retryable status takes a token (one that fails otherwise takes none), a success
  gives ``tokenRatio`` back, and a failed attempt is retried only while more than half the tokens
  are left, judged when it fails (as the C core, grpc-java and grpc-go do; grpc-js judges when the
  backoff ends). Its scope here is the rack (one client channel per rack).

Refused: ``hedgingPolicy`` (hedging sends copies before anything fails: not a retry policy),
fields A6 does not define, and more than one different ``retryPolicy``.

tests/unit/test_grpc_js.py runs grpc-js itself (from npm) against a loopback server with its
jitter seeded, and compares what it does with this adapter, retry by retry.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from stormcore import retry
from stormcore.policies.errors import PolicyError
from stormcore.settings import SettingsError, parse_duration

STATUS = {"unreachable": "UNAVAILABLE", "paused": "UNAVAILABLE", "overloaded": "UNAVAILABLE", "breaker": "UNAVAILABLE"}
STATUS |= {"timeout": "DEADLINE_EXCEEDED", "error": "INTERNAL"}
CODES = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
]
POLICY_FIELDS = ("maxAttempts", "initialBackoff", "maxBackoff", "backoffMultiplier", "retryableStatusCodes")
MAX_ATTEMPTS = 5  # A6: larger values are treated as 5


def is_service_config(doc: dict[str, Any]) -> bool:
    return bool({"methodConfig", "retryPolicy", "retryThrottling"} & set(doc))


def adapt(doc: dict[str, Any]) -> tuple[Callable[[], retry.RetryPolicy], float | None, tuple[str, ...]]:
    unknown = sorted(set(doc) - {"methodConfig", "retryPolicy", "retryThrottling", "loadBalancingConfig", "loadBalancingPolicy"})
    if unknown:
        raise PolicyError(f"a gRPC service config here holds methodConfig and retryThrottling, not {', '.join(unknown)}")
    methods = doc.get("methodConfig", [])
    if not isinstance(methods, list) or not all(isinstance(m, dict) for m in methods):
        raise PolicyError("methodConfig is a list of method configs")
    if any("hedgingPolicy" in m for m in methods):
        raise PolicyError("hedgingPolicy is not supported: hedging sends copies of a call before any fails, it is not a retry policy")
    found = [m["retryPolicy"] for m in methods if "retryPolicy" in m] + ([doc["retryPolicy"]] if "retryPolicy" in doc else [])
    if not found:
        raise PolicyError("no retryPolicy in the service config's methodConfig")
    if any(p != found[0] for p in found):
        raise PolicyError("several different retryPolicy entries: keep the one for the call that renews a membership")
    p = found[0]
    if not isinstance(p, dict):
        raise PolicyError("retryPolicy is a mapping")
    extra = sorted(set(p) - set(POLICY_FIELDS))
    if extra:
        raise PolicyError(f"retryPolicy's {', '.join(extra)} is not supported (gRFC A6 defines {', '.join(POLICY_FIELDS)})")
    missing = [f for f in POLICY_FIELDS if f not in p]
    if missing:
        raise PolicyError(f"retryPolicy needs {', '.join(missing)} (gRFC A6: every field is required)")
    attempts = p["maxAttempts"]
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 2:
        raise PolicyError(f"maxAttempts is a whole number of at least 2, got {attempts!r}")
    attempts = min(attempts, MAX_ATTEMPTS)
    initial, top = _duration(p["initialBackoff"], "initialBackoff"), _duration(p["maxBackoff"], "maxBackoff")
    multiplier = p["backoffMultiplier"]
    if isinstance(multiplier, bool) or not isinstance(multiplier, int | float) or not 0 < multiplier <= 1000:
        raise PolicyError(f"backoffMultiplier is a number above 0, got {multiplier!r}")
    codes = p["retryableStatusCodes"]
    if not isinstance(codes, list) or not codes:
        raise PolicyError("retryableStatusCodes is a non-empty list of status codes")
    names = {_code(c) for c in codes}
    deadlines = {_duration(m["timeout"], "timeout") for m in methods if "retryPolicy" in m and "timeout" in m}
    deadline = min(deadlines) if deadlines else None
    throttling = doc.get("retryThrottling")
    if throttling is not None:
        if not isinstance(throttling, dict) or set(throttling) != {"maxTokens", "tokenRatio"}:
            raise PolicyError("retryThrottling takes maxTokens and tokenRatio (both)")
        tokens, ratio = throttling["maxTokens"], throttling["tokenRatio"]
        if isinstance(tokens, bool) or not isinstance(tokens, int | float) or not 0 < tokens <= 1000:
            raise PolicyError(f"retryThrottling.maxTokens is between 1 and 1000, got {tokens!r}")
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not ratio > 0:
            raise PolicyError(f"retryThrottling.tokenRatio is a number above 0, got {ratio!r}")

    def make() -> retry.RetryPolicy:
        bucket = retry.TokenBucket(float(tokens), float(ratio)) if throttling is not None else None
        return GrpcRetry(attempts, initial, top, float(multiplier), frozenset(names), deadline, bucket)

    words = (
        f"at most {attempts} attempts, backoff min({initial:g}s * {multiplier:g}^(n-1), {top:g}s) * random(0.8, 1.2)",
        f"retried: {', '.join(sorted(names))} (unreachable and 503 refusals are UNAVAILABLE, timeouts DEADLINE_EXCEEDED)",
        *([f"call deadline {deadline:g}s over every attempt"] if deadline is not None else []),
        *([f"retry throttling: {tokens:g} tokens, {ratio:g} back per success"] if throttling is not None else []),
    )
    return make, None, words


JITTER = (0.8, 1.2)  # A6 since 2024: the backoff times random(0.8, 1.2)


class GrpcRetry(retry.Plain):
    """One rack's gRPC client channel: the retry policy and, if configured, its throttling bucket,
    from which only a retryable status takes a token."""

    def __init__(
        self,
        attempts: int,
        initial: float,
        top: float,
        multiplier: float,
        codes: frozenset[str],
        deadline: float | None,
        bucket: retry.TokenBucket | None = None,
    ):
        self.attempts, self.initial, self.top, self.multiplier = attempts, initial, top, multiplier
        self.codes, self.deadline, self.bucket = codes, deadline, bucket

    @property
    def tokens(self) -> float | None:
        return self.bucket.tokens if self.bucket else None

    def next_delay(self, miss: retry.Miss, rng: random.Random) -> float | None:
        if STATUS.get(miss.outcome, "INTERNAL") not in self.codes:
            return None
        if self.bucket:
            self.bucket.failed()
            if not self.bucket.allows_retry():
                return None
        if miss.attempt >= self.attempts:
            return None
        if self.deadline is not None and miss.elapsed_s >= self.deadline:
            return None
        try:
            backoff = min(self.initial * self.multiplier ** (miss.attempt - 1), self.top)
        except OverflowError:
            backoff = self.top
        delay = backoff * rng.uniform(*JITTER)
        if self.deadline is not None and miss.elapsed_s + delay >= self.deadline:
            return None
        return delay

    def record(self, ok: bool, now: float = 0.0) -> None:
        if ok and self.bucket:
            self.bucket.succeeded()


def _duration(value: Any, what: str) -> float:
    """A protobuf JSON duration ("0.1s"), as gRPC service configs write them."""
    if not isinstance(value, str) or not value.endswith("s") or value.endswith("ms"):
        raise PolicyError(f'{what} is a duration in seconds as protobuf JSON writes it ("0.1s"), got {value!r}')
    try:
        seconds = parse_duration(value)
    except SettingsError:
        raise PolicyError(f'{what} is a duration such as "0.1s", got {value!r}') from None
    if not 0 < seconds <= 3600:
        raise PolicyError(f"{what} must be above 0s and at most 3600s, got {value!r}")
    return seconds


def _code(c: Any) -> str:
    if isinstance(c, int) and not isinstance(c, bool) and 0 <= c < len(CODES):
        return CODES[c]
    if isinstance(c, str) and c.upper() in CODES:
        return c.upper()
    raise PolicyError(f"{c!r} is not a gRPC status code ({', '.join(CODES)})")
