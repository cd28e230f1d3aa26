"""The local lab's port plan: one port per process, never two processes on one port."""

import pytest

from stormcore import roster
from stormcore.errors import LabError
from stormcore.settings import LabSettings
from stormlab.engine.ports import port_plan


def ports(plan):
    return [*plan.single.values(), *plan.racks, *plan.links, *(p for ps in plan.paths.values() for p in ps), *plan.cells]


@pytest.mark.parametrize("racks", [1, 10, 64])
def test_the_fixed_plan_gives_every_process_its_own_port(racks, monkeypatch):
    monkeypatch.setattr("stormlab.engine.ports.port_free", lambda port: True)
    every = ports(port_plan(LabSettings(racks=racks, cells=min(racks, 2)), 20_000, roster.CASCADE))
    assert len(every) == len(set(every))


def test_a_fleet_the_fixed_plan_cannot_hold_is_refused_not_given_shared_ports(monkeypatch):
    monkeypatch.setattr("stormlab.engine.ports.port_free", lambda port: True)
    with pytest.raises(LabError, match="no room for 65 racks.*--base-port 0"):
        port_plan(LabSettings(racks=65), 20_000, roster.CASCADE)


def test_free_ports_are_unique_for_the_largest_fleet():
    every = ports(port_plan(LabSettings(racks=128, cells=4), 0, roster.CASCADE))
    assert len(every) == len(set(every))
