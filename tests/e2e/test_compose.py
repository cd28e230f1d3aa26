"""End to end on docker compose: the stack, a blip from the chaos container, the storm and the
cascade as Prometheus sees them, every dashboard panel's query during the storm, and `down -v`
leaving nothing behind.

Run with `make e2e` (any machine with Docker). Grafana is not started: CI reaches no registry,
so the panels' PromQL is checked against the live Prometheus instead. Set STORMLAB_BASE_IMAGE /
PROMETHEUS_IMAGE to use local images (docker/local-images.sh prints them).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from stormcore import roster
from stormlab.artefacts.dashboard_png import draw, every_value
from stormlab.engine import compose
from tests import inprocess

ROOT = Path(__file__).resolve().parents[2]
PROJECT = os.environ.get("STORMLAB_E2E_PROJECT", "stormlabe2e")
CASCADE = list(roster.CASCADE)
LAB = [*roster.ENGINE_SERVICES, "prometheus", "alertmanager"]  # rack: one service, 10 replicas
RACKS = 10
REPORTS = ROOT / "reports"

pytestmark = pytest.mark.timeout(1500)


def compose_cmd() -> list[str]:
    cmd = compose.compose_cmd()
    if not shutil.which(cmd[0]):
        pytest.fail("neither `docker compose` nor `docker-compose` is installed")
    return cmd


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stack:
    def __init__(self) -> None:
        self.cmd = compose_cmd()
        self.prometheus_port = free_port()
        self.env = {
            **os.environ,
            "COMPOSE_PROJECT_NAME": PROJECT,
            "PROMETHEUS_PORT": str(self.prometheus_port),
            "METADATA_PORT": str(free_port()),
            "GRAFANA_PORT": str(free_port()),
            "ALERTMANAGER_PORT": str(free_port()),
            "LOADGEN_PORT": str(free_port()),
            **{f"{name.upper()}_PORT": str(free_port()) for name in CASCADE},
        }

    def compose(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run([*self.cmd, *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and out.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
        return out

    def chaos(self, *args: str) -> str:
        started = time.monotonic()
        out = self.compose("run", "--rm", "chaos", *args, timeout=120).stdout
        print(f"chaos {' '.join(args)}: {time.monotonic() - started:.1f} s")
        return out

    @functools.cached_property
    def token(self) -> str:
        """The stack's token, generated at its first start."""
        return self.compose("exec", "-T", "metadata", "cat", "/run/stormlab/token").stdout.strip()

    def here(self, *argv: str) -> str:
        """A `stormlab` command run in this process on the stack (``--backend docker``, as from the
        host, with what the chaos container's environment names: each fault holder's address and the
        token): what the chaos and ops containers run, without a container's start-up (6-9 s each
        under the storm, seen here). The containers' own path is taken too, once each below."""
        addresses = {f"STORMLAB_{n.upper()}_URL": f"http://127.0.0.1:{self.env[f'{n.upper()}_PORT']}" for n in ("metadata", *CASCADE)}
        env = self.env | addresses | {"STORMLAB_TOKEN": self.token, "STORMLAB_COMPOSE_PROJECT": PROJECT}
        done = inprocess.stormlab(list(argv), env | {"STORMLAB_STATE_DIR": tempfile.mkdtemp(prefix="stormlab-e2e-here-")})
        assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}: {done.stdout}{done.stderr}"
        return done.stdout

    def scenario(self, text: str) -> dict:
        """`stormlab scenario run --backend docker` on this stack; returns its journal."""
        work, started = Path(tempfile.mkdtemp(prefix="stormlab-e2e-")), time.monotonic()
        (work / "scenario.yaml").write_text(text)
        env = {**self.env, "STORMLAB_STATE_DIR": str(work / "state")}
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "stormlab.cli",
                "scenario",
                "run",
                str(work / "scenario.yaml"),
                "--backend",
                "docker",
                "--out",
                str(work / "runs"),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        print(out.stdout, out.stderr, f"the scenario took {time.monotonic() - started:.1f} s", sep="\n")
        journals = list((work / "runs").glob("*/journal.json"))
        # a runner that died wrote no journal: say how it ended, with all it said
        assert len(journals) == 1, f"the scenario run exited {out.returncode} with {len(journals)} journals:\n{out.stdout}\n{out.stderr}"
        return json.loads(journals[0].read_text())

    def query(self, expr: str) -> list[dict]:
        url = f"http://127.0.0.1:{self.prometheus_port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.loads(resp.read())["data"]["result"]

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def api(self, path: str) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.prometheus_port}{path}", timeout=10) as resp:
            return json.loads(resp.read())["data"]

    def firing(self) -> set[str]:
        return {a["labels"]["alertname"] for a in self.api("/api/v1/alerts")["alerts"] if a["state"] == "firing"}

    def health(self) -> dict[str, str]:
        ids = self.compose("ps", "-q").stdout.split()
        out = subprocess.run(
            [
                "docker",
                "inspect",
                "--format",
                "{{.Name}} {{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}",
                *ids,
            ],
            capture_output=True,
            text=True,
        )
        status = dict(line.lstrip("/").split() for line in out.stdout.splitlines())
        return {name: state for name, state in status.items() if "secrets" not in name}  # the one-shot that made the token

    def container(self, service: str, number: int) -> list[str]:
        labels = {"project": PROJECT, "service": service, "container-number": str(number)}
        filters = [arg for k, v in labels.items() for arg in ("--filter", f"label=com.docker.compose.{k}={v}")]
        return subprocess.run(["docker", "ps", "-q", *filters], capture_output=True, text=True).stdout.split()

    def leftovers(self) -> dict[str, list[str]]:
        label = f"label=com.docker.compose.project={PROJECT}"
        return {
            kind: subprocess.run(["docker", *cmd, "--filter", label, "-q"], capture_output=True, text=True).stdout.split()
            for kind, cmd in (("containers", ["ps", "-a"]), ("networks", ["network", "ls"]), ("volumes", ["volume", "ls"]))
        }


