"""The compose stack as game days and `ops` see it: the /status of the metadata service, loadgen
and the cascade's services (their published ports, or the URLs the environment gives: inside
the stack's network, the `ops` container), each rack's state from Prometheus (the racks publish
no port), faults through the chaos container (exactly what `docker compose run --rm chaos …`
does)."""

from __future__ import annotations

import asyncio
import fcntl
import functools
import json
import os
import socket
import struct
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stormcore import auth, racks, roster
from stormcore.errors import LabError
from stormcore.settings import LabSettings
from stormcore.wire import RackStatus
from stormlab.engine import observe
from stormlab.engine.reading import Reading

# The processes whose /status the stack publishes, with their default ports (compose's *_PORT).
PUBLISHED = {p.name: p.published_port for p in roster.SINGLE if p.engines}

ROOT = Path(__file__).resolve().parents[2]
OBSERVERS = {"prometheus": 9090, "grafana": 3000}  # the stack's other published ports (compose's defaults)
DASHBOARDS = ROOT / "grafana" / "dashboards"
SIOCGIFADDR = 0x8915  # Linux: an interface's address


def compose_cmd() -> list[str]:
    """`docker compose` where the plugin is there, else `docker-compose` (raises nothing: a
    container without the docker CLI, the stack's own ops, never runs it)."""
    try:
        if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
            return ["docker", "compose"]
    except FileNotFoundError:
        pass
    return ["docker-compose"]


