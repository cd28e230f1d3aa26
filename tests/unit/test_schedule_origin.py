"""One renewal schedule for the fleet: racks that share the launcher's origin put their nodes'
slots on one grid (the reference model's interleave), whenever each rack began."""

import asyncio
import time

import pytest

from storage_node.app import schedule_origin_from_env
from storage_node.metrics import RackMetrics
from storage_node.rack import Rack
from stormcore.fleet import grid_slot, startup_phases
from stormcore.racks import SCHEDULE_ORIGIN_ENV
from stormcore.settings import LabSettings, SettingsError


def test_a_node_s_first_slot_is_its_next_one_on_the_shared_grid():
    assert grid_slot(100.0, 10.0, 0.25, 100.0) == 102.5
    assert grid_slot(100.0, 10.0, 0.25, 103.0) == 112.5  # a rack that began late: the next one
    assert grid_slot(100.0, 10.0, 0.25, 50.0) == 102.5  # the origin still ahead: wait for it
    assert grid_slot(100.0, 10.0, 0.0, 100.0) == 100.0
    for now in (100.0, 137.3, 1e6):
        slot = grid_slot(100.0, 20.0, 0.375, now)
        k = (slot - 100.0) / 20.0 - 0.375
        assert now <= slot < now + 20.0 and k == pytest.approx(round(k))


async def test_racks_that_share_an_origin_interleave_as_one_fleet():
    settings = LabSettings(racks=2, nodes_per_rack=10)
    origin, period, phases = time.time() - 3.7, settings.renewal_period_s, startup_phases(settings)
    first = Rack(settings, 0, "http://127.0.0.1:9", RackMetrics.create(0), origin)
    await asyncio.sleep(0.3)  # the second rack's process began later
    second = Rack(settings, 1, "http://127.0.0.1:9", RackMetrics.create(1), origin)
    try:
        for rack in (first, second):
            assert rack.schedule_origin_unix == origin
            for node in rack.nodes.values():
                on_wall = node.start_at - rack.now() + time.time()
                k = (on_wall - origin) / period - phases[node.id]
                assert abs(k - round(k)) < 0.01 and node.start_at >= rack.now() - 0.05, (node.id, k)
        alone = Rack(settings, 0, "http://127.0.0.1:9", RackMetrics.create(0))  # no origin given: its own start
        assert abs(alone.schedule_origin_unix - time.time()) < 1.0
        await alone.session.close()
    finally:
        await first.session.close()
        await second.session.close()


def test_the_origin_from_the_environment_is_unix_seconds_or_refused():
    assert schedule_origin_from_env({}) is None
    assert schedule_origin_from_env({SCHEDULE_ORIGIN_ENV: "1764675000.5"}) == 1764675000.5
    for bad in ("soon", "-1", "nan", "inf"):
        with pytest.raises(SettingsError, match="unix seconds"):
            schedule_origin_from_env({SCHEDULE_ORIGIN_ENV: bad})
