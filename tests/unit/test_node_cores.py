import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage_node.refusal import NodeState, Refusal, RenewalMissed, RenewalSucceeded
from storage_node.schedule import RenewalSchedule
from stormcore import retry


def test_refusal_disqualifies_on_first_miss_and_requalifies_on_first_success():
    node = Refusal(now=0.0)
    assert node.state is NodeState.STARTING and not node.serving
    assert node.handle(RenewalSucceeded(at=1.0, entries=20)) is NodeState.SERVING
    assert node.handle(RenewalMissed(at=11.0, reason="timeout")) is NodeState.DISQUALIFIED
    assert node.reason == "membership renewal missed (timeout)" and node.since == 11.0
    assert node.handle(RenewalMissed(at=12.0, reason="timeout")) is NodeState.DISQUALIFIED
    assert node.since == 11.0 and node.disqualifications == 1
    assert node.handle(RenewalSucceeded(at=13.0, entries=20)) is NodeState.SERVING
    assert node.serving and node.since == 13.0


def test_a_node_that_never_got_its_membership_is_disqualified_on_its_first_miss():
    node = Refusal(now=0.0)
    node.handle(RenewalMissed(at=1.0, reason="unreachable"))
    assert node.state is NodeState.DISQUALIFIED and node.disqualifications == 1


MISS = retry.Miss(1, "timeout", 1.0)


def schedule_of(policy, misses=6, seed=1):
    rng, delays, last = random.Random(seed), [], 0.0
    for n in range(1, misses + 1):
        last = policy.next_delay(retry.Miss(n, "timeout", 0.0, last), rng)
        delays.append(last)
    return delays


def test_immediate_never_waits():
    assert schedule_of(retry.Immediate()) == [0.0] * 6


def test_exponential_doubles_up_to_the_cap():
    assert schedule_of(retry.Exponential(0.5, 4.0)) == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_full_jitter_stays_under_the_exponential_ceiling_and_differs_between_nodes():
    a = schedule_of(retry.FullJitter(0.5, 4.0), seed=1)
    b = schedule_of(retry.FullJitter(0.5, 4.0), seed=2)
    for delay, ceiling in zip(a, [0.5, 1.0, 2.0, 4.0, 4.0, 4.0], strict=False):
        assert 0.0 <= delay <= ceiling
    assert a != b


@given(st.integers(1, 10_000), st.integers(1, 200))
def test_decorrelated_jitter_is_bounded(seed, misses):
    policy = retry.DecorrelatedJitter(0.5, 10.0)
    for delay in schedule_of(policy, misses=misses, seed=seed):
        assert 0.5 <= delay <= 10.0


def test_budget_stops_retries_below_half_and_refills_on_success():
    budget = retry.RetryBudget(retry.Immediate(), max_tokens=10, ratio=1.0)
    rng = random.Random(0)
    allowed = []
    for _ in range(8):
        budget.record(False)
        allowed.append(budget.next_delay(MISS, rng) is not None)
    assert allowed == [True, True, True, True, False, False, False, False]
    for _ in range(3):
        budget.record(True)
    assert budget.next_delay(MISS, rng) is None  # 2 + 3 = 5 tokens: still at half
    budget.record(True)
    assert budget.next_delay(MISS, rng) == 0.0


def test_build_names():
    assert isinstance(retry.build("immediate", 0.5, 10, 10, 0.1), retry.Immediate)
    wrapped = retry.build("full-jitter+budget", 0.5, 10, 10, 0.1)
    assert isinstance(wrapped, retry.RetryBudget) and isinstance(wrapped.inner, retry.FullJitter)
    assert isinstance(retry.build("budget", 0.5, 10, 10, 0.1).inner, retry.Immediate)
    with pytest.raises(ValueError):
        retry.build("forever", 0.5, 10, 10, 0.1)


