"""The scenario runner's view of the local lab: samples from /status, faults through the
holders' /faults APIs (the same requests `stormlab chaos` makes), actions through `ops`."""
from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from chaos import cli as chaos_cli
from services import observe
from services.common.settings import parse_duration
from services.gameday.chaos_args import TIMED, fault_request
from services.gameday.ops import Ops, moves_since

KEPT = ("customer_error_ratio", "table_error_ratio", "nodes_total", "nodes_serving", "nodes_disqualified",
        "metadata_inflight", "metadata_cores", "metadata_paused", "metadata_processing_p99_s", "allowance_s",
        "renewal_p99_s", "renewal_attempts_total", "loop_lag_p99_s", "membership_sizes")


async def run_action(ops: Ops, action: str, args: dict, speed: float) -> dict[str, Any]:
    """A scenario's action through `ops`, its times divided by ``speed``."""
    kwargs: dict[str, Any] = {}
    for key, value in args.items():
        if key in TIMED:
            kwargs[key] = parse_duration(value) / speed
        elif key == "break_glass":
            kwargs[key] = str(value).lower() in ("true", "yes", "on", "1")
        else:
            kwargs[key] = value
    if action == "add-capacity" and "timeout" not in kwargs:
        kwargs["timeout"] = 2.0 / speed
    entry = await ops.run(action, kwargs)
    lines = entry["message"].splitlines()
    if action == "status":  # the diagnosis, not the whole screen
        lines = [line for line in lines if line.startswith("diagnosis:")] or lines[-1:]
    return {"ok": entry["ok"], "message": "\n".join(lines)}


class LocalLab:
    def __init__(self, state: dict) -> None:
        self.state = state
        self.ops = Ops(state)
        self.token = self.ops.token
        self.started_at = time.time()
        self.session: aiohttp.ClientSession | None = None

    async def sample(self) -> dict[str, Any]:
        if self.session is None:
            self.session = aiohttp.ClientSession()
        snap = await observe.snapshot(self.session, self.state)
        return {k: snap.get(k) for k in KEPT}

    async def fault(self, fault: str, args: dict, speed: float) -> dict[str, Any]:
        try:
            url, body = fault_request(fault, args, self.state, speed)
            timeout = parse_duration(args.get("timeout", "2s")) / speed if fault == "capacity" else 5.0
            lease = await asyncio.to_thread(chaos_cli.call, "POST", f"{url}/faults", self.token, body, timeout)
        except TimeoutError:
            return {"ok": False, "message": f"{fault} timed out: the metadata service is too loaded to take it"}
        except (ValueError, chaos_cli.ChaosError, chaos_cli.LabError) as exc:
            return {"ok": False, "message": str(exc)}
        return {"ok": True, "duration_s": body["duration_s"],
                "message": f"{lease['fault']} #{lease['id']} on {lease['target']} for {body['duration_s']:g}s"}

    async def action(self, action: str, args: dict, speed: float) -> dict[str, Any]:
        return await run_action(self.ops, action, args, speed)

    async def rollback(self) -> None:
        for url in chaos_cli.holders(self.state).values():
            try:
                await asyncio.to_thread(chaos_cli.call, "DELETE", f"{url}/faults", self.token)
            except (chaos_cli.LabError, OSError):
                pass  # a holder that is gone holds nothing; the others still get halted
        if self.session is not None:
            await self.session.close()
            self.session = None

    def player_actions(self) -> list[dict[str, Any]]:
        return moves_since(self.ops.directory, self.started_at)
