"""The Kubernetes manifests: every overlay renders with `kubectl kustomize` (Debian's
kubernetes-client; CI installs it), every object validates against the Kubernetes schemas, and
the lab's own needs hold (a rack per pod, one fleet size, non-root pods, compose's files)."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from stormcore import roster
from stormlab.artefacts import k8s_config

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = sorted(p.name for p in (ROOT / "deploy/k8s/overlays").iterdir() if p.is_dir())
ROOM_TEAMS = ("stormlab-team-1", "stormlab-team-2")
K8S_VERSION = "1.30.0"
LAB_IMAGE = "stormlab:0.1.0"
# the cells docs/sizing.md works out for 100,000 nodes at speed 1 (`make sizing` writes it)
FLEET_100K_CELLS = int(re.search(r"\| cells at speed 1 \(`STORMLAB_CELLS`\) \| (\d+):", (ROOT / "docs/sizing.md").read_text()).group(1))

kubernetes_validate = pytest.importorskip("kubernetes_validate")
pytestmark = pytest.mark.skipif(not shutil.which("kubectl"), reason="kubectl not installed (CI installs Debian's kubernetes-client)")


@functools.cache
def render(overlay: str) -> tuple[dict, ...]:
    out = subprocess.run(
        ["kubectl", "kustomize", f"deploy/k8s/overlays/{overlay}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def objects(overlay: str, kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in render(overlay) if d["kind"] == kind}


def pod_specs(overlay: str) -> dict[str, dict]:
    return {name: d["spec"]["template"]["spec"] for kind in ("Deployment", "StatefulSet") for name, d in objects(overlay, kind).items()}


def test_every_process_of_the_roster_is_a_workload_running_its_module():
    pods = pod_specs("dynamodb-2015")
    for process in roster.ROSTER:
        if process.engines:
            (container,) = [c for c in pods[process.name]["containers"] if c["name"] == process.name]
            assert container["command"][-2:] == ["-m", process.module], process.name


def test_there_are_overlays_for_a_classroom_the_2015_profile_in_one_cell_and_four_100k_nodes_and_a_training_room():
    assert OVERLAYS == ["cells", "dynamodb-2015", "fleet-100k", "room", "small"]


def test_the_room_gives_each_team_the_classroom_lab_in_a_namespace_of_its_own():
    docs = render("room")
    assert sorted(d["metadata"]["name"] for d in docs if d["kind"] == "Namespace") == list(ROOM_TEAMS)
    lab = render("small")
    for team in ROOM_TEAMS:
        mine = [d for d in docs if d["metadata"].get("namespace") == team]
        # the whole classroom lab, object for object, and nothing of it shared with another team
        assert sorted((d["kind"], d["metadata"]["name"]) for d in mine) == sorted((d["kind"], d["metadata"]["name"]) for d in lab)
        settings = [d for d in mine if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("stormlab-settings-")]
        assert [s["data"]["STORMLAB_SEED"] for s in settings] == ["2015"]  # every team meets the same storm
        assert settings[0]["data"]["STORMLAB_RACKS"] == "4" and settings[0]["data"]["STORMLAB_NODES_PER_RACK"] == "100"
    # every object is a team's but the teams' namespaces themselves: nothing cluster-wide that two labs would share
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == set(ROOM_TEAMS)
    # each lab reaches its own: names within the namespace, never another's by its full name
    text = yaml.safe_dump_all(docs)
    assert ".svc" not in text and "stormlab-team-1." not in text and "stormlab-team-2." not in text


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates_against_the_kubernetes_schemas(overlay):
    docs = render(overlay)
    assert len(docs) > 20
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)  # raises on any schema error or unknown field


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_validation_would_catch_a_broken_object(overlay):
    rack = dict(objects(overlay, "StatefulSet")["rack"])
    broken = rack | {"spec": rack["spec"] | {"replicas": "ten"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


@pytest.mark.parametrize(
    ("overlay", "racks", "per_rack"),
    [("small", 4, 100), ("dynamodb-2015", 10, 100), ("cells", 10, 100), ("fleet-100k", 100, 1000)],
)
def test_each_overlay_runs_one_rack_pod_per_rack_of_its_fleet(overlay, racks, per_rack):
    [settings] = [d for name, d in objects(overlay, "ConfigMap").items() if name.startswith("stormlab-settings-")]
    assert settings["data"]["STORMLAB_RACKS"] == str(racks) and settings["data"]["STORMLAB_NODES_PER_RACK"] == str(per_rack)
    rack = objects(overlay, "StatefulSet")["rack"]
    assert rack["spec"]["replicas"] == racks and rack["spec"]["serviceName"] == "racks"
    env = {e["name"]: e.get("value") for e in rack["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["STORMLAB_RACK"] == "ordinal"  # the pod's ordinal is its rack
    assert objects(overlay, "Service")["racks"]["spec"]["clusterIP"] == "None"  # DNS gives every rack pod
    assert objects(overlay, "Service")["metadata"]["spec"]["clusterIP"] == "None"  # a partition drops the pod's own address
    for name, spec in pod_specs(overlay).items():  # the generated name, hash and all, reaches every stormlab pod
        for container in spec["containers"]:
            if container["image"] == LAB_IMAGE:
                assert container["envFrom"] == [{"configMapRef": {"name": settings["metadata"]["name"]}}], name
    assert {d["metadata"].get("namespace") for d in render(overlay)} == {"stormlab"}  # the room's teams: their own test above


@pytest.mark.parametrize(("overlay", "cells"), [("small", 1), ("dynamodb-2015", 1), ("cells", 4), ("fleet-100k", FLEET_100K_CELLS)])
def test_each_overlay_runs_a_metadata_service_per_cell_behind_cells(overlay, cells):
    [settings] = [d for name, d in objects(overlay, "ConfigMap").items() if name.startswith("stormlab-settings-")]
    data = settings["data"]
    assert (data["STORMLAB_CELLS"], data["STORMLAB_MORE_CELLS"], data["STORMLAB_CELLS_DNS"]) == (str(cells), str(cells - 1), "cells:8700")
    more = objects(overlay, "StatefulSet")["metadata-cell"]
    assert more["spec"]["replicas"] == cells - 1 and more["spec"]["serviceName"] == "cells"  # metadata-cell-0 is cell 1
    env = {e["name"]: e["value"] for e in more["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["STORMLAB_CELL"] == "ordinal"
    first = objects(overlay, "Deployment")["metadata"]["spec"]["template"]
    assert {e["name"]: e["value"] for e in first["spec"]["containers"][0]["env"]}["STORMLAB_CELL"] == "0"
    service = objects(overlay, "Service")["cells"]["spec"]
    assert service["clusterIP"] == "None"  # DNS gives each cell's pod: a rack asks them which cell they serve
    for template in (first, more["spec"]["template"]):  # every cell's pods, and nothing else, answer to `cells`
        assert service["selector"].items() <= template["metadata"]["labels"].items()
    workloads = [d for kind in ("Deployment", "StatefulSet") for d in objects(overlay, kind).values()]
    picks = service["selector"].items()
    selected = [d["metadata"]["name"] for d in workloads if picks <= d["spec"]["template"]["metadata"]["labels"].items()]
    assert sorted(selected) == ["metadata", "metadata-cell"], selected


def test_the_100k_overlay_runs_the_cells_the_sizing_page_works_out_at_speed_1():
    [settings] = [d for name, d in objects("fleet-100k", "ConfigMap").items() if name.startswith("stormlab-settings-")]
    assert settings["data"]["STORMLAB_SPEED"] == "1" and settings["data"]["STORMLAB_CELLS"] == str(FLEET_100K_CELLS)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_runs_unprivileged_and_the_lab_pods_share_their_process_namespace(overlay):
    for name, spec in pod_specs(overlay).items():
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0, name
        if spec["containers"][0]["image"] == LAB_IMAGE:
            assert spec["shareProcessNamespace"] is True, name  # the pause fault's SIGSTOP reaches the service
            assert spec["securityContext"]["runAsUser"] == 10001, name  # the image's user


def test_the_config_maps_are_the_repositorys_files_as_they_are_now():
    assert (ROOT / "deploy/k8s/base/config.yaml").read_text() == k8s_config.configmaps(), "run `make k8s-config`"


def test_prometheus_alertmanager_and_grafana_get_the_same_files_as_compose():
    maps = {name: d["data"] for name, d in objects("dynamodb-2015", "ConfigMap").items()}
    assert maps["prometheus-config"]["prometheus.yml"] == (ROOT / "prometheus/prometheus.yml").read_text()
    assert maps["prometheus-config"]["alerts.yml"] == (ROOT / "prometheus/rules/alerts.yml").read_text()
    assert maps["alertmanager-config"]["alertmanager.yml"] == (ROOT / "alertmanager/alertmanager.yml").read_text()
    dashboards = {p.name for p in (ROOT / "grafana/dashboards").glob("*.json")}
    assert set(maps["grafana-dashboards"]) == dashboards
    # Prometheus's static targets are the Services' names and ports
    services = objects("dynamodb-2015", "Service")
    config = yaml.safe_load(maps["prometheus-config"]["prometheus.yml"])
    for job in config["scrape_configs"]:
        for target in (t for sc in job.get("static_configs", []) for t in sc["targets"]):
            host, port = target.split(":")
            if host != "localhost":
                assert int(port) in [p["port"] for p in services[host]["spec"]["ports"]], target
