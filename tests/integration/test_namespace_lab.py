"""A lab as a user without root (``link_cut=auto`` → namespace): the racks' links carried and cut by
the kernel in a user and network namespace of the lab's own, its ports reached from the host
through the door, nothing of it left in the host's iptables or process table after ``down``.

Run as ``nobody`` (the tests run as root in CI); as the test's own user where that is not root."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from chaos.kernel_link import iptables_path
from stormlab.engine import door

pytestmark = [pytest.mark.lab, pytest.mark.timeout(150)]
AS_ROOT = os.geteuid() == 0
NOBODY = "nobody"


REPO = Path(__file__).resolve().parents[2]
# What nobody runs the lab with: this interpreter if nobody may, else the system's of the same
# version (a virtualenv's Python may live in root's home), each with this virtualenv's packages.
PACKAGES = ":".join([str(REPO), *(p for p in sys.path if p.endswith("site-packages"))])


def _python() -> str | None:
    if not AS_ROOT:
        return sys.executable
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for exe in (sys.executable, f"/usr/bin/{version}"):
        try:
            probe = subprocess.run(
                [exe, "-c", "import aiohttp, stormlab"], user=NOBODY, env={"PYTHONPATH": PACKAGES}, capture_output=True, cwd="/"
            )
        except OSError:  # not nobody's to run
            continue
        if probe.returncode == 0:
            return exe
    return None


PYTHON = _python()


def _without_root_here() -> str | None:
    if PYTHON is None:
        return "no Python with the lab's packages that nobody may run"
    if AS_ROOT:
        probe = subprocess.run([*(door.unshare_argv() or ["false"]), "true"], user=NOBODY, capture_output=True)
        return None if probe.returncode == 0 else "nobody may not make a user namespace here"
    return door.why_not()


def stormlab(env: dict[str, str], *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(PYTHON), "-m", "stormlab.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        user=NOBODY if AS_ROOT else None,
        cwd="/",
    )


def lab_processes(directory: Path) -> list[int]:
    marker = str(directory).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker in (entry / "cmdline").read_bytes() or marker in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@pytest.mark.skipif(_without_root_here() is not None, reason=str(_without_root_here()))
def test_a_user_without_root_gets_the_kernels_links_in_a_namespace_of_the_labs_own():
    directory = Path(tempfile.mkdtemp(prefix="stormlab-rootless-"))
    directory.chmod(0o777)  # nobody's state directory
    state_dir = directory / "state"
    env = {
        "PATH": "/usr/bin:/bin",  # a user's PATH: no sbin (iptables is found there anyway)
        "HOME": str(directory),
        "STORMLAB_STATE_DIR": str(state_dir),
        "PYTHONPATH": PACKAGES,
    }
    small = ["--racks", "2", "--nodes-per-rack", "20", "--renewal-period", "1s", "--customer-rate", "20"]
    try:
        up = stormlab(env, "up", "--base-port", "0", "--cascade", "none", *small, "--json")
        assert up.returncode == 0, up.stderr[-2000:]
        plan = json.loads((state_dir / "plan.json").read_text())
        assert plan["settings"]["STORMLAB_LINK_CUT"] == "namespace"
        assert "namespace of the lab's own" in plan["links"] and "link_cut=auto: not root" in plan["links"]
        proxy = next(c for c in plan["components"] if c["name"] == "linkproxy")

        deadline = time.monotonic() + 30
        while (status := json.loads(stormlab(env, "status", "--json").stdout))["nodes_serving"] < 40:
            assert time.monotonic() < deadline, status
            time.sleep(0.5)

        blip = stormlab(env, "chaos", "blip", "--rack-set", "1", "--duration", "10s", "--json")
        assert blip.returncode == 0, blip.stderr
        deadline = time.monotonic() + 8
        while (status := json.loads(stormlab(env, "status", "--json").stdout))["racks_link_down"] != [0]:
            assert time.monotonic() < deadline, status  # rack 0's probe sees its link cut; rack 1's does not
            time.sleep(0.2)
        listed = json.loads(stormlab(env, "chaos", "list", "--json").stdout)
        (lease,) = listed["leases"]
        assert lease["fault"] == "blip" and lease["effect"]["dropped_bytes"] > 0  # the kernel's rule, counted, inside
        if AS_ROOT and iptables_path():  # the cut is not in the host's kernel: the namespace has its own
            saved = subprocess.run([f"{iptables_path()}-save"], capture_output=True, text=True).stdout
            assert f"STORMLAB-CUT-{proxy['port']}" not in saved

        down = stormlab(env, "down")
        assert down.returncode == 0, down.stderr
        deadline = time.monotonic() + 10
        while lab_processes(state_dir) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lab_processes(state_dir) == []  # the door, the supervisor and every component
    finally:
        for pid in lab_processes(state_dir):
            os.kill(pid, 9)
        shutil.rmtree(directory, ignore_errors=True)
