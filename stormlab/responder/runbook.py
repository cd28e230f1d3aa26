"""The operator runbook of 2015, for the players (and the autopilot): what a responder looks at
first (`first_look`) and the moves on a running lab (`Ops`), each a lease held by the service it
changes (chaos/catalog.py), journaled for the game day to score. `stormlab ops` is its command
(stormlab/responder/cli.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp

from chaos import catalog, client
from chaos.journal import Journal
from stormcore.auth import ensure_token
from stormcore.documents import whole
from stormcore.errors import LabError, UsageError
from stormcore.fleet import cell_name
from stormcore.labstate import state_dir
from stormlab.engine import observe
from stormlab.engine.compose import DockerStack
from stormlab.engine.reading import THIN_MARGIN, Reading
from stormlab.responder import alerts, desk
from stormlab.responder.moves import ACTIONS, EVERYONE, SEVERITIES, Action, check_role, fault_of, move_values

STORM_FRACTION = alerts.BY_NAME["RetryStorm"].terms[0].value  # RetryStorm's line (CellRetryStorm's too): nodes disqualified


def first_look(snap: Reading) -> str:
    """The responder's first lines: is it the storm, where (with cells: which cell), and how close
    is the margin."""
    margin = f"{snap.margin:.0%} of the allowance" if snap.margin is not None else "n/a"
    total, disq = snap.nodes_total, snap.nodes_disqualified
    worst = sorted(((v or 0.0, t) for t, v in snap.table_error_ratio.items()), reverse=True)[:3]
    cells = {c: f for c, f in snap.cell_disqualified_fraction.items() if f is not None}
    storming = sorted((c for c, f in cells.items() if f > STORM_FRACTION), key=int) if len(cells) > 1 else []
    flag = f" --cell {storming[0]}" if len(storming) == 1 else ""
    runbook = f"Runbook: pause-metadata{flag}, set-capacity{flag}, resume{flag} --staged"
    named = ("cells " if len(storming) > 1 else "cell ") + ", ".join(storming)
    where = f" in {named}" if storming and len(storming) < len(cells) else ""
    diagnosis = lease_diagnosis(snap) or (
        f"STORM{where}: renewals are timing out and nodes disqualify themselves; retries keep the metadata service overloaded. {runbook}"
        if (total and disq / total > STORM_FRACTION) or storming
        else "margin is thin: big memberships take most of the allowance"
        if snap.margin is not None and snap.margin > THIN_MARGIN
        else "no storm"
    )
    by_cell = (
        [f"cells:      disqualified {', '.join(f'cell {c} {cells[c]:.0%}' for c in sorted(cells, key=int))}"] if len(cells) > 1 else []
    )
    return "\n".join(
        [
            f"diagnosis:  {diagnosis}",
            f"margin:     membership processing p99 is {margin} (sizes {dict(snap.membership_sizes)})"
            + (" (cell 0's service)" if len(cells) > 1 else ""),
            f"fleet:      {disq} of {total} nodes disqualified",
            *by_cell,
            f"tables:     worst {', '.join(f'{t} {v:.1%}' for v, t in worst) or 'n/a'}",
        ]
    )


def lease_diagnosis(snap: Reading) -> str | None:
    """The lease manager's story (aws-2025-10), when launches fail: the endpoint, or the collapse."""
    failing = snap.launch_error_ratio
    if failing is None or failing < 0.5:
        return None
    if snap.lease_endpoint == "empty":
        return (
            f"LAUNCHES FAILING ({failing:.0%}): the database's endpoint does not resolve, so the lease manager's checks "
            "fail and its leases lapse. Runbook: repair-endpoint"
        )
    if (snap.leases_established_per_s or 0.0) < 1 and (snap.lease_timed_out_per_s or 0.0) > 0:
        return (
            f"CONGESTIVE COLLAPSE ({failing:.0%} of launches failing): the lease manager re-establishes every lease at once, "
            "each item times out before it is done and is queued again. Runbook: throttle RATE, then restart-host N (each host)"
        )
    return f"LAUNCHES FAILING ({failing:.0%}): leases are coming back ({snap.leases_active} of {snap.lease_droplets})"


