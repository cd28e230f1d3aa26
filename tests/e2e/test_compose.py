"""End to end on docker compose: the stack, a blip from the chaos container, the storm and the
cascade as Prometheus sees them, every dashboard panel's query during the storm, and `down -v`
leaving nothing behind.

Run with `make e2e` (any machine with Docker). Grafana is not started: CI reaches no registry,
so the panels' PromQL is checked against the live Prometheus instead. Set STORMLAB_BASE_IMAGE /
PROMETHEUS_IMAGE to use local images (docker/local-images.sh prints them).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from stormcore import roster
from stormlab.artefacts.dashboard_png import draw, every_value
from stormlab.responder import reach
from tests.e2e.compose_stack import CASCADE, PROJECT, ROOT, Stack, one, wait_for

LAB = [*roster.ENGINE_SERVICES, "prometheus", "alertmanager"]  # rack: one service, 10 replicas
RACKS = 10
STALE_S = 15.0  # a scrape and a rule evaluation (5 s each) after a target answers again, and a margin
BEFORE_THE_BLIP = (
    "stormlab:nodes_disqualified:ratio",
    "stormlab:metadata_margin:ratio",
    "stormlab:customer_errors:ratio_rate1m",
    "stormlab:run_invalid_reasons:count",
)
REPORTS = ROOT / "reports"

pytestmark = pytest.mark.timeout(1500)


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


def has_data(stack: Stack, expr: str) -> list:
    """What Prometheus answers for ``expr`` once it answers anything, within STALE_S."""
    deadline = time.monotonic() + STALE_S
    while not (got := stack.query(expr)) and time.monotonic() < deadline:
        time.sleep(1)
    return got


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
    before = {rule: stack.value(rule) for rule in BEFORE_THE_BLIP}
    print(f"before any blip: {before}")
    # A storm with no blip is either a change to the physics or the host's doing (the margin is thin
    # by design: the validity count says which); the message carries both.
    assert "RetryStorm" not in stack.firing(), f"a storm before any blip: {before}"
    assert stack.value("stormlab:nodes_disqualified:ratio") == 0
    assert stack.value("stormlab:customer_errors:ratio_rate1m") < 0.01

    # The blip, in a game day: Prometheus fires RetryStorm, Alertmanager routes it to the database
    # on-call at the runner's desk (its webhook, on the docker bridge, in plain http), while the
    # players' pages are served over TLS on a port of their own (a class on its own laptops).
    tls = reach.make_certificate(Path(tempfile.mkdtemp(prefix="stormlab-e2e-tls-")), reach.Reach().hosts())
    storm = stack.scenario(STORM, "--listen", "127.0.0.1", "--tls-cert", tls.cert, "--tls-key", tls.key)
    assert "status page: https://127.0.0.1:" in stack.said, stack.said
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
    # listed and halted from a bare shell on the host (no holder's address, no token): each holding
    # service is asked inside its own container
    listed = stack.here("chaos", "--backend", "docker", "list", addresses=False)
    assert f"{stack.project}_metadata_1#" in listed and "pause-metadata on metadata" in listed, listed
    assert "halted 1 fault(s)" in stack.here("chaos", "--backend", "docker", "halt", addresses=False)
    assert "no active faults" in stack.here("chaos", "--backend", "docker", "list", addresses=False)

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

    # A halt that nothing stops: the metadata service frozen (SIGSTOP inside its container, from the
    # chaos container), the first holder every halt asks; the halt names it, halts every other
    # holder's leases and ends the freeze itself through its fault shell.
    stack.chaos("freeze", "--target", "metadata", "--duration", "5m")
    assert "stale-cache" in stack.here("ops", "--backend", "docker", "--as", "queues", "enable", "stale-cache", "--duration", "5m")
    said = stack.here("chaos", "--backend", "docker", "halt", code=1)
    print(f"the halt with the metadata service frozen: {said!r}")
    assert "metadata: did not answer within 5s" in said and "Traceback" not in said, said
    assert "halted 2 fault(s)" in said, said  # the queues' fix, and the freeze's shell (whose revert is SIGCONT)
    meta = f"http://127.0.0.1:{stack.env['METADATA_PORT']}/healthz"
    wait_for("the metadata service answers again", lambda: urllib.request.urlopen(meta, timeout=2).status == 200, 30, every_s=1)
    assert "no active faults" in stack.here("chaos", "--backend", "docker", "list")

    # Every panel of every dashboard has data, with the storm still holding. The freeze failed the
    # metadata service's scrapes, so its series are stale until a scrape after the thaw and the
    # rules' next evaluation (5 s each): a panel gets STALE_S to show data again.
    wait_for("Prometheus has the metadata service's series again", lambda: stack.query("stormlab:metadata_inflight:sum"), 60, 1)
    assert stack.value("stormlab:customer_errors:ratio_rate1m") > 0.3
    for path in sorted((ROOT / "grafana/dashboards").glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel["targets"]:
                expr = every_value(target["expr"])  # the dashboard's variables at All
                assert has_data(stack, expr), f"{path.name} / {panel['title']}: no data for {expr} within {STALE_S:g}s"


def test_a_short_soak_on_compose_leaves_no_fault_behind(stack):
    """The CI version of the compose soak: random leases through the docker backend, fault shells
    SIGKILLed inside their containers (orphans, reverted by `chaos list`), a few services killed."""
    env = {
        **stack.env,
        "STORMLAB_COMPOSE_PROJECT": PROJECT,
        "STORMLAB_METADATA_URL": f"http://127.0.0.1:{stack.env['METADATA_PORT']}",
    }
    out = subprocess.run(
        [sys.executable, "-m", "stormlab.cli", "soak", "--backend", "docker", "--leases", "40", "--seed", "5", "--holder-kills", "0.15"],
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