# The blip inside a game day: the runner's desk is up when Alertmanager pages the database.
STORM = """\
title: the 2015 blip on compose, paged
steps:
  - {name: the blip, fault: blip, args: {racks: 3, duration: 5s}}
  - name: storm onset
    expect: {probe: promql, expr: "stormlab:nodes_disqualified:ratio", above: 0.1, within: 120s}
  # the storm builds for a few readings (0.122, 0.089, 0.135 seen) before it settles on the 150 large nodes
  - name: the storm settles
    expect: {probe: promql, expr: "stormlab:nodes_disqualified:ratio", above: 0.14, within: 60s}
  # RetryStorm fires a minute after the onset and its page goes 5 s later (seen 88.7 and 90.7 s in)
  - name: the storm holds while the page goes out
    expect: {probe: promql, expr: "stormlab:nodes_disqualified:ratio", above: 0.1, for: 80s, within: 90s}
"""

GAMEDAY = """\
title: the Monday tail on compose
steady_state: [{probe: customer_error_ratio, below: 0.05}]
steps:
  - {name: look, action: status}
  - {name: stuck, fault: stuck-partition, args: {tables: metric-groups, duration: 30s}}
  - {name: one table fails, expect: {probe: table_error_ratio, table: metric-groups, above: 0.5, within: 45s}}
  - {name: the aggregate looks fine, expect: {probe: customer_error_ratio, below: 0.01, within: 10s}}
"""


def one(found: list[str], what: str) -> str:
    assert len(found) == 1, f"{what}: {len(found)} containers ({found})"
    return found[0]


def wait_for(what: str, check, within_s: float, every_s: float = 5.0):
    started = time.monotonic()
    deadline = started + within_s
    while True:
        try:
            got = check()
        except OSError:
            got = None
        if got:
            print(f"{what}: after {time.monotonic() - started:.1f} s")
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s:g}s: {what}")
        time.sleep(every_s)


@pytest.fixture(scope="module")
def stack():
    s = Stack()
    s.compose("build", "metadata", timeout=1200)
    try:
        s.compose("up", "-d", *LAB, timeout=600)
        yield s
    finally:
        s.compose("down", "-v", "--remove-orphans", timeout=300, check=False)


