"""The scenario runner's two labs: the local one (samples from /status, faults through the
holders' /faults APIs, the requests `stormlab chaos` makes) and the compose stack (samples from
/status and Prometheus, faults through the chaos container). Both take the players' and the
autopilot's moves through `ops`, and read the players' moves from the responders' journal."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp

from chaos import catalog, client, journal
from stormcore.errors import LabError, UsageError
from stormcore.settings import Pace, parse_duration
from stormlab.engine import observe
from stormlab.engine.compose import DockerStack
from stormlab.engine.reading import Reading
from stormlab.responder.runbook import Ops


def scaled(args: dict[str, Any], speed: float) -> dict[str, Any]:
    """A step's arguments with every duration divided by ``speed`` (in seconds)."""
    timed, pace = catalog.timed_keys(), Pace(speed)
    return {k: pace.wall(parse_duration(v)) if k in timed else v for k, v in args.items()}


class _Lab:
    ops: Ops
    started_at: float  # when t = 0 was: the wall clock (for people) and the monotonic clock (for order)
    started_mono: float

    async def action(self, action: str, args: dict[str, Any], speed: float) -> dict[str, Any]:
        """A scenario's action through `ops`, its times divided by ``speed``."""
        kwargs = scaled(args, speed)
        if action == "set-capacity" and "timeout" not in kwargs:
            kwargs["timeout"] = Pace(speed).wall(2.0)
        entry = await self.ops.run(action, kwargs)
        lines = entry["message"].splitlines()
        if action == "status":  # the diagnosis, not the whole screen
            lines = [line for line in lines if line.startswith("diagnosis:")] or lines[-1:]
        return {"ok": entry["ok"], "message": "\n".join(lines)}

    def dashboards(self) -> list[dict[str, str]]:
        """The lab's dashboards a player can open (title, url): a local lab has none (its players'
        console charts what they watch); a compose stack its Grafana's and Prometheus's."""
        return []

    def player_actions(self) -> list[dict[str, Any]]:
        """The moves made since the run started (the desk's journal in a game), on its timeline."""
        return journal.timeline(self.ops.journal.entries(self.started_mono), self.started_mono, self.started_at)


class LocalLab(_Lab):
    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state
        self.ops = Ops(state)
        self.started_at, self.started_mono = time.time(), time.monotonic()
        self.session: aiohttp.ClientSession | None = None

    async def sample(self) -> Reading:
        if self.session is None:
            self.session = aiohttp.ClientSession()
        return await observe.snapshot(self.session, self.state)

    async def fault(self, fault: str, args: dict[str, Any], speed: float) -> dict[str, Any]:
        values = scaled(args, speed)
        try:
            lease, req = await asyncio.to_thread(client.apply, self.state, fault, values, self.ops.token)
        except (UsageError, LabError) as exc:
            return {"ok": False, "message": str(exc)}
        ref = {"holder": req.fault.holder, "id": lease.get("id"), "fault": fault}
        return {"ok": True, "duration_s": req.body["duration_s"], "message": client.describe(lease, req), "lease": ref}

    def effects(self) -> HolderEffects:
        """What the run's leases did, from their holders' recently ended leases (after the rollback)."""
        ended: dict[tuple[str, Any], dict[str, Any]] = {}
        for who, url in client.holders(self.state).items():
            try:
                book = client.call("GET", f"{url}/faults", self.ops.token)
            except (UsageError, LabError, TimeoutError):
                continue  # a holder that is gone forgot its leases: their effect stays unknown
            ended |= {(who, e.get("id")): e for e in book.get("ended", []) if isinstance(e, dict)}
        return HolderEffects(ended)

    async def rollback(self) -> None:
        for url in client.holders(self.state).values():
            try:
                await asyncio.to_thread(client.call, "DELETE", f"{url}/faults", self.ops.token)
            except (UsageError, LabError, OSError):
                pass  # a holder that is gone holds nothing; the others still get halted
        if self.session is not None:
            await self.session.close()
            self.session = None


