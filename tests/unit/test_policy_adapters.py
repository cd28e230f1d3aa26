"""Each adapter against the library it reads: the lab's delays for attempts 1..10 are the
library's own for the same seed, and a configuration it cannot map is refused by name."""

import random

import pytest
import tenacity
from tenacity import stop as ts
from tenacity import wait as tw
from urllib3.exceptions import MaxRetryError, NewConnectionError, ReadTimeoutError
from urllib3.util.retry import Retry

from stormcore import retry
from stormcore.policies import PolicyError, from_envoy, from_grpc, from_tenacity, from_urllib3

SEED = 7


def lab_delays(policy, outcome="timeout", attempts=10, seed=SEED):
    """One node's misses in a row, the policy told of each attempt as a rack tells it."""
    rng, out, outcomes, last = random.Random(seed), [], (), 0.0
    for n in range(1, attempts + 1):
        policy.sent(n > 1, 0.0)
        policy.finished(n > 1, 0.0)
        outcomes += (outcome,)
        delay = policy.next_delay(retry.Miss(n, outcome, 0.0, last, outcomes), rng)
        out.append(delay)
        last = delay or 0.0
    return out


# -- tenacity ----------------------------------------------------------------------------------


def tenacity_delays(wait, attempts=10, seed=SEED):
    """tenacity's own: its wait strategy called as Retrying calls it, after attempt n fails, with
    the random module (where tenacity draws its jitter) seeded."""
    random.seed(seed)
    state = tenacity.RetryCallState(tenacity.Retrying(), fn=None, args=(), kwargs={})
    out = []
    for n in range(1, attempts + 1):
        state.attempt_number = n
        out.append(wait(state))
    return out


WAITS = [
    tw.wait_fixed(0.5),
    tw.wait_none(),
    tw.wait_random(0.1, 2.0),
    tw.wait_incrementing(start=0.2, increment=0.3, max=2.0),
    tw.wait_exponential(multiplier=0.5, max=10, min=0.2),
    tw.wait_exponential(multiplier=1, exp_base=3, max=60),
    tw.wait_random_exponential(multiplier=0.5, max=10),
    tw.wait_exponential_jitter(initial=0.1, max=8, jitter=0.5),
    tw.wait_exponential(multiplier=0.5, max=10) + tw.wait_random(0, 1),
    tw.wait_chain(tw.wait_fixed(0.1), tw.wait_fixed(0.5), tw.wait_random(1, 2)),
]


@pytest.mark.parametrize("wait", WAITS, ids=lambda w: type(w).__name__)
def test_tenacity_waits_are_tenacitys_own_for_attempts_1_to_10(wait):
    make, _ = from_tenacity.adapt(tenacity.Retrying(wait=wait, stop=ts.stop_never))
    assert lab_delays(make()) == pytest.approx(tenacity_delays(wait), abs=1e-12)


def test_tenacity_stop_gives_up_where_tenacity_raises():
    calls = []

    def failing():
        calls.append(1)
        raise OSError("unreachable")

    for stop in (ts.stop_after_attempt(4), ts.stop_after_attempt(1), ts.stop_after_attempt(6) | ts.stop_after_delay(3600)):
        calls.clear()
        retrying = tenacity.Retrying(wait=tw.wait_none(), stop=stop, sleep=lambda s: None, reraise=True)
        with pytest.raises(OSError):
            retrying(failing)
        make, _ = from_tenacity.adapt(retrying)
        delays = lab_delays(make(), "unreachable", attempts=len(calls))
        assert delays[:-1] == [0.0] * (len(calls) - 1) and delays[-1] is None  # retried until tenacity's last attempt


def test_tenacity_stop_after_delay_counts_the_renewals_time():
    make, _ = from_tenacity.adapt(tenacity.Retrying(wait=tw.wait_fixed(1), stop=ts.stop_after_delay(5)))
    policy, rng = make(), random.Random(1)
    assert policy.next_delay(retry.Miss(2, "timeout", 4.9), rng) == 1.0
    assert policy.next_delay(retry.Miss(3, "timeout", 5.0), rng) is None


def test_tenacity_decorated_function_is_read_for_its_configuration():
    @tenacity.retry(wait=tw.wait_fixed(2), stop=ts.stop_after_attempt(3))
    def renew():
        raise AssertionError("never called")

    make, words = from_tenacity.adapt(renew)
    assert lab_delays(make(), attempts=3) == [2.0, 2.0, None]
    assert "after 3 attempts" in " ".join(words)