def test_the_storm_on_compose(stack):
    health = wait_for("every lab container healthy", lambda: (h := stack.health()) and all(v == "healthy" for v in h.values()) and h, 240)
    assert len(health) == len(LAB) - 1 + RACKS

    def all_targets_up():
        targets = stack.api("/api/v1/targets")["activeTargets"]
        jobs = [t["labels"]["job"] for t in targets if t["health"] == "up"]
        return len(targets) == len(jobs) and sorted(jobs) == sorted(["metadata", "loadgen", "prometheus", *CASCADE] + ["racks"] * 10)

    wait_for("Prometheus has every lab target up (10 racks found through DNS)", all_targets_up, 120)
    # each replica took its own rack from its compose name: racks 0-9, once each
    racks = stack.query('count by (rack) (stormlab_renewal_allowance_seconds{job="racks"})')
    assert sorted(int(r["metric"]["rack"]) for r in racks) == list(range(RACKS)), racks

    # The token was generated at the first start: long, not a published default, enforced.
    token = stack.token
    assert len(token) >= 16 and token != "stormlab-training-token"
    admin = f"http://127.0.0.1:{stack.env['METADATA_PORT']}/faults"
    for given in ("", "stormlab-training-token"):
        req = urllib.request.Request(admin, headers={"Authorization": f"Bearer {given}"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=5)
        assert refused.value.code == 401

    # A game day on the stack (--backend docker) while the margin alert is still pending.
    journal = stack.scenario(GAMEDAY)
    assert journal["outcome"] == "passed", [s for s in journal["steps"] if not s["passed"]]
    print(f"the game day's validity: {journal['validity']}")
    assert journal["samples"][-1]["host_cores"], "the racks' host readings reach the game day through Prometheus"
    assert [a["action"] for a in journal["player_actions"]] == ["status"]
    assert "no active faults" in stack.chaos("list")

    # Before any blip: GSIs have grown, so the leading indicator fires; no storm, no errors.
    wait_for("the margin alert fires before any blip", lambda: "MetadataMarginLow" in stack.firing(), 240)
    assert "RetryStorm" not in stack.firing()
    assert stack.value("stormlab:nodes_disqualified:ratio") == 0
    assert stack.value("stormlab:customer_errors:ratio_rate1m") < 0.01

    # The blip, in a game day: Prometheus fires RetryStorm, Alertmanager routes it to the database
    # on-call at the runner's desk (its webhook, on the docker bridge).
    storm = stack.scenario(STORM)
    assert storm["outcome"] == "passed", [s for s in storm["steps"] if not s["passed"]]
    blip = next(s for s in storm["steps"] if s["name"] == "the blip")
    assert blip["passed"], blip
    blip_start = storm["started_at"] + blip["at_s"]
    blip_end = blip_start + 5
    delivered = [p for p in storm["pages"] if p["via"] == "alertmanager" and p["status"] == "firing"]
    print(f"pages Alertmanager delivered to the desk: {[(p['alert'], p['role'], round(p['t'] - blip['at_s'], 1)) for p in delivered]}")
    assert any(p["alert"] == "RetryStorm" and p["role"] == "database" for p in delivered), storm["pages"]
    assert all(p["via"] == "alertmanager" for p in storm["pages"])  # on compose the runner raises none itself

    wait_for("the storm alert fires", lambda: "RetryStorm" in stack.firing(), 240)
    samples = []
    for _ in range(3):  # and still holds after the game day's 80 s of it: 15 s more, well after the 5 s blip
        samples.append((stack.value("stormlab:nodes_disqualified:ratio"), stack.value("stormlab:customer_errors:ratio_rate1m")))
        time.sleep(5)
    print(f"after the blip (disqualified, customer error ratio): {samples}")
    print(f"validity budgets broken (stormlab:run_invalid_reasons:count): {stack.value('stormlab:run_invalid_reasons:count')}")
    assert all(d > 0.1 and e > 0.3 for d, e in samples), samples

    # The cascade in the storm, from the services' own metrics: the scaling API fails for the groups
    # whose rows sit on disqualified nodes (its table is spread over the fleet, ~29% of it on the
    # large instances), those groups' datapoints lose their group; the queues ride it out.
    cascade = {
        rule: stack.value(rule)
        for rule in ("stormlab:scaling_api_errors:ratio_rate1m", "stormlab:metric_gaps:ratio_rate1m", "stormlab:queue_errors:ratio_rate1m")
    }
    print(f"the cascade in the storm: {cascade}")
    assert 0.1 < cascade["stormlab:scaling_api_errors:ratio_rate1m"] < 0.9 and cascade["stormlab:metric_gaps:ratio_rate1m"] > 0.1, cascade
    assert cascade["stormlab:queue_errors:ratio_rate1m"] < 0.05, cascade
    wait_for("the scaling API alert fires", lambda: "ScalingAPIFailing" in stack.firing(), 120)
    rows = stack.query("service_fix:stormlab_cascade_fix_enabled:max")
    fixes = {(r["metric"]["service"], r["metric"]["fix"]): float(r["value"][1]) for r in rows}
    assert len(fixes) == 5 and set(fixes.values()) == {0.0}, fixes  # 2015: no fix on

    REPORTS.mkdir(exist_ok=True)
    for dashboard, png in (("storm-overview", "compose-storm.png"), ("cascade", "compose-cascade.png")):
        draw(
            json.loads((ROOT / f"grafana/dashboards/{dashboard}.json").read_text()),
            f"http://127.0.0.1:{stack.prometheus_port}",
            REPORTS / png,
            8,
            (blip_start, blip_end),
        )

    # A fix switched on in the running queues as their on-call, held by the service, halted like any fault.
    assert "stale-cache" in stack.here("ops", "--backend", "docker", "--as", "queues", "enable", "stale-cache", "--duration", "5m")
    assert "stale-cache" in stack.here("chaos", "--backend", "docker", "list")
    assert "halted 1 fault(s)" in stack.here("chaos", "--backend", "docker", "halt")

    # The operator's moves, from the stack's own ops container (the storm as a responder sees it) and
    # from the host: a pause held by the metadata service, listed and halted like any lease.
    look = stack.compose("run", "--rm", "ops", "status", timeout=120).stdout
    assert "diagnosis:  STORM" in look, look
    assert "pause-metadata #" in stack.here("ops", "--backend", "docker", "pause-metadata", "--duration", "5m")
    assert "pause-metadata" in stack.here("chaos", "--backend", "docker", "list")
    assert "halted 1 fault(s)" in stack.here("chaos", "--backend", "docker", "halt")

    # A long fault from the chaos container, listed, then halted: its rules go at once.
    stack.chaos("partition", "--between", "racks:9", "metadata", "--duration", "5m")
    assert "partition" in stack.here("chaos", "--backend", "docker", "list")
    assert "halted 1 fault(s)" in stack.here("chaos", "--backend", "docker", "halt")
    assert "no active faults" in stack.here("chaos", "--backend", "docker", "list")
    rack_9 = one(stack.container("rack", 10), "replica 10 of rack (rack 9)")
    rules = subprocess.run(["docker", "exec", "-u", "root", rack_9, "iptables", "-S"], capture_output=True, text=True).stdout
    assert "DROP" not in rules, rules

    # A service cut off from the racks: iptables in its own namespace, gone with the lease.
    queues = one(stack.compose("ps", "-q", "queues").stdout.split(), "the queues container")
    assert "isolate on" in stack.here("chaos", "--backend", "docker", "isolate", "--target", "queues", "--duration", "5m")
    rules = subprocess.run(["docker", "exec", "-u", "root", queues, "iptables", "-S"], capture_output=True, text=True).stdout
    assert rules.count("-j DROP") == 20, rules  # 10 racks, both ways
    assert "halted 1 fault(s)" in stack.here("chaos", "--backend", "docker", "halt")
    rules = subprocess.run(["docker", "exec", "-u", "root", queues, "iptables", "-S"], capture_output=True, text=True).stdout
    assert "DROP" not in rules, rules

    # Every panel of every dashboard has data, with the storm still holding.
    assert stack.value("stormlab:customer_errors:ratio_rate1m") > 0.3
    for path in sorted((ROOT / "grafana/dashboards").glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel["targets"]:
                expr = every_value(target["expr"])  # the dashboard's variables at All
                assert stack.query(expr), f"{path.name} / {panel['title']}: no data for {expr}"


def test_a_short_soak_on_compose_leaves_no_fault_behind(stack):
    """The CI version of the compose soak: random leases through the docker backend, fault shells
    SIGKILLed inside their containers (orphans, reverted by `chaos list`), a few services killed."""
    env = {
        **stack.env,
        "STORMLAB_COMPOSE_PROJECT": PROJECT,
        "STORMLAB_METADATA_URL": f"http://127.0.0.1:{stack.env['METADATA_PORT']}",
    }
    out = subprocess.run(
        [sys.executable, "-m", "stormlab.cli", "soak", "--backend", "docker", "--leases", "60", "--seed", "5", "--holder-kills", "0.15"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    print(out.stdout, out.stderr)
    result = json.loads(out.stdout[out.stdout.index("{") :])
    assert out.returncode == 0 and result["ok"], result
    assert result["applied"] >= 20 and result["holders_killed"] >= 1
    assert result["fault_files_left"] == 0 and not result["containers_with_rules_changed"]


def test_down_leaves_nothing_of_the_project_behind(stack):
    stack.compose("down", "-v", "--remove-orphans", timeout=300)
    assert stack.leftovers() == {"containers": [], "networks": [], "volumes": []}