class DockerLab(_Lab):
    def __init__(self, directory: Path, promql: set[str] | frozenset[str] = frozenset()) -> None:
        self.stack = DockerStack(directory)
        self.ops = Ops(self.stack.state, docker=self.stack)
        self.started_at, self.started_mono = time.time(), time.monotonic()
        self.promql = sorted(promql)  # the scenario's promql probes, asked of Prometheus each sample

    def dashboards(self) -> list[dict[str, str]]:
        return self.stack.dashboards()

    async def sample(self) -> Reading:
        snap = await self.stack.sample()
        if self.promql:
            snap = snap.but(promql={expr: await asyncio.to_thread(self.stack.scalar, expr) for expr in self.promql})
        return snap

    async def fault(self, fault: str, args: dict[str, Any], speed: float) -> dict[str, Any]:
        values = scaled(args, speed)
        try:
            req = catalog.request(fault, values, client.racks_total(self.stack.state))
        except UsageError as exc:
            return {"ok": False, "message": str(exc)}
        applied_at = time.time()
        done = await asyncio.to_thread(self.stack.chaos, [fault, *argv(req.fault, values)])
        said = (done.stdout.strip() or done.stderr.strip()).splitlines()
        return {
            "ok": done.returncode == 0,
            "message": said[-1] if said else f"exit {done.returncode}",
            "duration_s": req.body["duration_s"],
            "lease": {"holder": "containers", "fault": fault, "applied_at": applied_at, "duration_s": req.body["duration_s"]},
        }

    async def rollback(self) -> None:
        await asyncio.to_thread(self.stack.chaos, ["halt"])

    def effects(self) -> ShellEffects:
        """What the run's network faults did, from the fault shells that ended in the containers."""
        done = self.stack.chaos(["list", "--json"])
        try:
            shells = json.loads(done.stdout).get("shells", [])
        except ValueError:
            shells = []
        return ShellEffects([s for s in shells if isinstance(s, dict) and s.get("state") == "ended"])


class HolderEffects:
    """The local lab's holders' recently ended leases, by holder and lease id."""

    def __init__(self, ended: dict[tuple[str, Any], dict[str, Any]]) -> None:
        self.ended = ended

    def effect_of(self, lease: dict[str, Any]) -> dict[str, Any] | None:
        found = self.ended.get((lease.get("holder", ""), lease.get("id")))
        return None if found is None else {"effect": found.get("effect"), "no_effect": bool(found.get("no_effect"))}


class ShellEffects:
    """The fault shells that ended in the stack's containers: a lease's are those of its fault that
    ended within its window (from when it was applied to its end, and a little after)."""

    def __init__(self, ended: list[dict[str, Any]]) -> None:
        self.ended = ended

    def effect_of(self, lease: dict[str, Any], slack_s: float = 30.0) -> dict[str, Any] | None:
        start = lease.get("applied_at", 0.0)
        end = start + lease.get("duration_s", 0.0) + slack_s
        mine = [s for s in self.ended if s.get("fault") == lease.get("fault") and start <= s.get("at", 0.0) <= end]
        counted = [s["effect"] for s in mine if s.get("effect") is not None]
        if not counted:
            return None
        total: dict[str, int] = {}
        for effect in counted:
            for key, n in effect.items():
                total[key] = total.get(key, 0) + n
        return {"effect": total, "no_effect": not any(total.values())}


def argv(fault: catalog.Fault, values: dict[str, Any]) -> list[str]:
    """A fault's values as `stormlab chaos FAULT` flags (durations in seconds)."""
    out: list[str] = []
    for arg in fault.args:
        value = values.get(arg.key)
        if value is None:
            continue
        if arg.kind == catalog.FLAG:
            out += [arg.flag] if arg.parse(value) else []
        else:
            out += [arg.flag, f"{value:g}s" if isinstance(value, float) and arg.kind == catalog.DURATION else str(value)]
    return out