def test_tenacity_refuses_what_it_cannot_read_by_name():
    class my_wait(tw.wait_base):
        def __call__(self, retry_state):
            return 1.0

    with pytest.raises(PolicyError, match="my_wait is not supported"):
        from_tenacity.adapt(tenacity.Retrying(wait=my_wait()))
    with pytest.raises(PolicyError, match="retry_if_result is not supported"):
        from_tenacity.adapt(tenacity.Retrying(retry=tenacity.retry_if_result(lambda r: r is None)))
    with pytest.raises(PolicyError, match="stop_when_event_set is not supported"):
        import threading

        from_tenacity.adapt(tenacity.Retrying(stop=ts.stop_when_event_set(threading.Event())))


# -- urllib3 -----------------------------------------------------------------------------------


def urllib3_delays(r: Retry, error, attempts=10, seed=SEED):
    """urllib3's own: Retry.increment after each error, then get_backoff_time, as urlopen does."""
    random.seed(seed)
    out = []
    for _ in range(attempts):
        try:
            r = r.increment(method="GET", url="/membership/n", error=error)
        except (MaxRetryError, type(error)):  # out of retries, or not retrying this kind (urllib3 raises the error)
            out.append(None)
            break
        out.append(r.get_backoff_time())
    return out


READ = ReadTimeoutError(None, "/membership/n", "read timed out")
CONNECT = NewConnectionError(None, "refused")


@pytest.mark.parametrize(
    "config",
    [
        Retry(total=20, backoff_factor=0.5, backoff_max=10),
        Retry(total=20, backoff_factor=0.1, backoff_max=30, backoff_jitter=0.7),
        Retry(total=20, backoff_factor=0),
    ],
    ids=["backoff", "jitter", "immediate"],
)
def test_urllib3_delays_are_urllib3s_own_for_attempts_1_to_10(config):
    make, _ = from_urllib3.adapt(config)
    assert lab_delays(make(), "timeout") == pytest.approx(urllib3_delays(config, READ), abs=1e-12)


@pytest.mark.parametrize(
    ("config", "outcome", "error"),
    [
        (Retry(total=3), "timeout", READ),
        (Retry(total=10, read=2), "timeout", READ),
        (Retry(total=10, connect=4), "unreachable", CONNECT),
        (Retry(total=None, connect=1, read=1), "unreachable", CONNECT),
        (Retry(total=5, read=False), "timeout", READ),
    ],
)
def test_urllib3_runs_out_of_retries_where_urllib3_does(config, outcome, error):
    theirs = urllib3_delays(config, error)
    mine = lab_delays(from_urllib3.adapt(config)[0](), outcome, attempts=len(theirs))
    assert mine == pytest.approx(theirs, abs=1e-12)


def test_urllib3_retries_the_services_refusal_only_when_503_is_in_its_forcelist():
    miss = retry.Miss(1, "paused", 0.1, 0.0, ("paused",))
    assert from_urllib3.adapt(Retry(total=3))[0]().next_delay(miss, random.Random(1)) is None
    assert from_urllib3.adapt(Retry(total=3, status_forcelist=[503]))[0]().next_delay(miss, random.Random(1)) == 0.0


def test_urllib3_refuses_a_subclass_that_changes_the_sums():
    class Mine(Retry):
        def get_backoff_time(self):
            return 1.0

    with pytest.raises(PolicyError, match="overrides urllib3's Retry.get_backoff_time"):
        from_urllib3.adapt(Mine(total=3))


# -- gRPC (gRFC A6; grpc-js itself in test_grpc_js.py) ------------------------------------------


def a6_delays(initial, multiplier, top, max_attempts, attempts=10, seed=SEED):
    """gRFC A6 as revised in 2024: retry n after min(initialBackoff * backoffMultiplier^(n-1),
    maxBackoff) * random(0.8, 1.2), at most min(maxAttempts, 5) attempts."""
    rng, out = random.Random(seed), []
    for n in range(1, attempts + 1):
        out.append(None if n >= min(max_attempts, 5) else min(initial * multiplier ** (n - 1), top) * rng.uniform(0.8, 1.2))
    return out


def grpc_config(**policy):
    retry_policy = {
        "maxAttempts": 5,
        "initialBackoff": "0.1s",
        "maxBackoff": "1s",
        "backoffMultiplier": 2,
        "retryableStatusCodes": ["UNAVAILABLE"],
    } | policy
    return {"methodConfig": [{"name": [{"service": "m.Membership"}], "retryPolicy": retry_policy}]}


