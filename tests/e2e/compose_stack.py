"""A compose project of the lab for the end-to-end tests: its own ports, its commands (compose,
the chaos container, `stormlab` in-process as from the host, a scenario run), Prometheus's
answers, its containers' health, and what it leaves behind."""

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
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from stormcore import roster
from stormlab.engine import compose
from tests import inprocess

ROOT = Path(__file__).resolve().parents[2]
PROJECT = os.environ.get("STORMLAB_E2E_PROJECT", "stormlabe2e")
CASCADE = [s for s in roster.CASCADE if s in roster.ENGINE_SERVICES]  # the services a stack runs (2015's cascade)


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
    """A compose project of the lab on its own ports (``env``: more of its variables, e.g. STORMLAB_CELLS)."""

    def __init__(self, project: str = PROJECT, **env: str) -> None:
        self.project = project
        self.cmd = compose_cmd()
        self.prometheus_port = free_port()
        self.env = {
            **os.environ,
            "COMPOSE_PROJECT_NAME": project,
            "PROMETHEUS_PORT": str(self.prometheus_port),
            "METADATA_PORT": str(free_port()),
            "GRAFANA_PORT": str(free_port()),
            "ALERTMANAGER_PORT": str(free_port()),
            "LOADGEN_PORT": str(free_port()),
            **{f"{name.upper()}_PORT": str(free_port()) for name in CASCADE},
            **env,
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

    def here(self, *argv: str, code: int = 0, addresses: bool = True) -> str:
        """A `stormlab` command run in this process on the stack (``--backend docker``, as from the
        host, with what the chaos container's environment names: each fault holder's address and the
        token): what the chaos and ops containers run, without a container's start-up (6-9 s each
        under the storm, seen here). ``code``: the exit expected (not 0: its stdout and stderr are returned).
        ``addresses=False``: as a user's shell on the host runs it, naming no holder and no token."""
        named = {f"STORMLAB_{n.upper()}_URL": f"http://127.0.0.1:{self.env[f'{n.upper()}_PORT']}" for n in ("metadata", *CASCADE)}
        env = self.env | (named | {"STORMLAB_TOKEN": self.token} if addresses else {}) | {"STORMLAB_COMPOSE_PROJECT": self.project}
        done = inprocess.stormlab(list(argv), env | {"STORMLAB_STATE_DIR": tempfile.mkdtemp(prefix="stormlab-e2e-here-")})
        assert done.returncode == code, f"{' '.join(argv)} exited {done.returncode}: {done.stdout}{done.stderr}"
        return done.stdout if code == 0 else done.stdout + done.stderr

    def scenario(self, text: str, *flags: str) -> dict:
        """`stormlab scenario run --backend docker [FLAGS]` on this stack; returns its journal (what
        the runner printed: ``said``)."""
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
                *flags,
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        print(out.stdout, out.stderr, f"the scenario took {time.monotonic() - started:.1f} s", sep="\n")
        self.said = out.stdout
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
        labels = {"project": self.project, "service": service, "container-number": str(number)}
        filters = [arg for k, v in labels.items() for arg in ("--filter", f"label=com.docker.compose.{k}={v}")]
        return subprocess.run(["docker", "ps", "-q", *filters], capture_output=True, text=True).stdout.split()

    def leftovers(self) -> dict[str, list[str]]:
        label = f"label=com.docker.compose.project={self.project}"
        return {
            kind: subprocess.run(["docker", *cmd, "--filter", label, "-q"], capture_output=True, text=True).stdout.split()
            for kind, cmd in (("containers", ["ps", "-a"]), ("networks", ["network", "ls"]), ("volumes", ["volume", "ls"]))
        }


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
