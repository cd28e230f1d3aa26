"""End to end on a single-node Docker Swarm: `docker stack deploy` runs the lab from
deploy/swarm/stormlab-stack.yml, each rack replica takes its rack from its task slot, the chaos
tool blips racks 0-2 through the Docker API, and the 2015 storm holds at its plateau; `docker
stack rm` leaves nothing behind, and a swarm this test made is left again.

Run with `make e2e` after the compose test (it builds the image); on a machine without a
registry, docker/local-images.sh gives the Prometheus image (STORMLAB_BASE_IMAGE, PROMETHEUS_IMAGE).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos import docker_backend as db

ROOT = Path(__file__).resolve().parents[2]
STACK = os.environ.get("STORMLAB_E2E_STACK", "stormlabswarm")
RACKS = 10
IMAGE = os.environ.get("STORMLAB_IMAGE", "stormlab:0.1.0")

pytestmark = pytest.mark.timeout(1200)


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    return out


def wait_for(what: str, check, limit_s: float, every_s: float = 2.0):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"{what}: not within {limit_s:g}s")


def ours(kind: str) -> list[str]:
    label = f"label={db.STACK_LABEL}={STACK}"
    cmd = {"containers": ["ps", "-a", "-q"], "networks": ["network", "ls", "-q"], "services": ["service", "ls", "-q"]}[kind]
    return docker(*cmd, "--filter", label).stdout.split()


def task(service: str) -> str | None:
    found = docker("ps", "-q", "--filter", f"label=com.docker.swarm.service.name={STACK}_{service}").stdout.split()
    return found[0] if found else None


def loadgen_status() -> dict | None:
    container = task("loadgen")
    if not container:
        return None
    read = "import urllib.request, sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:8702/status', timeout=5).read().decode())"
    out = docker("exec", container, "python", "-c", read, check=False, timeout=30)
    return json.loads(out.stdout) if out.returncode == 0 else None


@pytest.fixture(scope="module")
def stack():
    if docker("image", "inspect", IMAGE, check=False).returncode != 0:
        pytest.fail(f"no {IMAGE} image: the compose test builds it (make e2e runs both)")
    made_swarm = docker("info", "--format", "{{.Swarm.LocalNodeState}}").stdout.strip() != "active"
    if made_swarm:
        docker("swarm", "init", "--advertise-addr", "127.0.0.1")
    env = {**os.environ, "GRAFANA_REPLICAS": "0", "STORMLAB_RACKS": str(RACKS)}  # Grafana: no registry to pull it from here
    try:
        subprocess.run(
            ["docker", "stack", "deploy", "-c", "deploy/swarm/stormlab-stack.yml", STACK],
            cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        yield
    finally:
        docker("stack", "rm", STACK, check=False)
        wait_for("the stack's containers gone", lambda: not ours("containers"), 120)
        wait_for("the stack's network gone", lambda: not ours("networks"), 60)
        volumes = docker("volume", "ls", "-q", "--filter", f"label={db.STACK_LABEL}={STACK}").stdout.split()
        if volumes:
            docker("volume", "rm", *volumes, check=False)
        if made_swarm:
            docker("swarm", "leave", "--force", check=False)


def test_the_2015_storm_on_a_single_node_swarm(stack):
    def racks_up():
        runner = db.SdkRunner(STACK)
        found = runner.racks()
        return found if sorted(found) == list(range(RACKS)) else None

    racks = wait_for("a task for every rack, each its own rack (0-9) from its slot", racks_up, 240)
    assert len(set(racks.values())) == RACKS

    seen: list = []

    def steady():
        status = loadgen_status()
        seen[:] = [status]
        ok = status and status["requests_last_10s"] > 100 and status["customer_error_ratio"] is not None
        return status if ok and status["customer_error_ratio"] < 0.01 else None

    try:
        wait_for("customers served with under 1% errors (every node serving)", steady, 300, every_s=5)
    except AssertionError:
        print("loadgen's last status:", seen, docker("service", "ps", f"{STACK}_loadgen", "--no-trunc", check=False).stdout)
        raise
    time.sleep(15)  # a clean 10 s window before the blip
    assert steady(), "the steady state held"

    env = {**os.environ, "STORMLAB_COMPOSE_PROJECT": STACK}
    blip = subprocess.run(
        [sys.executable, "-m", "stormlab.cli", "chaos", "--backend", "docker", "blip", "--racks", "3", "--duration", "5s"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert blip.returncode == 0, blip.stdout + blip.stderr
    blipped = time.monotonic()

    samples = []
    while time.monotonic() - blipped < 150:
        status = loadgen_status()
        if status and status["customer_error_ratio"] is not None:
            samples.append((time.monotonic() - blipped, status["customer_error_ratio"]))
        time.sleep(5)
    print("customer error ratio after the blip:", [(round(t), round(e, 3)) for t, e in samples])
    plateau = [e for t, e in samples if t >= 60]
    assert len(plateau) >= 10, samples
    mean = sum(plateau) / len(plateau)
    assert 0.45 <= mean <= 0.65, f"plateau {mean:.1%} (2015: ~55%); samples {samples}"
    assert min(plateau) > 0.40, f"the storm did not hold: {samples}"  # long after the 5 s blip
    # the blip's rules are gone from the racks: the storm holds by itself
    for rack in (racks[0], racks[1], racks[2]):
        rules = docker("exec", "-u", "root", rack, "iptables", "-S").stdout
        assert "-j DROP" not in rules, rules
