"""The launcher's plan: every process, its port, and who reaches whom through the link proxy."""

import json

import pytest

from stormcore.errors import LabError
from stormcore.roster import CASCADE, ROSTER
from stormcore.settings import LabSettings
from stormlab.engine.launcher import plan


def test_the_services_reach_each_rack_through_their_own_proxy_port(tmp_path):
    comps = {c.name: c for c in plan(LabSettings(racks=3, nodes_per_rack=5), 0, tmp_path).components}
    racks = [comps[f"rack-{r:02d}"].port for r in range(3)]
    paths = json.loads(comps["linkproxy"].env["STORMLAB_PATH_PORTS"])
    assert sorted(paths) == sorted(CASCADE)
    for name in CASCADE:
        urls = comps[name].env["STORMLAB_RACK_URLS"].split(",")
        listen = [int(u.rsplit(":", 1)[1]) for u in urls]
        assert [paths[name][str(r)] for r in range(3)] == [[listen[r], racks[r]] for r in range(3)]
    # loadgen's customers go straight to the racks; every port is distinct
    assert comps["loadgen"].env["STORMLAB_RACK_URLS"].split(",") == [f"http://127.0.0.1:{p}" for p in racks]
    ports = [c.port for c in comps.values()] + [p for ps in paths.values() for p, _ in ps.values()]
    assert len(ports) == len(set(ports))


def test_a_fixed_base_port_lays_out_64_path_ports_per_service(tmp_path):
    comps = {c.name: c for c in plan(LabSettings(racks=2, nodes_per_rack=5), 21000, tmp_path).components}
    paths = json.loads(comps["linkproxy"].env["STORMLAB_PATH_PORTS"])
    assert [paths[name]["1"][0] for name in CASCADE] == [21201, 21265, 21329, 21393]
    with pytest.raises(LabError, match="between 1024 and 65035"):
        plan(LabSettings(racks=2, nodes_per_rack=5), 65100, tmp_path)


def test_a_lab_runs_only_the_cascade_it_is_asked_for(tmp_path):
    laid_out = plan(LabSettings(racks=2, nodes_per_rack=5), 0, tmp_path, cascade=("queues",))
    names = [c.name for c in laid_out.components]
    assert names == ["metadata", "linkproxy", "rack-00", "rack-01", "loadgen", "queues"]
    assert sorted(json.loads(laid_out.components[1].env["STORMLAB_PATH_PORTS"])) == ["queues"]
    assert laid_out.supervisor_port not in [c.port for c in laid_out.components]


def test_every_process_of_the_roster_is_planned(tmp_path):
    names = {c.name for c in plan(LabSettings(racks=1, nodes_per_rack=5), 0, tmp_path).components}
    assert names == {p.name for p in ROSTER if p.kind != "rack"} | {"rack-00"}
