"""The launcher's plan: every process, its port, and who reaches whom through the link proxy."""

import json

import pytest

from stormcore.errors import LabError
from stormcore.roster import ROSTER, cascade_of
from stormcore.settings import LabSettings, profile
from stormlab.engine.launcher import plan
from stormlab.engine.supervisor import child_env


def test_the_services_reach_each_rack_through_their_own_proxy_port(tmp_path):
    comps = {c.name: c for c in plan(LabSettings(racks=3, nodes_per_rack=5), 0, tmp_path).components}
    racks = [comps[f"rack-{r:02d}"].port for r in range(3)]
    paths = json.loads(comps["linkproxy"].env["STORMLAB_PATH_PORTS"])
    assert sorted(paths) == sorted(cascade_of("dynamodb-2015"))
    for name in cascade_of("dynamodb-2015"):
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
    assert [paths[name]["1"][0] for name in cascade_of("dynamodb-2015")] == [21201, 21265, 21329, 21393]
    with pytest.raises(LabError, match="between 1024 and 65035"):
        plan(LabSettings(racks=2, nodes_per_rack=5), 65100, tmp_path)


def test_a_lab_runs_only_the_cascade_it_is_asked_for(tmp_path):
    laid_out = plan(LabSettings(racks=2, nodes_per_rack=5), 0, tmp_path, cascade=("queues",))
    names = [c.name for c in laid_out.components]
    assert names == ["metadata", "linkproxy", "rack-00", "rack-01", "loadgen", "queues"]
    assert sorted(json.loads(laid_out.components[1].env["STORMLAB_PATH_PORTS"])) == ["queues"]
    assert laid_out.supervisor_port not in [c.port for c in laid_out.components]


def test_every_process_of_the_roster_is_planned_each_service_in_its_incidents_lab(tmp_path):
    names = {c.name for c in plan(LabSettings(racks=1, nodes_per_rack=5), 0, tmp_path).components}
    assert names == {p.name for p in ROSTER if p.kind != "rack" and p.incident in ("", "dynamodb-2015")} | {"rack-00"}
    names = {c.name for c in plan(profile("aws-2025-10").replace(racks=1), 0, tmp_path).components}
    assert names == {"metadata", "linkproxy", "loadgen", "rack-00", "leases"}


def test_an_external_rack_is_not_handed_the_lab_token(tmp_path):
    """The contract needs no token (no deploy reaches it; it serves no admin API), and the token
    opens every holder's faults: the lab's own racks get it, a command of the user's does not."""
    laid_out = plan(LabSettings(racks=2, nodes_per_rack=5), 0, tmp_path, external={0: "python3 my_rack.py"})
    comps = {c.name: c.__dict__ | {"url": c.url} for c in laid_out.components}
    environ = {"STORMLAB_TOKEN": "t" * 32, "STORMLAB_TOKEN_FILE": "/run/token", "PATH": "/usr/bin"}
    external, ours = child_env(comps["rack-00"], environ), child_env(comps["rack-01"], environ)
    assert "STORMLAB_TOKEN" not in external and "STORMLAB_TOKEN_FILE" not in external
    assert external["PATH"] == "/usr/bin" and external["STORMLAB_NODE_IDS"].startswith("r00n000")
    assert ours["STORMLAB_TOKEN"] == "t" * 32  # its /admin/deploy takes the supervisor's pushes
