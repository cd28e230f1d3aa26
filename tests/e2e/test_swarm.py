"""End to end on a swarm of three Docker engines on this host (docker/swarm-engines.sh: Debian's
dockerd in three network namespaces, joined into one swarm, each given the lab's images):
`docker stack deploy` runs the lab from deploy/swarm/stormlab-stack.yml with the racks spread over
the nodes, each rack replica taking its rack from its task slot; the chaos CLI, pointed at the
manager alone, finds the node that runs each target rack and blips racks on the workers through
their own engines; the 2015 storm holds at its plateau, and the stack's Alertmanager pages the
database on-call at the runner's desk on this host (the desk's own web side, at the engines' bridge
address); `docker stack rm` leaves nothing on any engine and the engines' removal leaves nothing
on this host.

Run with `make e2e` after the compose test (it builds the image); on a machine without a
registry, docker/local-images.sh gives the Prometheus and Alertmanager images (PROMETHEUS_IMAGE,
ALERTMANAGER_IMAGE).
STORMLAB_E2E_ENGINES=1 runs the same test on a single-node swarm.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

from chaos import docker_backend as db
from chaos.fault_shell import Exec
from stormlab.responder import desk, desk_web, reach
from stormlab.responder.runbook import Ops

try:
    import docker as sdk
except ImportError:  # pragma: no cover - make e2e installs stormlab[docker]
    sdk = None

ROOT = Path(__file__).resolve().parents[2]
STACK = os.environ.get("STORMLAB_E2E_STACK", "stormlabswarm")
ENGINES = int(os.environ.get("STORMLAB_E2E_ENGINES", "3"))
RACKS = 10
IMAGE = os.environ.get("STORMLAB_IMAGE", "stormlab:0.1.0")

pytestmark = pytest.mark.timeout(1500)


def docker(*args: str, host: str | None = None, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    argv = ["docker", *(["-H", host] if host else []), *args]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    return out


def engines(action: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "docker/swarm-engines.sh", action, *args], cwd=ROOT, capture_output=True, text=True, timeout=900)


def wait_for(what: str, check, limit_s: float, every_s: float = 2.0):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"{what}: not within {limit_s:g}s")


def cmdline(process: Path) -> str:
    try:
        return (process / "cmdline").read_bytes().decode(errors="replace")
    except OSError:  # ended while we looked
        return ""


def left_on_this_host() -> dict[str, list[str]]:
    """What docker/swarm-engines.sh makes on this host and must take away again."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    rules = subprocess.run(["iptables", "-w", "-S", "FORWARD"], capture_output=True, text=True).stdout
    mounts = Path("/proc/mounts").read_text()
    processes = [p.name for p in Path("/proc").glob("[0-9]*") if "stormlab-engines" in cmdline(p)]
    return {
        "namespaces": [line for line in netns.splitlines() if line.startswith("stormlab-engine-")],
        "links": [line.split(": ")[1] for line in links.splitlines() if "stormlab-br" in line],
        "rules": [line for line in rules.splitlines() if "stormlab-engines" in line],
        "mounts": [line for line in mounts.splitlines() if "stormlab-engines" in line],
        "processes": processes,
        "directories": [str(d) for d in (Path("/run/stormlab-engines"), Path("/var/lib/stormlab-engines")) if d.exists()],
    }


class Swarm(NamedTuple):
    manager: str  # the manager's engine address
    urls: dict[str, str]  # every engine's: node id -> tcp URL
    desk_addr: str  # where the engines reach this host (the runner's desk)


@pytest.fixture(scope="module")
def swarm():
    if docker("image", "inspect", IMAGE, check=False).returncode != 0:
        pytest.fail(f"no {IMAGE} image: the compose test builds it (make e2e runs both)")
    if sdk is None:
        pytest.fail("the Docker SDK is missing: make e2e installs stormlab[docker]")
    try:
        up = engines("up", str(ENGINES))
        assert up.returncode == 0, f"swarm-engines.sh up exited {up.returncode}:\n{up.stderr}"
        manager = re.search(r"export DOCKER_HOST=(\S+)", up.stdout).group(1)  # type: ignore[union-attr]
        desk_addr = re.search(r"export STORMLAB_DESK_ADDR=(\S+)", up.stdout).group(1)  # type: ignore[union-attr]
        print(up.stderr, end="")
        ids = docker("node", "ls", "-q", host=manager).stdout.split()
        described = json.loads(docker("node", "inspect", *ids, host=manager).stdout)
        urls = {node["ID"]: db.engine_of(node) for node in described}
        assert len(urls) == ENGINES and all(urls.values()), urls
        yield Swarm(manager, urls, desk_addr)
    finally:
        engines("down")


