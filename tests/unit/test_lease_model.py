"""The aws-2025-10 profile in virtual time (stormlab/incidents/aws_2025_10/model.py): the lease manager's
congestive collapse emerges from its queue, timeouts, cost per lease and fleet, and only the
account's moves end it."""

import pytest

from services.leases.host import (
    CHECK,
    ESTABLISH,
    ESTABLISHED,
    LAUNCHED,
    NO_CAPACITY,
    PENDING,
    QUEUED,
    REQUEST_LIMIT,
    RESTARTED,
    THROTTLED,
    TIMED_OUT,
    Bucket,
    LeaseHost,
    Rules,
)
from stormcore.settings import Pace, profile
from stormlab.incidents.aws_2025_10.model import OUTAGE, REPAIR_S, Move, recovers, simulate
from stormlab.incidents.aws_2025_10.moves import PLANS, in_model

PROFILE = profile("aws-2025-10")
SETTLE_S = 90.0  # the leases established in the first seconds after the repair lapse within a lease's life
WATCH_S = SETTLE_S + 600.0  # then ten minutes of profile time
THROTTLE = 10.0  # admissions a second per host: under a host's 20 leases a second
MOVES_AT = REPAIR_S + 300


def rules(**kw) -> Rules:
    base = dict(check_period_s=10, ttl_s=60, timeout_s=20, check_cost_s=0.002, establish_cost_s=0.1)
    return Rules(**(base | kw))


def test_an_item_finished_past_its_timeout_is_queued_again_and_a_restart_drops_the_queue():
    host = LeaseHost(0, [0, 1, 2], rules(), now=0.0)
    assert host.ask(0, 0.0) == QUEUED and host.ask(0, 1.0) == PENDING
    item = host.take()
    assert item.kind == ESTABLISH
    assert host.finish(item, 25.0, True, host.generation) == TIMED_OUT  # 25 s after it was queued
    again = host.take()
    assert again.droplet == 0 and again.queued_at == 25.0 and again.tries == 2
    assert host.finish(again, 30.0, True, host.generation) == ESTABLISHED and host.leased(0, 30.0)
    assert host.ask(0, 40.0) == QUEUED and host.queue[0].kind == CHECK  # a held lease asks for its check
    generation = host.generation
    host.restart(in_flight=0)
    assert not host.queue and host.counts.restarted == 1 and host.leased(0, 40.0)  # the lease stays
    assert host.finish(again, 43.0, True, generation) == RESTARTED


def test_the_throttle_refuses_new_work_and_launches_but_not_the_checks_of_leases_held():
    host = LeaseHost(0, list(range(10)), rules(admit_rate=2), now=0.0, leased_until=100.0)
    assert [host.ask(d, 1.0) for d in range(5)] == [QUEUED] * 5  # checks pass
    host.expiry.clear()
    asks = [host.ask(d, 1.0) for d in range(5, 10)]
    assert asks.count(QUEUED) == 2 and asks.count(THROTTLED) == 3  # a second's worth of burst
    assert host.launch(0, 1.0) == REQUEST_LIMIT
    host.throttle(0, 1.0)
    assert host.launch(0, 1.0) == NO_CAPACITY
    host.expiry[0] = 50.0
    assert host.launch(0, 1.0) == LAUNCHED


def test_after_the_repair_the_manager_stays_collapsed_for_as_long_as_one_watches():
    run = simulate(PROFILE, OUTAGE, REPAIR_S + WATCH_S)
    assert run.error_ratio(0, 60) < 0.01  # before the endpoint breaks
    assert run.error_ratio(180, REPAIR_S) > 0.99  # leases lapsed while the database could not be reached
    after = run.between(REPAIR_S + SETTLE_S, REPAIR_S + WATCH_S)
    assert all(w.launch_error_ratio > 0.9 for w in after)  # ten minutes, every window
    assert run.established_per_s(REPAIR_S + SETTLE_S, REPAIR_S + WATCH_S) < 0.01 * PROFILE.lease_droplets / 60
    assert sum(w.timed_out for w in after) > 10 * PROFILE.lease_droplets  # busy: the work in flight all times out
    assert min(w.queued for w in after) > 0.5 * PROFILE.lease_droplets


def outcome(*moves: Move, watch_s: float = WATCH_S):
    return simulate(PROFILE, (*OUTAGE, *moves), REPAIR_S + watch_s)


def test_throttle_then_restarts_bring_the_leases_back_a_restart_alone_collapses_again():
    both = outcome(Move(MOVES_AT, throttle=THROTTLE), Move(MOVES_AT + 10, restart=(0, 1)), Move(MOVES_AT + 20, restart=(2, 3)))
    restart = outcome(Move(MOVES_AT + 10, restart=(0, 1)), Move(MOVES_AT + 20, restart=(2, 3)))
    throttle = outcome(Move(MOVES_AT, throttle=THROTTLE))
    assert both.recovered_at(MOVES_AT) is not None
    assert both.error_ratio(MOVES_AT - 100, MOVES_AT) > 0.9
    assert restart.recovered_at(MOVES_AT) is None
    assert restart.error_ratio(REPAIR_S + WATCH_S - 100, REPAIR_S + WATCH_S) > 0.9
    # a throttle alone works too, once the doomed work in the queues has drained: never sooner
    assert throttle.recovered_at(MOVES_AT) is not None
    assert throttle.recovered_at(MOVES_AT) >= both.recovered_at(MOVES_AT) - 10


def test_a_fleet_small_enough_or_a_timeout_long_enough_ends_the_collapse():
    assert not recovers(PROFILE)
    assert recovers(PROFILE.replace(lease_droplets=PROFILE.lease_droplets // 2))
    assert recovers(PROFILE.replace(lease_timeout_s=3 * PROFILE.lease_timeout_s))
    assert recovers(PROFILE.replace(lease_queue_limit=300))  # AWS's fix: throttling by queue size


def test_the_ways_out_on_the_live_storys_timeline():
    """stormlab.incidents.aws_2025_10.moves: the plans the live labs run, in the model on the same timeline."""
    both, restarts, throttle = (in_model(PROFILE, plan) for plan in PLANS.values())
    assert all(r["collapsed_before_moves"] for r in (both, restarts, throttle))
    assert both["recovered_s_after_first_move"] is not None and both["launch_errors_last_minute"] < 0.05
    assert restarts["recovered_s_after_first_move"] is None and restarts["launch_errors_last_minute"] > 0.9
    assert throttle["recovered_s_after_first_move"] > both["recovered_s_after_first_move"]


@pytest.mark.parametrize("rate", [0.5, 1.0, 10.0])
@pytest.mark.parametrize("speed", [0.05, 1.0, 4.0])
def test_a_throttle_admits_work_at_its_rate_in_profile_time_at_every_speed(rate, speed):
    """`throttle-work rate=0.5` once admitted nothing (the bucket held at most `rate` tokens and a
    take needs one), and so did the scenario's throttle of 10 at --speed below 0.1. The host's
    bucket counts wall seconds at the rate the service converts (Pace.per_wall), asked every
    wall tenth of a second by work that is always waiting."""
    pace = Pace(speed)
    bucket = Bucket(pace.per_wall(rate), 0.0, 0.0)
    profile_s = 200.0
    steps = int(pace.wall(profile_s) / 0.1)
    admitted = 0
    for i in range(1, steps + 1):
        while bucket.take(i * 0.1):  # all the work the bucket admits this tenth
            admitted += 1
    assert admitted == pytest.approx(rate * profile_s, rel=0.06, abs=2)
