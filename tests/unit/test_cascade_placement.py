"""Which dependent service a storm reaches, and how far, follows from where the placement rule
put its rows, in virtual time: the reference model's nodes (the lab's own cores), the services'
own routing (``owner_of``) and the queue service's cache rule (``TtlCache``).

2015: Auto Scaling's API faults "significantly increased" from the storm on; SQS served from
its caches through the storm and failed once DynamoDB's traffic was held back (5:45 AM)."""

import random

import pytest

from metadata_service.membership import MembershipStore
from services.cache import TtlCache
from services.queues.app import CLIENT_QUEUES
from services.queues.app import TABLE as QUEUE_TABLE
from services.scaling.app import GROUPS
from services.scaling.app import TABLE as SCALING_TABLE
from services.storage import owner_of
from stormcore.settings import profile
from stormcore.wire import PartitionMap
from stormlab.model.reference import ReferenceModel

STEP_S = 0.25


class Cascade:
    """The 2015 profile's fleet in the reference model, with the services' calls made against it."""

    def __init__(self) -> None:
        self.s = profile("dynamodb-2015").profile_time()
        self.model = ReferenceModel(self.s)
        self.routes = PartitionMap.decode(MembershipStore.for_fleet(self.s).partition_map()).tables
        self.queues = TtlCache(self.s.queue_cache_ttl_s, serve_stale=False, ride_out=True)
        self.rng = random.Random(2015)

    def serving(self, table: str, key: str) -> bool:
        return self.model.nodes[owner_of(self.routes[table], key)[1]].renewal.refusal.serving

    def queue_call(self, now: float) -> bool:
        """As the queue service decides (services/queues/app.py ``metadata``): fresh, refreshed, or stale by the rule."""
        queue = self.rng.choice(CLIENT_QUEUES)
        if self.queues.fresh(queue, now):
            return True
        if self.serving(QUEUE_TABLE, queue):
            self.queues.store(queue, {"queue": queue}, now)
            return True
        return self.queues.refresh_failed(queue)

    def table_share_down(self, table: str) -> float:
        owners = self.routes[table].owners
        return sum(not self.model.nodes[o].renewal.refusal.serving for o in owners) / len(owners)

    def run(self, seconds: float) -> dict[str, float]:
        """Step the model; the services call every step; their error ratios over the span."""
        calls = {"scaling": [], "queues": [], "share": [], "customers": []}
        end = self.model.now + seconds
        while self.model.now < end:
            self.model.run_until(self.model.now + STEP_S)
            now = self.model.now
            calls["scaling"].append(not self.serving(SCALING_TABLE, f"group:{self.rng.choice(GROUPS)}"))
            calls["queues"].append(not self.queue_call(now))
            calls["share"].append(self.table_share_down(SCALING_TABLE))
            calls["customers"].append(self.model.error_ratio())
        return {k: sum(v) / len(v) for k, v in calls.items()}


@pytest.fixture(scope="module")
def cascade():
    c = Cascade()
    period = c.s.renewal_period_s
    c.run(1.5 * period + 10)  # memberships, then the baseline
    before = c.run(period)
    c.model.blip({0, 1, 2}, c.model.now, 5.0)
    c.run(5.0 + 3 * period)  # the storm forms and spreads
    storm = c.run(6 * period)
    c.model.pause()
    c.run(c.s.renewal_period_s + c.s.allowance_s)  # every node's membership lapses
    paused = c.run(2 * c.s.queue_cache_ttl_s)  # and then the queues' cache
    return before, storm, paused


def test_before_the_blip_every_service_is_served(cascade):
    before, _, _ = cascade
    assert before["scaling"] == 0 and before["queues"] == 0 and before["customers"] < 0.01


def test_the_scaling_api_fails_at_about_its_tables_share_on_disqualified_nodes_not_all(cascade):
    _, storm, _ = cascade
    assert 0.45 <= storm["customers"] <= 0.65  # the plateau
    assert 0.15 <= storm["share"] <= 0.45  # scaling-groups' partitions on refusing nodes: the rule's ~29%
    assert 0.05 <= storm["scaling"] <= 0.6 and abs(storm["scaling"] - storm["share"]) <= 0.15  # about that share, not 100%


def test_the_queues_ride_the_storm_out_on_their_cache_and_fail_once_the_fleet_is_held_back(cascade):
    _, storm, paused = cascade
    assert storm["queues"] <= 0.01
    assert paused["queues"] >= 0.5 and paused["scaling"] >= 0.9 and paused["customers"] >= 0.9