def test_grpc_delays_follow_a6_for_attempts_1_to_10():
    make, _, _ = from_grpc.adapt(grpc_config(maxAttempts=9, initialBackoff="0.2s", maxBackoff="3s", backoffMultiplier=1.7))
    assert lab_delays(make(), "unreachable") == pytest.approx(a6_delays(0.2, 1.7, 3.0, 9), abs=1e-12)


def test_grpc_retries_only_its_retryable_codes_and_throttles():
    make, _, _ = from_grpc.adapt(grpc_config() | {"retryThrottling": {"maxTokens": 4, "tokenRatio": 0.5}})
    policy, rng = make(), random.Random(1)
    for _ in range(3):  # DEADLINE_EXCEEDED is not retryable here, and takes no token
        policy.record(False)
        assert policy.next_delay(retry.Miss(1, "timeout", 1.0), rng) is None
    assert policy.next_delay(retry.Miss(1, "paused", 0.0), rng) is not None  # a 503: UNAVAILABLE; 3 of 4 tokens left
    assert policy.next_delay(retry.Miss(2, "unreachable", 0.0), rng) is None  # 2 of 4: throttled
    policy.record(True)  # 2.5 of 4
    assert policy.next_delay(retry.Miss(1, "unreachable", 0.0), rng) is None  # 1.5
    for _ in range(4):
        policy.record(True)  # 3.5
    assert policy.next_delay(retry.Miss(1, "unreachable", 0.0), rng) is not None  # 2.5 is above half of 4
    assert policy.tokens == pytest.approx(2.5)


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"methodConfig": [{"hedgingPolicy": {"maxAttempts": 3}}]}, "hedgingPolicy is not supported"),
        (grpc_config(perAttemptRecvTimeout="1s"), "perAttemptRecvTimeout is not supported"),
        (grpc_config(retryableStatusCodes=["FLAKY"]), "'FLAKY' is not a gRPC status code"),
        (grpc_config(initialBackoff="100ms"), "initialBackoff is a duration in seconds"),
        (grpc_config(maxAttempts=1), "maxAttempts is a whole number of at least 2"),
    ],
)
def test_grpc_refuses_what_a6_does_not_define_by_name(config, named):
    with pytest.raises(PolicyError, match=named):
        from_grpc.adapt(config)


# -- Envoy (the router's JitteredExponentialBackOffStrategy) ------------------------------------


def envoy_delays(base_ms, max_ms, retries, attempts=10, seed=SEED):
    """Envoy's back-off as its source computes it: the bound starts at base_interval and doubles
    while under half of max_interval (then is max_interval); each back-off is random() % bound ms."""
    rng, bound, out = random.Random(seed), base_ms, []
    for n in range(1, attempts + 1):
        if n > retries:
            out.append(None)
            continue
        out.append((rng.getrandbits(64) % bound) / 1000)
        bound = bound * 2 if bound < max_ms // 2 else max_ms
    return out


def test_envoy_delays_are_its_back_off_for_attempts_1_to_10():
    route = {"retry_policy": {"retry_on": "5xx", "num_retries": 8, "retry_back_off": {"base_interval": "0.05s", "max_interval": "3s"}}}
    make, _, _ = from_envoy.adapt(route)
    assert lab_delays(make()) == envoy_delays(50, 3000, 8)


def test_envoy_defaults_retry_on_conditions_and_timeouts():
    make, per_try, words = from_envoy.adapt({"retry_on": "connect-failure", "per_try_timeout": "0.25s"})
    assert per_try == 0.25
    policy, rng = make(), random.Random(1)
    assert policy.next_delay(retry.Miss(1, "unreachable", 0.1), rng) is not None  # a connect failure, 1 retry by default
    assert policy.next_delay(retry.Miss(2, "unreachable", 0.2), rng) is None
    assert policy.next_delay(retry.Miss(1, "timeout", 0.3), rng) is None  # a per-try timeout is a 504: not connect-failure
    assert lab_delays(make(), "unreachable", attempts=1) == envoy_delays(25, 250, 1, attempts=1)  # 25 ms base, 10x max


def envoy_cluster(*thresholds, retries=3):
    """A route's retry_policy with its cluster's circuit_breakers beside it."""
    route = {"retry_on": "5xx,connect-failure", "num_retries": retries, "retry_back_off": {"base_interval": "0.05s"}}
    return {"retry_policy": route, "circuit_breakers": {"thresholds": list(thresholds)}}


