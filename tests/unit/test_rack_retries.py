"""A rack tells its retry policy of each attempt it sends and each that is over, so a policy that
counts across the rack (Envoy's retry circuit breaker) sees what a proxy in front of it would."""

import asyncio

from storage_node.metrics import RackMetrics
from storage_node.rack import Rack
from stormcore.policies import from_envoy
from stormcore.settings import LabSettings


async def test_envoys_retry_limit_counts_the_racks_attempts_in_flight():
    """Six nodes renew at once and all fail (connection refused); Envoy's circuit breaker allows two
    retries open across the rack: two nodes retry (as often as num_retries lets them), four wait
    for their next slot. Once
    all is over nothing is left counted in flight or open."""
    rack = Rack(LabSettings(racks=1, nodes_per_rack=6, allowance_s=0.05), 0, "http://127.0.0.1:9", RackMetrics.create(0))
    route = {"retry_on": "connect-failure", "num_retries": 2, "retry_back_off": {"base_interval": "0.01s"}}
    make, _, _ = from_envoy.adapt({"retry_policy": route, "circuit_breakers": {"thresholds": [{"max_retries": 2}]}})
    rack.policy = policy = make()
    assert rack.client is not None
    attempts: dict[bytes, int] = {}
    most_in_flight = 0

    async def get(request, deadline):
        nonlocal most_in_flight
        attempts[request] = attempts.get(request, 0) + 1
        most_in_flight = max(most_in_flight, policy.in_flight)
        await asyncio.sleep(0.01)  # every node's first attempt is in flight at once
        raise ConnectionRefusedError("scripted: the link refuses")

    rack.client.get = get
    try:
        await asyncio.wait_for(asyncio.gather(*(node.renew() for node in rack.nodes.values())), 5.0)
    finally:
        await rack.stop()
    assert most_in_flight == 6
    assert sorted(attempts.values()) == [1, 1, 1, 1, 3, 3]  # two retried to num_retries, four overflowed
    assert (policy.in_flight, policy.open, policy.overflows) == (0, 0, 4)
