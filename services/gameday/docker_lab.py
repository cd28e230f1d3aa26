"""The scenario runner's view of the compose stack: samples from the metadata service's and
loadgen's /status and from Prometheus, faults through the chaos container (exactly what
`docker compose run --rm chaos …` does), actions through `ops` against the published
metadata port."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from services.common import auth
from services.gameday.chaos_args import fault_argv
from services.gameday.local import run_action
from services.gameday.ops import Ops, first_look, moves_since, record

ROOT = Path(__file__).resolve().parents[2]


def compose_cmd() -> list[str]:
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"]


def docker_state(directory: Path) -> dict:
    """A state for `ops` on the compose stack: the metadata service's published port and the
    token from the project's .env (the environment overrides both)."""
    os.environ.setdefault(auth.ENV, auth.read_token(ROOT / ".env") or "")
    port = os.environ.get("METADATA_PORT", "8700")
    url = os.environ.get("STORMLAB_METADATA_URL", f"http://127.0.0.1:{port}")
    return {"directory": str(directory), "components": {"metadata": {"url": url}}, "supervisor_url": None,
            "settings": {"STORMLAB_RACKS": "10"}}


def _get(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError):
        return None


class DockerLab:
    def __init__(self, directory: Path) -> None:
        self.state = docker_state(directory)
        self.ops = Ops(self.state, directory)
        self.metadata = self.state["components"]["metadata"]["url"]
        self.loadgen = f"http://127.0.0.1:{os.environ.get('LOADGEN_PORT', '8702')}"
        self.prometheus = f"http://127.0.0.1:{os.environ.get('PROMETHEUS_PORT', '9090')}"
        self.compose = compose_cmd()
        self.started_at = time.time()

    def _prom(self, expr: str) -> list[dict]:
        reply = _get(f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        return reply["data"]["result"] if reply else []

    def _sample(self) -> dict[str, Any]:
        meta, loadgen = _get(f"{self.metadata}/status") or {}, _get(f"{self.loadgen}/status") or {}
        nodes = {r["metric"]["state"]: float(r["value"][1]) for r in self._prom("sum by (state) (stormlab_nodes)")}
        attempts = {r["metric"]["attempt"]: float(r["value"][1])
                    for r in self._prom("sum by (attempt) (stormlab_renewals_total)")}
        p99 = self._prom('quantile:stormlab_renewal_seconds:rate1m{quantile="0.99"}')
        allowance = self._prom("stormlab:renewal_allowance_seconds:max")
        return {"customer_error_ratio": loadgen.get("customer_error_ratio"),
                "table_error_ratio": loadgen.get("table_error_ratio", {}),
                "nodes_total": int(sum(nodes.values())), "nodes_serving": int(nodes.get("serving", 0)),
                "nodes_disqualified": int(nodes.get("disqualified", 0)),
                "metadata_inflight": meta.get("inflight"), "metadata_cores": meta.get("cores"),
                "metadata_paused": meta.get("paused"), "metadata_processing_p99_s": meta.get("processing_p99_s"),
                "allowance_s": float(allowance[0]["value"][1]) if allowance else None,
                "renewal_p99_s": float(p99[0]["value"][1]) if p99 else None,
                "renewal_attempts_total": attempts, "membership_sizes": meta.get("membership_sizes", {})}

    async def sample(self) -> dict[str, Any]:
        return await asyncio.to_thread(self._sample)

    def _chaos(self, argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run([*self.compose, "run", "--rm", "chaos", *argv], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)

    async def fault(self, fault: str, args: dict, speed: float) -> dict[str, Any]:
        argv = fault_argv(fault, args, speed)[1:]
        done = await asyncio.to_thread(self._chaos, argv)
        said = (done.stdout.strip() or done.stderr.strip()).splitlines()
        message = said[-1] if said else f"exit {done.returncode}"
        duration = next((float(a.removesuffix("s")) for f, a in zip(argv, argv[1:]) if f == "--duration"), None)
        return {"ok": done.returncode == 0, "message": message, "duration_s": duration}

    async def action(self, action: str, args: dict, speed: float) -> dict[str, Any]:
        if action != "status":
            return await run_action(self.ops, action, args, speed)
        sample = await self.sample()
        look = first_look(sample)
        record(self.ops.directory, "status", {}, True, look)
        return {"ok": True, "message": look.splitlines()[0]}

    async def rollback(self) -> None:
        await asyncio.to_thread(self._chaos, ["halt"])

    def player_actions(self) -> list[dict[str, Any]]:
        return moves_since(self.ops.directory, self.started_at)