def compose_token(env: Mapping[str, str] | None = None) -> str:
    """The token the stack generated at its first start (the environment's STORMLAB_TOKEN wins);
    ``env``: another stack's environment (a room's team) than this process's."""
    env = os.environ if env is None else env
    if env.get(auth.ENV):
        return env[auth.ENV]
    try:
        done = subprocess.run(
            [*compose_cmd(), "exec", "-T", "metadata", "cat", "/run/stormlab/token"],
            cwd=ROOT,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def host_address(attempts: int = 3) -> str:
    """The address the stack's containers reach this host at (Alertmanager posts its pages there):
    the default bridge's gateway as Docker says, else the docker0 bridge's own address as the
    kernel says (a daemon busy starting a 1,000-node stack can fail to answer)."""
    said = ""
    for attempt in range(attempts):
        try:
            done = subprocess.run(
                ["docker", "network", "inspect", "bridge", "--format", "{{(index .IPAM.Config 0).Gateway}}"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            said = str(exc)
        else:
            if done.returncode == 0 and done.stdout.strip():
                return done.stdout.strip()
            said = done.stderr.strip() or f"exit {done.returncode}"
        if attempt + 1 < attempts:
            time.sleep(1.0)
    address = interface_address("docker0")
    if address is None:
        raise LabError(f"cannot find the docker bridge's address for Alertmanager's pages ({said}): set STORMLAB_DESK_HOST")
    return address


def interface_address(name: str) -> str | None:
    """A network interface's IPv4 address, asked of the kernel (SIOCGIFADDR), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            answer = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(answer[20:24])


def published_url(name: str, env: Mapping[str, str] | None = None) -> str:
    """Where a process of the stack answers: ``STORMLAB_<NAME>_URL`` (inside the stack's network,
    or a port-forward to a cluster), else its port published on this host (``<NAME>_PORT``);
    ``env``: another stack's variables (a room's team) than this process's environment."""
    env = os.environ if env is None else env
    default = PUBLISHED.get(name, OBSERVERS.get(name, 0))
    return env.get(f"STORMLAB_{name.upper()}_URL") or f"http://127.0.0.1:{env.get(f'{name.upper()}_PORT', default)}"


def docker_state(directory: Path, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A state for `ops` on an engine (compose, a swarm, a cluster): its processes' URLs and the
    stack's token (``STORMLAB_TOKEN``, ``STORMLAB_TOKEN_FILE``, else asked of the stack). ``env``:
    a room's team's stack (its token is its own), not this process's."""
    if env is None and not os.environ.get(auth.ENV) and not os.environ.get(auth.FILE_ENV):
        os.environ[auth.ENV] = compose_token()
    env = os.environ if env is None else env
    services = {name: {"url": published_url(name, env)} for name in PUBLISHED}
    return {
        "directory": str(directory),
        "components": {k: v for k, v in services.items() if k in roster.CASCADE or k == "metadata"} | racks.cell_holders(env),
        "supervisor_url": None,
        "settings": {"STORMLAB_RACKS": env.get("STORMLAB_RACKS", "10"), "STORMLAB_CELLS": env.get("STORMLAB_CELLS", "1")},
    }


def dashboard_links(prometheus: str, grafana: str) -> list[dict[str, str]]:
    """What a player of the stack can open: each Grafana dashboard provisioned from grafana/dashboards
    (if the stack's Grafana answers: it is left out where its image is not to be had) and
    Prometheus's alerts (if it answers)."""
    out = []
    if get_json(f"{grafana}/api/health") is not None:
        for path in sorted(DASHBOARDS.glob("*.json")):
            try:
                board = json.loads(path.read_text())
            except ValueError:
                continue
            if isinstance(board, dict) and board.get("uid"):
                out.append({"title": str(board.get("title") or path.stem), "url": f"{grafana}/d/{board['uid']}"})
    # its alerts page: the web UI's, or the classic one's (Debian's Prometheus has only that)
    page = next((f"{prometheus}{path}" for path in ("/alerts", "/classic/alerts") if _answers(f"{prometheus}{path}")), None)
    if page is not None:
        out.append({"title": "Prometheus: the alerts firing and pending", "url": page})
    return out


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return resp.status == 200
    except OSError:
        return False


def get_json(url: str) -> Any:
    """A JSON document from ``url``, or None (no answer, not JSON)."""
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError):
        return None


class DockerStack:
    """A compose stack as observers read it: this process's (its environment's ports), or ``env``'s
    (a room's team)."""

    def __init__(self, directory: Path, env: Mapping[str, str] | None = None) -> None:
        self.env = env
        self.state = docker_state(directory, env)
        self.directory = directory
        self.metadata = self.state["components"]["metadata"]["url"]
        self.published = {name: published_url(name, env) for name in PUBLISHED}
        self.prometheus = published_url("prometheus", env)

    @functools.cached_property
    def settings(self) -> LabSettings:
        """Its racks and cells, read once (each reading's per-cell shares)."""
        return LabSettings.from_env(self.state["settings"])

    @functools.cached_property
    def compose(self) -> list[str]:
        """The compose command, found when first needed (the stack's ops container has none)."""
        return compose_cmd()

    def _prom(self, expr: str) -> dict[tuple[str, ...], float]:
        reply = get_json(f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        rows = reply["data"]["result"] if reply else []
        return {tuple(r["metric"].get(k, "") for k in ("rack", "state", "attempt")): float(r["value"][1]) for r in rows}

    def scalar(self, expr: str) -> float | None:
        """A PromQL expression's value now: its first series (None: no data, or Prometheus down)."""
        reply = get_json(f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        data = reply.get("data", {}) if isinstance(reply, dict) else {}
        if data.get("resultType") == "scalar":
            return _finite(float(data["result"][1]))
        rows = data.get("result") or []
        return _finite(float(rows[0]["value"][1])) if rows else None

    def host(self) -> dict[str, dict[str, float]]:
        """Each scraped process's host readings (job/instance -> status fields), from Prometheus:
        the racks' too, which publish no port."""
        exprs = {
            "loop_lag_p99_s": "histogram_quantile(0.99, sum by (job, instance, le) (rate(stormlab_event_loop_lag_seconds_bucket[1m])))",
            "cpu_ratio": "max by (job, instance) (stormlab_process_cpu_ratio)",
            "cpu_wait_s": "max by (job, instance) (stormlab_process_cpu_wait_seconds)",
            "host_cpu_ratio": "max by (job, instance) (stormlab_host_cpu_busy_ratio)",
            "host_steal_ratio": "max by (job, instance) (stormlab_host_cpu_steal_ratio)",
            "host_cores": "max by (job, instance) (stormlab_host_cores)",
        }
        out: dict[str, dict[str, float]] = {}
        for field, expr in exprs.items():
            reply = get_json(f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
            for row in reply["data"]["result"] if reply else []:
                value = _finite(float(row["value"][1]))
                if value is not None:
                    name = row["metric"].get("instance", "").split(":")[0] or row["metric"].get("job", "")
                    out.setdefault(name, {})[field] = value
        return out

    def racks(self) -> list[RackStatus]:
        """Each rack's status as Prometheus last scraped it."""
        nodes = self._prom("sum by (rack, state) (stormlab_nodes)")
        attempts = self._prom("sum by (rack, attempt) (stormlab_renewals_total)")
        p99 = self._prom("histogram_quantile(0.99, sum by (rack, le) (rate(stormlab_renewal_seconds_bucket[1m])))")
        link = self._prom("max by (rack) (stormlab_link_up)")
        allowance = self._prom("max by (rack) (stormlab_renewal_allowance_seconds)")
        lag = self._prom("max(histogram_quantile(0.99, sum by (instance, le) (rate(stormlab_event_loop_lag_seconds_bucket[1m]))))")
        worst_lag = next(iter(lag.values()), 0.0)
        out = []
        for (rack,) in sorted({(k[0],) for k in nodes if k[0]}, key=lambda k: int(k[0])):
            count = {state: int(v) for (r, state, _), v in nodes.items() if r == rack}
            out.append(
                RackStatus(
                    loop_lag_p99_s=_finite(worst_lag) or 0.0,
                    rack=int(rack),
                    pid=None,
                    link_up=link.get((rack, "", ""), 1.0) > 0,
                    nodes_total=sum(count.values()),
                    nodes_serving=count.get("serving", 0),
                    nodes_disqualified=count.get("disqualified", 0),
                    nodes_starting=count.get("starting", 0),
                    renewal_p99_s=_finite(p99.get((rack, "", ""))),
                    renewal_attempts_total={a: v for (r, _, a), v in attempts.items() if r == rack},
                    allowance_s=allowance.get((rack, "", ""), 0.0),
                )
            )
        return out

    def _sample(self) -> Reading:
        raw = {name: get_json(f"{url}/status") for name, url in self.published.items()}
        racks = self.racks()
        return observe.summarize(
            endpoints={**self.published, "prometheus": self.prometheus},
            unreachable=[n for n, r in raw.items() if r is None],
            statuses={name: observe.read_status(observe.STATUS_TYPES[name], r) for name, r in raw.items()},
            racks=racks,
            allowance_s=max((r.allowance_s for r in racks), default=None) or None,
            host=observe.host_readings(self.host()),
            faults=[],
            settings=self.settings,
        )

    async def sample(self) -> Reading:
        return await asyncio.to_thread(self._sample)

    def dashboards(self) -> list[dict[str, str]]:
        """The stack's dashboards and alerts, as links (those that answer now)."""
        return dashboard_links(self.prometheus, published_url("grafana", self.env))

    def chaos(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        env = None if self.env is None else dict(self.env)
        return subprocess.run(
            [*self.compose, "run", "--rm", "chaos", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )


def _finite(value: float | None) -> float | None:
    return value if value is not None and value == value and value != float("inf") else None