def test_schedule_is_fixed_rate_and_jitter_does_not_accumulate():
    sched = RenewalSchedule(phase=3.0, period=10.0, jitter=0.05, rng=random.Random(7))
    slots, now = [], 0.0
    for _ in range(1000):
        now = sched.next_after(now)
        slots.append(now)
    for k, slot in enumerate(slots):
        assert abs(slot - (3.0 + 10.0 * k)) <= 0.5 + 1e-9


def test_schedule_skips_slots_missed_while_busy():
    sched = RenewalSchedule(phase=0.0, period=10.0, jitter=0.0, rng=random.Random(0))
    assert sched.next_after(0.0) == 10.0
    assert sched.next_after(35.0) == 40.0  # renewing for 25 s skipped slots 20 and 30


def test_every_class_and_every_rack_renews_evenly_over_the_period():
    from stormcore.fleet import holds_gsi_heavy, startup_phases
    from stormcore.settings import LabSettings

    s = LabSettings()
    phases = startup_phases(s)
    assert len(phases) == 1000 and all(0 <= p < 1 for p in phases.values())
    big = sorted(p for n, p in phases.items() if holds_gsi_heavy(int(n[1:3]), int(n[4:]), s))
    gaps = [b - a for a, b in zip(big, big[1:], strict=False)]
    assert len(big) == 150 and max(gaps) == pytest.approx(1 / 150)
    for rack in range(10):
        mine = sorted(p for n, p in phases.items() if n.startswith(f"r{rack:02d}"))
        assert mine[0] < 0.1 and mine[-1] > 0.9  # no rack renews in one burst


def test_adaptive_throttling_thins_retries_as_the_service_rejects_and_recovers():
    throttle = retry.build("immediate+adaptive", 0.5, 10, 10, 0.1)
    assert isinstance(throttle, retry.AdaptiveThrottle) and isinstance(throttle.inner, retry.Immediate)
    rng = random.Random(1)
    for _ in range(200):
        throttle.record(True)
    assert throttle.rejection() == 0.0 and throttle.next_delay(MISS, rng) == 0.0  # healthy: every retry goes
    for _ in range(600):
        throttle.record(False)
    assert throttle.rejection() > 0.7  # the SRE book's (requests - 2 * accepts) / (requests + 1)
    given = sum(throttle.next_delay(MISS, rng) is not None for _ in range(1000))
    assert given < 350
    for _ in range(600):
        throttle.record(True)
    assert throttle.rejection() < 0.2  # the counts decay: as the service answers, retries come back


def test_the_breaker_opens_after_misses_in_a_row_and_closes_on_trial():
    rng = random.Random(1)
    breaker = retry.build("immediate+breaker", 0.5, 10.0, 10, 0.1, breaker_failures=3, breaker_open_s=5.0)
    for t in (1.0, 1.1):
        breaker.record(False, t)
        assert breaker.next_delay(MISS, rng) == 0.0 and breaker.admits(t)
    breaker.record(False, 1.2)  # the third miss in a row: open for 5 s
    assert not breaker.admits(1.2) and not breaker.admits(6.1)
    assert breaker.next_delay(MISS, rng) is None  # nobody retries: the next slot
    breaker.record(False, 3.0)  # a miss while open (the breaker's own, or a late answer) changes nothing
    assert breaker.admits(6.2)
    breaker.record(False, 6.3)  # on trial: one miss opens it again
    assert not breaker.admits(6.4) and breaker.admits(11.3)
    breaker.record(True, 11.4)  # a success closes it for good: three misses in a row again to open
    for t in (11.5, 11.6):
        breaker.record(False, t)
    assert breaker.admits(11.7)
    breaker.record(True, 11.8)
    breaker.record(False, 11.9)
    assert breaker.admits(12.0)


def test_a_successful_rack_never_opens_its_breaker():
    breaker = retry.build("full-jitter+breaker", 0.5, 10.0, 10, 0.1, breaker_failures=2, breaker_open_s=5.0)
    for i in range(100):
        breaker.record(i % 2 == 0, float(i))
        assert breaker.admits(float(i))