def rack_of_envoy(policy, nodes):
    """``nodes`` attempts in flight at once across the rack; then one after another fails: which of
    them may retry."""
    rng = random.Random(SEED)
    for _ in range(nodes):
        policy.sent(False, 0.0)
    granted = []
    for _ in range(nodes):
        policy.finished(False, 1.0)
        granted.append(policy.next_delay(retry.Miss(1, "unreachable", 1.0), rng) is not None)
    return granted


def test_envoy_allows_three_retries_open_across_the_rack_by_default():
    """Envoy's default circuit breaker: max_retries 3 for the cluster (here the rack): of ten nodes
    failing together three retry; when one of those retries is over, another may."""
    make, _, words = from_envoy.adapt({"retry_policy": {"retry_on": "5xx,connect-failure", "num_retries": 3}})
    assert "at most 3 retries open at once" in " ".join(words)
    policy = make()
    assert rack_of_envoy(policy, 10) == [True] * 3 + [False] * 7
    assert (policy.open, policy.overflows) == (3, 7)
    policy.sent(True, 1.1)
    policy.finished(True, 1.2)  # one retry's attempt is over: its place is free
    assert policy.next_delay(retry.Miss(1, "unreachable", 1.2), random.Random(1)) is not None
    assert policy.next_delay(retry.Miss(1, "unreachable", 1.2), random.Random(1)) is None


def envoy_budget(percent, least, active):
    """Envoy's retry budget as its resource manager computes it: max(budget_percent / 100 * active, min_retry_concurrency)."""
    return max(int(percent / 100.0 * active), least)


@pytest.mark.parametrize(("percent", "least", "nodes"), [(20.0, 3, 100), (20.0, 3, 10), (50.0, 1, 40), (12.5, 0, 300), (100.0, 3, 7)])
def test_envoy_retry_budget_is_its_share_of_the_attempts_in_flight(percent, least, nodes):
    """A retry budget: while retries open stay under budget_percent of the attempts in flight (the
    failed one no longer among them) and at least min_retry_concurrency, a failed attempt retries."""
    doc = envoy_cluster({"retry_budget": {"budget_percent": {"value": percent}, "min_retry_concurrency": least}})
    granted = rack_of_envoy(from_envoy.adapt(doc)[0](), nodes)
    expected, open_ = [], 0
    for n in range(nodes):
        allowed = open_ < envoy_budget(percent, least, nodes - n - 1)
        expected.append(allowed)
        open_ += allowed
    assert granted == expected
    assert 0 < sum(granted) < nodes or least == 0


def test_envoy_reads_the_default_priority_thresholds_only():
    high = {"priority": "HIGH", "max_retries": 1000}
    make, _, _ = from_envoy.adapt(envoy_cluster(high, {"max_retries": 5}))
    assert rack_of_envoy(make(), 8) == [True] * 5 + [False] * 3
    make, _, _ = from_envoy.adapt(envoy_cluster(high))  # no DEFAULT thresholds: Envoy's defaults
    assert rack_of_envoy(make(), 8) == [True] * 3 + [False] * 5


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        (envoy_cluster({"max_requests": 100}), "max_requests is not supported"),
        ({"retry_policy": {"retry_on": "5xx"}, "circuit_breakers": {"per_host_thresholds": []}}, "per_host_thresholds is not supported"),
        (envoy_cluster({"retry_budget": {"budget_percent": 20}}), r"budget_percent is a Percent, written \{value: 20.0\}"),
        (envoy_cluster({"retry_budget": {"budget_percent": {"value": 120}}}), "a percentage from 0 to 100"),
        (envoy_cluster({"max_retries": -1}), "max_retries is a whole number"),
        ({"retry_on": "5xx", "circuit_breakers": {}}, "give circuit_breakers beside a retry_policy"),
        ({"retry_on": "5xx", "rate_limited_retry_back_off": {}}, "rate_limited_retry_back_off is not supported"),
        ({"retry_on": "5xx", "retriable_headers": []}, "retriable_headers is not supported"),
        ({"retry_on": "5xx,sometimes"}, "sometimes is not an Envoy retry condition"),
        ({"retry_on": "5xx", "hedge": 1}, "retry_policy has no hedge"),
    ],
)
def test_envoy_refuses_what_it_cannot_map_by_name(doc, named):
    with pytest.raises(PolicyError, match=named):
        from_envoy.adapt(doc)