def deploy(swarm: Swarm, name: str, secrets: Path, **env: str) -> None:
    """`docker stack deploy` of the lab as ``name`` (``env``: more of its variables, e.g. STORMLAB_CELLS)."""
    subprocess.run([sys.executable, "-m", "stormcore.auth", "init", str(secrets)], check=True, capture_output=True)
    variables = {
        **os.environ,
        "DOCKER_HOST": swarm.manager,
        "STORMLAB_DESK_ADDR": swarm.desk_addr,
        "STORMLAB_SECRETS_DIR": str(secrets),
        "GRAFANA_REPLICAS": "0",  # Grafana: no registry to pull it from here
        "STORMLAB_RACKS": str(RACKS),
        **env,
    }
    done = subprocess.run(
        # no registry to ask each image's digest of: asked, every service waits out a timeout (200 s in all)
        ["docker", "stack", "deploy", "--resolve-image", "never", "-c", "deploy/swarm/stormlab-stack.yml", name],
        cwd=ROOT, env=variables, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def stack(swarm, tmp_path_factory):
    """The lab deployed; the directory of its secrets (its token)."""
    secrets = tmp_path_factory.mktemp("swarm-secrets")
    deploy(swarm, STACK, secrets)
    yield secrets
    docker("stack", "rm", STACK, host=swarm.manager, check=False)


@contextmanager
def desk_on(address: str, directory: Path, token: str) -> Iterator[desk.Desk]:
    """The game-day runner's desk, its own web side, on this host at ``address``:8709 (where the
    stack's Alertmanager posts), served from a thread of its own while the block runs."""
    the_desk = desk.Desk(directory, "the storm on a swarm")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    serving = desk_web.serving(the_desk, Ops({"directory": str(directory)}), reach.Reach(listen=address), desk.DEFAULT_PORT, token)
    asyncio.run_coroutine_threadsafe(serving.__aenter__(), loop).result(30)
    try:
        yield the_desk
    finally:
        asyncio.run_coroutine_threadsafe(serving.__aexit__(None, None, None), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def runner_on(manager: str, name: str = STACK) -> db.SdkRunner:
    return db.SdkRunner(name, client_factory=lambda: sdk.DockerClient(base_url=manager))


def loadgen_read(manager: str, name: str, path: str) -> str | None:
    """The loadgen's answer at ``path``, read inside its container (the swarm publishes no port)."""
    runner = runner_on(manager, name)
    found = runner.containers("loadgen")
    if not found:
        return None
    url = f"http://127.0.0.1:8702{path}"
    read = f"import urllib.request, sys; sys.stdout.write(urllib.request.urlopen({url!r}, timeout=5).read().decode())"
    try:
        return runner.exec(Exec(found[0], ("python", "-c", read), detach=False))
    except (OSError, sdk.errors.APIError):
        return None


def loadgen_status(manager: str, name: str = STACK) -> dict | None:
    answer = loadgen_read(manager, name, "/status")
    try:
        return json.loads(answer) if answer else None
    except ValueError:
        return None


def outcomes_by_cell(manager: str, name: str) -> Counter:
    """The customers' requests so far by (cell, outcome), from the loadgen's /metrics."""
    counts: Counter = Counter()
    for family in text_string_to_metric_families(loadgen_read(manager, name, "/metrics") or ""):
        for sample in family.samples:
            if sample.name == "stormlab_customer_requests_total":
                counts[sample.labels["cell"], sample.labels["outcome"]] += int(sample.value)
    return counts


def rack_nodes(manager: str, name: str = STACK) -> dict[int, str]:
    """Each running rack task's rack (its slot - 1) and the node that runs it, as the manager says."""
    service = sdk.DockerClient(base_url=manager).services.get(f"{name}_rack")
    return {
        task["Slot"] - 1: task["NodeID"]
        for task in service.tasks(filters={"desired-state": "running"})
        if task["Status"]["State"] == "running"
    }


def spread_over_workers(nodes: dict[int, str], manager_node: str, count: int = 3) -> list[int]:
    """``count`` racks, taken from each worker in turn (the manager's last): a blip across nodes."""
    by_node: dict[str, list[int]] = {}
    for rack, node in sorted(nodes.items()):
        by_node.setdefault(node, []).append(rack)
    order = sorted(by_node, key=lambda n: (n == manager_node, n))
    chosen: list[int] = []
    while len(chosen) < count and any(by_node.values()):
        for node in order:
            if by_node[node] and len(chosen) < count:
                chosen.append(by_node[node].pop(0))
    return chosen


@pytest.fixture
def runners_desk(swarm, stack, tmp_path):
    """The desk, taking pages with the stack's token, for as long as the test runs."""
    with desk_on(swarm.desk_addr, tmp_path, (stack / "token").read_text().strip()) as the_desk:
        yield the_desk


def test_the_2015_storm_on_a_swarm_of_engines(swarm, stack, runners_desk):
    manager, urls, _ = swarm
    manager_node = next(node for node, url in urls.items() if url == manager)

    def racks_up():
        found = runner_on(manager).racks()
        return found if sorted(found) == list(range(RACKS)) else None

    started = time.monotonic()
    racks = wait_for("a task for every rack, each its own rack (0-9) from its slot", racks_up, 300)
    print(f"every rack running after {time.monotonic() - started:.0f} s")
    assert len(set(racks.values())) == RACKS
    nodes = rack_nodes(manager)
    print("racks per node:", dict(Counter(nodes.values())))
    if ENGINES > 1:
        assert len(set(nodes.values())) >= 2, f"the racks are not spread over the nodes: {nodes}"

    seen: list = []

    def steady():
        status = loadgen_status(manager)
        seen[:] = [status]
        ok = status and status["requests_last_10s"] > 100 and status["customer_error_ratio"] is not None
        return status if ok and status["customer_error_ratio"] < 0.01 else None

    try:
        wait_for("customers served with under 1% errors (every node serving)", steady, 300, every_s=5)
    except AssertionError:
        print("loadgen's last status:", seen, docker("service", "ps", f"{STACK}_loadgen", "--no-trunc", host=manager, check=False).stdout)
        raise
    print(f"customers served after {time.monotonic() - started:.0f} s")
    time.sleep(10)  # loadgen's window is its last 10 s: a whole clean one before the blip
    assert steady(), "the steady state held"

    chosen = spread_over_workers(nodes, manager_node)
    if ENGINES > 1:
        assert any(nodes[r] != manager_node for r in chosen), (chosen, nodes)
    print("blipping racks", chosen, "on", sorted({nodes[r] for r in chosen}))
    env = {**os.environ, "STORMLAB_COMPOSE_PROJECT": STACK, "DOCKER_HOST": manager}  # the manager's engine, and no other
    which = ",".join(map(str, chosen))
    blip = subprocess.run(
        [sys.executable, "-m", "stormlab.cli", "chaos", "--backend", "docker", "blip", "--rack-set", which, "--duration", "5s"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert blip.returncode == 0, blip.stdout + blip.stderr
    blipped = time.monotonic()
    for rack in chosen:
        assert racks[rack] in blip.stdout, (racks[rack], blip.stdout)  # the fault went into each chosen rack

    samples = []
    while time.monotonic() - blipped < 82:  # the plateau read from 45 s to 82 s: 37 s of it, long after the 5 s blip
        status = loadgen_status(manager)
        if status and status["customer_error_ratio"] is not None:
            samples.append((time.monotonic() - blipped, status["customer_error_ratio"]))
        time.sleep(5)
    print("customer error ratio after the blip:", [(round(t), round(e, 3)) for t, e in samples])
    plateau = [e for t, e in samples if t >= 45]
    assert len(plateau) >= 6, samples
    mean = sum(plateau) / len(plateau)
    assert 0.45 <= mean <= 0.65, f"plateau {mean:.1%} (2015: ~55%); samples {samples}"
    assert min(plateau) > 0.40, f"the storm did not hold: {samples}"  # long after the 5 s blip
    # the blip's rules are gone from the racks, on whichever node each runs: the storm holds by itself
    runner = runner_on(manager)
    runner.racks()
    for rack in chosen:
        rules = runner.exec(Exec(racks[rack], ("iptables", "-S"), detach=False))
        assert "-P INPUT" in rules and "-j DROP" not in rules, rules

    # Prometheus fired RetryStorm (a minute of >10% disqualified) and the stack's Alertmanager, on the
    # manager, paged the database on-call at the desk on this host, with the stack's token
    def storm_paged():
        return [p for p in runners_desk.pages if p["alert"] == "RetryStorm" and p["status"] == "firing"]

    try:
        paged = wait_for("Alertmanager pages RetryStorm to the runner's desk", storm_paged, 120, every_s=2)
    finally:
        print("pages at the desk (alert, role, s after the blip):",
              [(p["alert"], p["role"], round(p["mono"] - blipped)) for p in runners_desk.pages])  # fmt: skip
    assert {p["role"] for p in paged} == {"database"} and all(p["via"] == "alertmanager" for p in runners_desk.pages), runners_desk.pages


def test_stack_rm_leaves_nothing_on_any_engine(swarm, stack):
    manager, urls, _ = swarm
    removed(STACK, manager, urls)


def removed(name: str, manager: str, urls: dict[str, str]) -> None:
    """`docker stack rm` of ``name``, and nothing of it left on any engine."""
    docker("stack", "rm", name, host=manager)
    label = f"label={db.STACK_LABEL}={name}"
    for node, url in urls.items():

        def gone(url=url):
            return (
                not docker("ps", "-a", "-q", "--filter", label, host=url).stdout.split()
                and not docker("network", "ls", "-q", "--filter", label, host=url).stdout.split()
            )

        wait_for(f"the stack's containers and network gone from node {node}", gone, 120)
        volumes = docker("volume", "ls", "-q", "--filter", label, host=url).stdout.split()
        if volumes:  # a stack's volumes outlive `stack rm`, as compose's outlive `down` without -v
            docker("volume", "rm", *volumes, host=url)
        assert not docker("volume", "ls", "-q", "--filter", label, host=url).stdout.split(), node
    assert not docker("secret", "ls", "-q", "--filter", label, host=manager).stdout.split()
    assert not docker("service", "ls", "-q", "--filter", label, host=manager).stdout.split()


def test_four_cells_on_the_swarm_keep_the_2015_blip_inside_its_cell(swarm, tmp_path_factory):
    """STORMLAB_CELLS=4 on the same engines: `metadata` (cell 0) and three metadata-cell tasks, each
    rack renewing with its own cell's (racks 0-2, 3-4, 5-7, 8-9); `blip --cell 0`, through the
    engines of the nodes that run racks 0-2, storms cell 0 while the other cells' customers stay
    under 1%; the stack goes with nothing left on any engine."""
    manager, urls, _ = swarm
    name = f"{STACK}cells"
    deploy(swarm, name, tmp_path_factory.mktemp("swarm-cells-secrets"), STORMLAB_CELLS="4", STORMLAB_MORE_CELLS="3")
    started = time.monotonic()
    try:

        def per_cell(status: dict | None = None) -> dict[str, float] | None:
            status = status or loadgen_status(manager, name)
            cells = status and status["cell_error_ratio"]
            return {c: 1.0 if r is None else r for c, r in cells.items()} if cells and len(cells) == 4 else None

        wait_for("every cell's customers served", lambda: (seen := per_cell()) and max(seen.values()) < 0.01, 300, 5)
        print(f"every cell's customers served after {time.monotonic() - started:.0f} s")
        nodes = rack_nodes(manager, name)
        print("racks per node:", dict(Counter(nodes.values())), "cell 0's racks on", sorted({nodes[r] for r in (0, 1, 2)}))
        env = {**os.environ, "STORMLAB_COMPOSE_PROJECT": name, "DOCKER_HOST": manager, "STORMLAB_CELLS": "4"}
        blip = subprocess.run(
            [sys.executable, "-m", "stormlab.cli", "chaos", "--backend", "docker", "blip", "--cell", "0", "--duration", "5s"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert blip.returncode == 0, blip.stdout + blip.stderr
        before = outcomes_by_cell(manager, name)
        wait_for("cell 0 storms", lambda: (seen := per_cell()) and seen["0"] > 0.3, 120, 2)
        readings = []
        for _ in range(5):  # 20 s of cell 0's storm
            status = loadgen_status(manager, name) or {}
            readings.append(per_cell(status))
            lag, busy = status.get("loop_lag_p99_s"), status.get("host_cpu_ratio")
            print(f"  loadgen: host CPU {busy}, loop lag p99 {lag} s, in flight {status.get('inflight')}")
            time.sleep(5)
        print(f"customers' error by cell through cell 0's storm: {readings}")
        print("customers' requests by cell and outcome since the blip:", sorted((outcomes_by_cell(manager, name) - before).items()))
        assert all(r and r["0"] > 0.3 for r in readings), readings  # cell 0 storms on, long after the 5 s blip
        assert all(r and max(r[c] for c in ("1", "2", "3")) < 0.01 for r in readings), readings  # the blast radius: one cell
    finally:
        removed(name, manager, urls)


def test_the_engines_removal_leaves_nothing_on_this_host(swarm):
    down = engines("down")
    assert down.returncode == 0, down.stderr
    left = left_on_this_host()
    assert not any(left.values()), left
