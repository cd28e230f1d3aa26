"""The compose project's files: compose, Prometheus config and rules, Grafana dashboards."""

import json
import re
import shutil
import subprocess
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from stormcore import roster
from stormcore.settings import LabSettings
from stormlab.responder import alerts, desk

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "grafana/dashboards").glob("*.json"))
DATASOURCE_UID = "stormlab-prometheus"
PROMQL_WORDS = {
    "sum",
    "by",
    "rate",
    "on",
    "and",
    "or",
    "unless",
    "scalar",
    "sort_desc",
    "histogram_quantile",
    "clamp_min",
    "max",
    "le",
    "without",
    "ignoring",
    "group_left",
}


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def recorded() -> set[str]:
    groups = yaml.safe_load((ROOT / "prometheus/rules/recording.yml").read_text())["groups"]
    return {rule["record"] for g in groups for rule in g["rules"]}


def documented() -> set[str]:
    return set(re.findall(r"^\| `(stormlab_[a-z_]+)`", (ROOT / "docs/metrics.md").read_text(), re.MULTILINE))


def panel_exprs(dashboard: dict) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def names_in(expr: str) -> set[str]:
    without_strings = re.sub(r'"[^"]*"|\{[^}]*\}|\[[^\]]*\]', "", expr)
    return {w for w in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", without_strings) if w not in PROMQL_WORDS}


def test_every_lab_service_is_commented_healthchecked_and_waits_for_what_it_needs():
    text = (ROOT / "docker-compose.yml").read_text()
    services = compose()["services"]
    for name, service in services.items():
        assert re.search(rf"\n  # [^\n]+\n(  #[^\n]*\n)*  {re.escape(name)}:\n", text), f"{name} has no comment"
        if name not in ("chaos", "ops", "secrets"):  # run on demand, and the one-shot that makes the token
            assert "healthcheck" in service, name
            # cheap: no Python interpreter started every 5 s in every container
            assert "python" not in " ".join(service["healthcheck"]["test"]), name
        for needed, dep in (service.get("depends_on") or {}).items():
            assert dep == {"condition": "service_completed_successfully" if needed == "secrets" else "service_healthy"}


def test_the_racks_are_one_service_scaled_to_the_fleet_size():
    services = compose()["services"]
    assert not [name for name in services if name.startswith("rack-")], "no hand-written service per rack"
    rack = services["rack"]
    assert rack["scale"] == "${STORMLAB_RACKS:-10}" == rack["environment"]["STORMLAB_RACKS"]  # one number sizes both
    assert rack["environment"]["STORMLAB_RACK"] == "replica"  # each replica's rack from its compose name
    assert rack["networks"]["default"]["aliases"] == ["racks"]
    for name in ("loadgen", *(s for s in roster.CASCADE if s in roster.ENGINE_SERVICES)):
        assert services[name]["environment"]["STORMLAB_RACKS_DNS"] == "racks:8800", name  # found by DNS
        assert "STORMLAB_RACK_URLS" not in services[name]["environment"], name
    assert services["loadgen"]["depends_on"]["rack"] == {"condition": "service_healthy"}


def test_every_process_of_the_roster_runs_on_compose_and_the_swarm_as_its_module():
    lab = compose()["services"]
    stack = yaml.safe_load((ROOT / "deploy/swarm/stormlab-stack.yml").read_text())["services"]
    for process in roster.ROSTER:
        if process.engines:
            assert lab[process.name]["command"] == ["python", "-m", process.module], process.name
            assert stack[process.name]["command"] == ["python", "-m", process.module], process.name
        else:  # the local lab's network: compose's is Docker's
            assert process.name not in lab and process.name not in stack


def test_images_are_pinned_in_dot_env():
    env = dict(line.split("=", 1) for line in (ROOT / ".env").read_text().splitlines() if "=" in line and not line.startswith("#"))
    for var in ("STORMLAB_BASE_IMAGE", "PROMETHEUS_IMAGE", "GRAFANA_IMAGE"):
        assert ":" in env[var] and not env[var].endswith(":latest"), var


@pytest.mark.skipif(not shutil.which("docker-compose"), reason="docker-compose not installed (CI installs it)")
def test_compose_file_validates_with_docker_compose():
    subprocess.run(["docker-compose", "config", "-q"], cwd=ROOT, check=True)


def test_dashboards_have_fixed_uids_and_read_the_datasource_their_variable_names():
    assert len(DASHBOARDS) == 4
    uids = []
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        uids.append(dashboard["uid"])
        sources = re.findall(r'"uid": "([^"]+)"', json.dumps(dashboard["panels"]) + json.dumps(dashboard["annotations"]))
        assert set(sources) <= {"${datasource}", "-- Grafana --"}, path.name  # importable into any Grafana
        assert panel_exprs(dashboard), path.name
    assert sorted(uids) == ["stormlab-cascade", "stormlab-margin", "stormlab-storm", "stormlab-tables"]
    provisioned = yaml.safe_load((ROOT / "grafana/provisioning/datasources/prometheus.yml").read_text())
    assert [(d["uid"], d["isDefault"]) for d in provisioned["datasources"]] == [(DATASOURCE_UID, True)]  # the variable's pick


def test_dashboards_read_recording_rules_and_rules_read_documented_metrics():
    rules = recorded()
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        variables = [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
        for expr in panel_exprs(dashboard) + [re.sub(r"^label_values\((.*), \w+\)$", r"\1", q) for q in variables]:
            assert names_in(expr) <= rules, f"{path.name}: {expr} reads something that is not a recording rule"
    metrics = documented()
    groups = yaml.safe_load((ROOT / "prometheus/rules/recording.yml").read_text())["groups"]
    for rule in (r for g in groups for r in g["rules"]):
        raw = {n.removesuffix("_bucket") for n in names_in(rule["expr"]) if n.startswith("stormlab_")}
        assert raw <= metrics, f"{rule['record']} reads undocumented {raw - metrics}"


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool not installed (CI installs Debian's prometheus)")
def test_promtool_checks_the_config_and_tests_the_rules():
    subprocess.run(["promtool", "check", "config", "prometheus/prometheus.yml"], cwd=ROOT, check=True, capture_output=True)
    out = subprocess.run(["promtool", "test", "rules", "prometheus/tests/rules_test.yml"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_the_cascade_runs_on_compose_scraped_with_its_fixes_switchable():
    services = compose()["services"]
    jobs = {j["job_name"]: j for j in yaml.safe_load((ROOT / "prometheus/prometheus.yml").read_text())["scrape_configs"]}
    switches = {f"STORMLAB_{f.name.upper()}" for f in fields(LabSettings) if f.name.startswith("fix_") or f.name == "scaling_workers"}
    assert len(switches) == 5
    for name in roster.cascade_of("dynamodb-2015"):  # the lease manager (aws-2025-10) runs in the local lab only
        service = services[name]
        assert service["command"] == ["python", "-m", roster.BY_NAME[name].module]
        port = service["environment"]["STORMLAB_PORT"]
        assert jobs[name]["static_configs"] == [{"targets": [f"{name}:{port}"]}]
        assert switches <= set(service["environment"]), name
        assert "NET_ADMIN" in service["cap_add"]  # the isolate fault's iptables, in its own namespace
    # the services' own data (messages, datapoints) outlives a container
    assert "queues-data:/var/lib/stormlab/data" in services["queues"]["volumes"]
    assert "metrics-data:/var/lib/stormlab/data" in services["metrics"]["volumes"]


def test_no_secret_is_committed_and_only_grafana_may_listen_beyond_this_host():
    env = (ROOT / ".env").read_text()
    assert "TOKEN" not in env and "PASSWORD" not in env
    services = compose()["services"]
    for name, service in services.items():
        for port in service.get("ports", []):
            if name == "grafana":
                assert port.startswith("${STORMLAB_BIND:-127.0.0.1}:"), port
            else:
                assert port.startswith("127.0.0.1:"), (name, port)
    assert not any("lifecycle" in arg for arg in services["prometheus"]["command"])
    secrets = services["secrets"]
    assert secrets["command"] == ["python", "-m", "stormcore.auth", "init", "/run/stormlab"] and secrets["restart"] == "no"
    for name, service in services.items():
        if name not in ("secrets", "prometheus"):  # everything else reads the generated secrets, read-only
            assert "secrets:/run/stormlab:ro" in service.get("volumes", []), name
    assert services["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD__FILE"] == "/run/stormlab/grafana-password"
    assert "The Docker socket\n  # is root on this host" in (ROOT / "docker-compose.yml").read_text()


def test_alertmanager_routes_each_roles_pages_to_the_desk_with_the_token():
    config = yaml.safe_load((ROOT / "alertmanager/alertmanager.yml").read_text())
    assert config["route"]["receiver"] == "desk" and "routes" not in config["route"]  # one receiver: the desk reads the role
    assert config["route"]["group_by"] == ["alertname", "role"]  # each role its own notification
    assert [r["name"] for r in config["receivers"]] == ["desk"]
    for receiver in config["receivers"]:
        [hook] = receiver["webhook_configs"]
        assert hook["url"] == f"http://stormlab-desk:{desk.DEFAULT_PORT}/alertmanager"
        assert hook["http_config"]["authorization"] == {"type": "Bearer", "credentials_file": "/run/stormlab/token"}
    service = compose()["services"]["alertmanager"]
    assert "stormlab-desk:host-gateway" in service["extra_hosts"]
    assert "secrets:/run/stormlab:ro" in service["volumes"]
    # the swarm's: the same file, the token secret where it reads it, the desk at STORMLAB_DESK_ADDR
    stack = yaml.safe_load((ROOT / "deploy/swarm/stormlab-stack.yml").read_text())
    on_swarm = stack["services"]["alertmanager"]
    assert on_swarm["command"] == service["command"]
    [config_file] = on_swarm["configs"]
    assert config_file["target"] == "/etc/alertmanager/alertmanager.yml"
    assert stack["configs"][config_file["source"]]["file"] == "../../alertmanager/alertmanager.yml"
    assert on_swarm["secrets"] == [{"source": "token", "target": "/run/stormlab/token"}]
    assert on_swarm["extra_hosts"] == ["stormlab-desk:${STORMLAB_DESK_ADDR:-host-gateway}"]
    prometheus = yaml.safe_load((ROOT / "prometheus/prometheus.yml").read_text())
    assert prometheus["alerting"]["alertmanagers"] == [{"static_configs": [{"targets": ["alertmanager:9093"]}]}]
    labels = {a.name: a.role for a in alerts.ALERTS}
    rules = yaml.safe_load((ROOT / "prometheus/rules/alerts.yml").read_text())["groups"][0]["rules"]
    assert {r["alert"]: r["labels"].get("role") for r in rules} == labels


@pytest.mark.skipif(not shutil.which("amtool"), reason="amtool not installed (CI installs Debian's prometheus-alertmanager)")
def test_amtool_checks_the_config_and_routes_every_paging_alert_to_its_role():
    config = "--config.file=alertmanager/alertmanager.yml"
    subprocess.run(["amtool", "check-config", "alertmanager/alertmanager.yml"], cwd=ROOT, check=True, capture_output=True)
    for alert in alerts.ALERTS:
        labels = [f"alertname={alert.name}", f"severity={alert.severity}", *([f"role={alert.role}"] if alert.role else [])]
        out = subprocess.run(["amtool", "config", "routes", "test", config, *labels], cwd=ROOT, capture_output=True, text=True)
        assert out.stdout.strip() == "desk", (alert.name, out.stdout, out.stderr)


def test_the_image_installs_its_dependencies_before_the_code_and_runs_unprivileged():
    """A code change reuses the dependencies' layer: every instruction before their install reads
    only the wheelhouse, pyproject and constraints; the code comes after. No root at run time."""
    instructions = (ROOT / "Dockerfile").read_text().replace("\\\n", " ").splitlines()  # continuation lines joined
    steps = [line.split() for line in instructions if line.split()[:1] in (["COPY"], ["RUN"], ["USER"])]
    install = next(i for i, w in enumerate(steps) if w[0] == "RUN" and "requirements.txt" in " ".join(w))
    before = [w for w in steps[:install] if w[0] == "COPY"]
    assert {src for w in before for src in w[1:-1]} == {"docker/wheelhouse", "pyproject.toml", "constraints.txt"}, before
    code = [w[1] for w in steps[install:] if w[0] == "COPY"]
    assert {"stormcore", "storage_node", "metadata_service", "services", "chaos", "stormlab", "docker/healthz"} <= set(code)
    assert steps[-1] == ["USER", "10001:10001"]  # numeric: runAsNonRoot can check it
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_the_swarm_stack_runs_the_same_lab_with_the_rack_from_the_task_slot():
    stack = yaml.safe_load((ROOT / "deploy/swarm/stormlab-stack.yml").read_text())
    assert stack["version"].startswith("3.")  # what `docker stack deploy` reads
    services = stack["services"]
    rack = services["rack"]
    assert rack["environment"]["STORMLAB_RACK"] == "slot:{{.Task.Slot}}"
    assert rack["deploy"]["replicas"] == "${STORMLAB_RACKS:-10}" == rack["environment"]["STORMLAB_RACKS"]
    assert rack["environment"]["STORMLAB_WAIT_FOR"] == "http://metadata:8700/healthz"  # no start-up order on a swarm
    assert rack["networks"]["default"]["aliases"] == ["racks"]
    lab = compose()["services"]
    for name in roster.ENGINE_SERVICES:
        assert services[name]["deploy"]["endpoint_mode"] == "dnsrr", name  # names give the tasks' own addresses
        assert services[name]["command"] == lab[name]["command"], name
        assert services[name]["healthcheck"]["test"] == lab[name]["healthcheck"]["test"], name
    settings = {
        k for k in lab["metadata"]["environment"] if k not in ("STORMLAB_TOKEN", "STORMLAB_GRAFANA_URL", "STORMLAB_GRAFANA_PASSWORD_FILE")
    }
    assert settings <= set(services["metadata"]["environment"])  # the same settings, switches and fixes
    for source in stack["configs"].values():  # Prometheus and Grafana get this repository's files
        assert (ROOT / "deploy/swarm" / source["file"]).resolve().is_file(), source


def test_on_a_swarm_the_token_is_a_docker_secret_and_a_volume_keeps_its_service_on_its_node():
    stack = yaml.safe_load((ROOT / "deploy/swarm/stormlab-stack.yml").read_text())
    services = stack["services"]
    assert "secrets" not in services  # no service writes the token into a node-local volume any more
    assert set(stack["secrets"]) == {"token", "grafana-password"}
    assert all(s["file"].startswith("${STORMLAB_SECRETS_DIR:-./secrets}/") for s in stack["secrets"].values())
    assert "secrets" not in stack["volumes"]
    for name in roster.ENGINE_SERVICES:
        assert services[name]["secrets"] == ["token"], name  # on every node, from the manager
        assert services[name]["environment"]["STORMLAB_TOKEN_FILE"] == "/run/secrets/token", name
    assert services["grafana"]["secrets"] == ["grafana-password"]
    assert services["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD__FILE"] == "/run/secrets/grafana-password"
    for name, service in services.items():
        volumes = [v for v in service.get("volumes", []) if v.split(":")[0] in stack["volumes"]]
        constraints = service.get("deploy", {}).get("placement", {}).get("constraints", [])
        assert (constraints == ["node.role == manager"]) == bool(volumes), name  # only the stateful are pinned
    assert "placement" not in services["rack"]["deploy"]  # the racks spread over every node


def engines_made() -> tuple[bool, bool]:
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout if shutil.which("ip") else ""
    return Path("/run/stormlab-engines").exists(), "stormlab-br" in links


@pytest.mark.parametrize("argv", [["up", "0"], ["up", "10"], ["up", "three"], ["sideways"], []])
def test_swarm_engines_refuses_what_it_cannot_do_before_touching_anything(argv):
    script = ROOT / "docker/swarm-engines.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0  # it parses
    before = engines_made()
    out = subprocess.run(["bash", str(script), *argv], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, out.stderr
    assert "usage: docker/swarm-engines.sh up [N] | down" in out.stderr or "N must be" in out.stderr
    assert engines_made() == before  # no namespace, bridge or directory made