class Ops:
    """The runbook against a lab (``state``: the local lab's, or the compose stack's). Its moves go
    into ``journal`` and its acks answer ``unacked``'s pages: the lab's files, or a game's desk."""

    def __init__(
        self,
        state: dict[str, Any],
        directory: Path | None = None,
        docker: DockerStack | None = None,
        journal: Journal | None = None,
        unacked: Callable[[str | None], list[dict[str, Any]]] | None = None,
    ) -> None:
        self.state = state
        self.directory = Path(state.get("directory") or directory or state_dir())
        self.token = ensure_token(self.directory)
        self.docker = docker
        self.journal = journal or Journal(self.directory)
        self.unacked = unacked or partial(desk.unacked, self.directory)

    async def run(self, action: str, args: dict[str, Any], role: str | None = None) -> dict[str, Any]:
        """Make one move as ``role`` (None: no role named); returns what the journal holds of it
        (``ok``, ``message``), and for a move that failed, the ``error`` that says why."""
        if action not in ACTIONS:
            raise catalog.ChaosError(f"unknown action {action!r}; known: {', '.join(ACTIONS)}")
        spec = ACTIONS[action]
        try:
            check_role(role, spec, args)
            fault = fault_of(spec, args)
        except UsageError as exc:
            return {"ok": False, "message": str(exc), "error": exc}
        if action in EVERYONE:
            return await self.everyone(action, args, role)
        if spec.ends:
            return await self.end_leases(spec, args, role)
        assert fault is not None, "every move but everyone's and the repairs takes a lease"
        try:
            values = move_values(spec, args)
        except UsageError as exc:
            return self.journal.record(action, args, False, str(exc), fault=fault, role=role) | {"error": exc}
        try:  # built, sent and journaled on the one path `stormlab chaos` takes too
            lease, req = await asyncio.to_thread(
                client.apply, self.state, fault, values, self.token, journal=self.journal, via="ops", action=action, role=role
            )
        except (UsageError, LabError) as exc:
            return {"ok": False, "message": str(exc), "error": exc, "at": time.time()}  # journaled by the client
        return {"ok": True, "message": client.describe(lease, req), "at": time.time()}

    async def end_leases(self, spec: Action, args: dict[str, Any], role: str | None) -> dict[str, Any]:
        """A repair: the leases of ``spec.ends`` ended now by their holder (each reverted), journaled
        as the move; one that finds nothing to end is a failed move."""
        assert spec.ends is not None, "only a repair ends leases"
        unknown = sorted(set(args) - set(spec.keys))
        cell = args.get("cell")
        cell = cell if cell is None else whole(cell)  # 2.0 is cell 2, as JSON Schema's integer has it
        if unknown or (args.get("cell") is not None and cell is None):
            exc = UsageError(f"{spec.name} takes only --cell, a cell's number")
            return {"ok": False, "message": str(exc), "error": exc}
        holder = catalog.FAULTS[spec.ends].holder
        url = client.holders(self.state).get(cell_name(cell) if cell is not None else holder)
        given = {k: v for k, v in (args | {"cell": cell}).items() if v is not None}
        try:
            if url is None:
                raise catalog.ChaosError(f"{spec.name}: this lab has no {holder if cell is None else f'cell {cell}'}")
            answer = await asyncio.to_thread(client.ask_holder, "DELETE", f"{url}/faults?fault={spec.ends}", self.token)
        except (UsageError, LabError) as exc:
            return self.journal.record(spec.name, given, False, str(exc), role=role) | {"error": exc}
        ended = int(answer.get("halted", 0))
        if not ended:
            nothing = UsageError(f"{spec.name}: no {spec.ends} holds now, nothing to restore")
            return self.journal.record(spec.name, given, False, str(nothing), role=role) | {"error": nothing}
        return self.journal.record(spec.name, given, True, f"{spec.name}: {ended} {spec.ends} lease(s) ended, reverted", role=role)

    async def everyone(self, action: str, args: dict[str, Any], role: str | None) -> dict[str, Any]:
        """The moves no role owns: look, note, acknowledge a page, post to the status page."""
        if action == "status":  # a role's look also says what waits for its ack: its pages, its injects
            waiting = "".join(f"\nwaiting for your ack: {p['alert']}: {p['summary']}" for p in (self.unacked(role) if role else []))
            return self.journal.record(action, args, True, await self.status() + waiting, role=role)
        if action == "note":
            return self.journal.record(action, args, True, str(args.get("text", "")).strip() or "(empty note)", role=role)
        if action == "ack":
            return self.ack(args.get("alert"), role)
        severity, text = args.get("severity"), str(args.get("text") or "").strip()
        if severity not in SEVERITIES or not text:
            exc = UsageError(f"post-status needs --severity ({', '.join(SEVERITIES)}) and the text customers read")
            return {"ok": False, "message": str(exc), "error": exc}
        return self.journal.record(action, {"severity": severity, "text": text}, True, f"posted ({severity}): {text}", role=role)

    def ack(self, alert: str | None, role: str | None) -> dict[str, Any]:
        """Acknowledges ``role``'s newest page (of ``alert``), as ``role``: an ack is credited to
        the role that made it, never to the role that was paged."""
        waiting = [p for p in self.unacked(role) if alert is None or p["alert"] == alert]
        if not waiting:
            whose = f"{role}'s" if role else "any role's"
            exc = UsageError(f"no page of {alert or 'any alert'} waits for {whose} ack (pages arrive during a game day)")
            return {"ok": False, "message": str(exc), "error": exc}
        page = waiting[-1]
        age = max(0.0, self.journal.mono() - page["mono"]) if "mono" in page else max(0.0, time.time() - page["at"])
        message = f"acknowledged {page['alert']} (paged {age:.0f}s ago): {page['summary']}"
        return self.journal.record("ack", {"alert": page["alert"]}, True, message, role=role)

    async def reading(self) -> Reading:
        """One reading of the lab (what `stormlab status --json` prints)."""
        if self.docker is not None:
            return await self.docker.sample()
        async with aiohttp.ClientSession() as session:
            return await observe.snapshot(session, self.state)

    async def status(self) -> str:
        snap = await self.reading()
        return first_look(snap) if self.docker is not None else observe.render(snap) + "\n" + first_look(snap)
