"""The herd: a returning link wakes every sleeping node of a rack, a slice per loop iteration;
a membership whose bytes did not change is not decoded again; a deploy rebuilds the request."""

import asyncio

import pytest

from storage_node import rack as rack_module
from storage_node.metrics import RackMetrics
from storage_node.rack import DUE, LINK, WAKE_SLICE, Rack
from stormcore.settings import LabSettings
from stormcore.wire import Membership


@pytest.fixture
async def rack():
    rack = Rack(LabSettings(racks=1, nodes_per_rack=3 * WAKE_SLICE + 7), 0, "http://127.0.0.1:9", RackMetrics.create(0))
    yield rack
    await rack.stop()


async def test_a_returning_link_wakes_every_sleeper_a_slice_per_iteration(rack):
    woken: list[tuple[int, str]] = []
    iteration = 0

    async def sleeper() -> None:
        reason = await rack.wait_until(rack.now() + 3600)
        woken.append((iteration, reason))

    sleepers = [asyncio.create_task(sleeper()) for _ in rack.nodes]
    await asyncio.sleep(0)
    rack._set_link(True)
    while not all(t.done() for t in sleepers):
        iteration += 1
        await asyncio.sleep(0)
    assert [reason for _, reason in woken] == [LINK] * len(rack.nodes)
    per_iteration = [sum(1 for i, _ in woken if i == k) for k in range(iteration + 1)]
    assert max(per_iteration) == WAKE_SLICE and sum(per_iteration) == len(rack.nodes)  # 50 at a time, none left asleep


async def test_a_sleep_ends_when_due_without_a_link_change(rack):
    assert await rack.wait_until(rack.now() + 0.01) == DUE
    assert not rack._sleepers  # nothing left behind


async def test_the_same_membership_bytes_are_not_decoded_again(rack, monkeypatch):
    node = next(iter(rack.nodes.values()))
    body = Membership(node.id, 3, ()).encode()
    decoded = []
    real = Membership.decode
    monkeypatch.setattr(rack_module.Membership, "decode", classmethod(lambda cls, raw: decoded.append(raw) or real(raw)))
    assert node._outcome(200, "", body) == "ok" and node.version == 3
    assert node._outcome(200, "", body) == "ok"
    assert len(decoded) == 1  # once, however many renewals bring the same bytes
    newer = Membership(node.id, 4, ()).encode()
    assert node._outcome(200, "", newer) == "ok" and node.version == 4 and len(decoded) == 2
    with pytest.raises(ValueError):  # another node's membership: an error, whatever it was before
        node._outcome(200, "", Membership("r09n009", 5, ()).encode())


async def test_a_deploy_rebuilds_each_nodes_request(rack):
    node = next(iter(rack.nodes.values()))
    client = rack.client
    assert client is not None
    sent = []

    async def get(request, deadline):
        sent.append(request)
        raise TimeoutError

    client.get = get
    await node._attempt("first")
    rack.deploy({"allowance_s": 2.0})
    await node._attempt("first")
    assert b"X-Stormlab-Deadline-S: 1\r\n" in sent[0] and b"X-Stormlab-Deadline-S: 2\r\n" in sent[1]
