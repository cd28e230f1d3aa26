"""The October 2025 incident's lease manager on real processes: its fault and each of its operators'
moves, made as a player makes them (`stormlab chaos` and `stormlab ops`), and each seen on the
lease manager's /status. The story as a whole (the collapse, the ways out, live beside the model)
is the fidelity guard's; this is every piece of it, quick, on a small fleet."""

from __future__ import annotations

import pytest

from stormcore import incidents
from stormcore.settings import profile
from stormlab.cli import main
from tests.conftest import until

INCIDENT = next(i for i in incidents.REGISTERED if i.trigger == "dns-empty")  # the lease manager's
SPEED = 4.0  # a lease of 60 s lapses in 15 s


@pytest.mark.lab
def test_the_lease_manager_runs_its_fault_and_every_move(lab):
    settings = profile(INCIDENT.name).replace(lease_droplets=400).sped_up(SPEED)
    started = lab(settings=settings, cascade=tuple(p.name for p in INCIDENT.processes))
    status = lambda: started.status("leases")  # noqa: E731

    until(lambda: status()["leases_active"] == 400 and status()["endpoint"] == "ok", limit_s=30, what="every droplet leased")
    assert status()["launch_error_ratio"] in (None, 0.0)

    # the trigger: the record empty; the leases lapse and launches fail
    assert main(["chaos", INCIDENT.trigger, "--duration", "10m"]) == 0
    until(lambda: status()["endpoint"] == "empty", limit_s=5, what="the endpoint empty")
    until(lambda: (status()["launch_error_ratio"] or 0) > 0.5, limit_s=40, what="launches failing once the leases lapse")
    assert status()["leases_active"] < 400

    # each move: the record put back by hand, the throttle, a host restarted, the queue limit
    assert main(["ops", "repair-endpoint"]) == 0
    until(lambda: status()["endpoint"] != "empty", limit_s=5, what="the record back")
    assert main(["ops", "throttle", "10", "--duration", "5m"]) == 0
    until(lambda: status()["admit_rate"] > 0, limit_s=5, what="the throttle in force")
    before = status()["hosts"][0]["restarts"]
    assert main(["ops", "restart-host", "0"]) == 0
    until(lambda: status()["hosts"][0]["restarts"] == before + 1, limit_s=5, what="host 0 restarted")
    assert main(["ops", "queue-limit", "300", "--duration", "5m"]) == 0
    until(lambda: status()["queue_limit"] == 300, limit_s=5, what="the queue limit in force")
    until(lambda: status()["leases_active"] == 400, limit_s=60, what="every droplet leased again")

    # the moves are fault leases like any other: a halt ends them, and the lease manager is as it was
    assert main(["chaos", "halt"]) == 0
    until(lambda: status()["admit_rate"] == 0 and status()["queue_limit"] == 0, limit_s=5, what="the moves ended")
