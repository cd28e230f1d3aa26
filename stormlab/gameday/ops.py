"""`stormlab ops …`: the operator runbook of 2015, for the players (and the autopilot).

  status              what a responder looks at first: errors, who is disqualified, the margin
  set-capacity CORES  set the metadata service's virtual cores, through the shared admin path
                      (times out in a storm, as in 2015) or --break-glass around it
  pause-metadata      stop taking membership requests (AWS, 5:06 AM)
  resume              readmit the fleet, all at once or --staged N --every S
  enable FIX          switch on a fix AWS announced, in its running service: stale-cache
                      (queues), write-through (metrics), prune-activities (scaling),
                      short-timeout (console)
  scale-workers N     drain the scaling backlog with N workers
  deploy              deploy --retry-policy, --allowance or --renewal-period to the running
                      fleet, rack by rack with --staged N --every S (the local lab)
  ack [ALERT]         acknowledge your role's page
  post-status --severity S TEXT
                      post to the status page customers read (name the tables that fail)
  note TEXT           mark the timeline

A team plays with `--as ROLE`: database, queues, scaling, metrics or console. Each role makes
its own service's moves (another role's are refused, exit 2) and everyone's (status, note, ack,
post-status); the game day scores each role's moves and pages. While a team's game day is on, a
role is an identity: every move goes through the runner's desk with the role's token (the
organiser's runner prints them; STORMLAB_ROLE_TOKEN, or the role's file on the organiser's
machine), and a move with no role or an unknown token is refused (exit 2).

Each move is a lease held by the service it changes (chaos/catalog.py, as the faults are): it
ends by itself, and its help says when and what the end does. Every command goes into the
responders' journal (ops-journal.jsonl in the state directory; in a game, the desk's): the
game day marks the players' moves from it and scores them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp

from chaos import catalog, client
from chaos.flags import add_backend, add_fault_args
from chaos.journal import Journal
from stormcore.auth import ensure_token
from stormcore.documents import whole
from stormcore.errors import LabError, UsageError
from stormcore.fleet import cell_name
from stormcore.labstate import backend, running, state_dir
from stormcore.settings import max_duration_s
from stormlab.engine import observe
from stormlab.engine.compose import DockerStack
from stormlab.gameday import alerts, desk, roles
from stormlab.gameday.moves import ACTIONS, EVERYONE, ROLES, SEVERITIES, Action, check_role, fault_of, move_values

STORM_FRACTION = alerts.BY_NAME["RetryStorm"].terms[0].value  # RetryStorm's line (CellRetryStorm's too): nodes disqualified


def first_look(snap: dict[str, Any]) -> str:
    """The responder's first lines: is it the storm, where (with cells: which cell), and how close
    is the margin."""
    p99, allowance = snap.get("metadata_processing_p99_s"), snap.get("allowance_s")
    margin = f"{p99 / allowance:.0%} of the allowance" if p99 is not None and allowance else "n/a"
    total = snap.get("nodes_total") or 0
    disq = snap.get("nodes_disqualified") or 0
    worst = sorted(((v or 0.0, t) for t, v in snap.get("table_error_ratio", {}).items()), reverse=True)[:3]
    cells = {c: f for c, f in (snap.get("cell_disqualified_fraction") or {}).items() if f is not None}
    storming = sorted((c for c, f in cells.items() if f > STORM_FRACTION), key=int) if len(cells) > 1 else []
    flag = f" --cell {storming[0]}" if len(storming) == 1 else ""
    runbook = f"Runbook: pause-metadata{flag}, set-capacity{flag}, resume{flag} --staged"
    named = ("cells " if len(storming) > 1 else "cell ") + ", ".join(storming)
    where = f" in {named}" if storming and len(storming) < len(cells) else ""
    diagnosis = (
        f"STORM{where}: renewals are timing out and nodes disqualify themselves; retries keep the metadata service overloaded. {runbook}"
        if (total and disq / total > STORM_FRACTION) or storming
        else "margin is thin: big memberships take most of the allowance"
        if p99 and allowance and p99 / allowance > 0.6
        else "no storm"
    )
    by_cell = (
        [f"cells:      disqualified {', '.join(f'cell {c} {cells[c]:.0%}' for c in sorted(cells, key=int))}"] if len(cells) > 1 else []
    )
    return "\n".join(
        [
            f"diagnosis:  {diagnosis}",
            f"margin:     membership processing p99 is {margin} (sizes {snap.get('membership_sizes', {})})"
            + (" (cell 0's service)" if len(cells) > 1 else ""),
            f"fleet:      {disq} of {total} nodes disqualified",
            *by_cell,
            f"tables:     worst {', '.join(f'{t} {v:.1%}' for v, t in worst) or 'n/a'}",
        ]
    )


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
            answer = await asyncio.to_thread(client.call, "DELETE", f"{url}/faults?fault={spec.ends}", self.token)
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

    async def reading(self) -> dict[str, Any]:
        """One reading of the lab (the shape `stormlab status --json` prints)."""
        if self.docker is not None:
            return await self.docker.sample()
        async with aiohttp.ClientSession() as session:
            snap = await observe.snapshot(session, self.state)
        snap.pop("racks", None)
        return snap

    async def status(self) -> str:
        snap = await self.reading()
        return first_look(snap) if self.docker is not None else observe.render(snap) + "\n" + first_look(snap)


def add_parser(sub: argparse._SubParsersAction) -> None:
    ops = sub.add_parser(
        "ops",
        help="the operator runbook: status, set-capacity, pause-metadata, resume, note",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_backend(ops)  # an engine's processes are reached by their URLs (STORMLAB_<NAME>_URL) or published ports
    ops.add_argument(
        "--as",
        dest="role",
        choices=tuple(ROLES),
        default=os.environ.get("STORMLAB_ROLE") or None,
        help="your on-call role in a team's game day (default: STORMLAB_ROLE): " + "; ".join(f"{r}: {h}" for r, h in ROLES.items()),
    )
    actions = ops.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action in ACTIONS.values():
        # the fixes' leases take the same arguments and end the same way: the first stands for all
        fault = catalog.FAULTS[action.fault or action.fixes[0]] if action.fault or action.fixes else None
        description = action.help + (
            f".\nIt is a lease: it ends by itself after --duration (default {max_duration_s():g}s), and then {fault.reverts}."
            if fault and "duration" in action.keys
            else f".\n{fault.reverts}."
            if fault
            else "."
        )
        if action.fixes:
            description = (
                f"{action.help}.\nIt is a lease: it ends by itself after --duration (default {max_duration_s():g}s), and then the "
                "fix is off again (unless the service started with it: --set fix_…=on)."
            )
        p = actions.add_parser(action.name, help=action.help, description=description)
        if action.fixes:
            p.add_argument(
                "fix",
                choices=action.fixes,
                help="; ".join(f"{f}: {catalog.FAULTS[f].help} ({catalog.FAULTS[f].holder})" for f in action.fixes),
            )
        if fault:  # the lease's arguments, as the catalog names them (the move fills in a missing duration)
            add_fault_args(p, fault, action.keys, positional=("cores", "workers"), required=False)
        if action.name == "status":
            p.add_argument("--json", action="store_true", help="one JSON document: the reading and the first look's lines")
        if action.ends:
            holder = catalog.FAULTS[action.ends].holder
            p.description = f"{action.help}.\nIt ends the {action.ends} leases its {holder} service holds now, each reverted."
            p.add_argument("--cell", type=int, help="the cell whose metadata service holds them (default: the first)")
        if action.name == "note":
            p.add_argument("text", nargs="+")
        if action.name == "ack":
            p.add_argument("alert", nargs="?", help="the alert to acknowledge (default: your role's newest page)")
        if action.name == "post-status":
            p.add_argument("--severity", required=True, choices=SEVERITIES, help="how bad it is for customers")
            p.add_argument("text", nargs="+", help="what customers read: what fails, for whom (name the tables), what you do")
    ops.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = ACTIONS[args.action]
    kwargs: dict[str, Any] = {k: getattr(args, k, None) for k in spec.keys}
    if args.action == "note":
        kwargs = {"text": " ".join(args.text)}
    elif args.action == "ack":
        kwargs = {"alert": args.alert}
    elif args.action == "post-status":
        kwargs = {"severity": args.severity, "text": " ".join(args.text)}
    game = roles.current(state_dir())
    if game is not None:  # a team's game day is on: the move goes through its desk, as the role's token says
        return through_desk(game, args, kwargs)
    if backend(args.backend) in ("docker", "k8s"):  # an engine: its processes reached by their URLs
        stack = DockerStack(state_dir())
        ops = Ops(stack.state, docker=stack)
    else:
        state = running()
        if not state:
            raise LabError(
                "no lab is up: start one with `stormlab up` or `stormlab scenario run` (or --backend docker for the compose stack)"
            )
        ops = Ops(state)
    if args.action == "status" and args.json:
        snap = asyncio.run(ops.reading())
        look = first_look(snap)
        ops.journal.record("status", {}, True, look, role=args.role)
        print(json.dumps(snap | {"first_look": look.splitlines()}, indent=1))
        return 0
    entry = asyncio.run(ops.run(args.action, kwargs, args.role))
    print(entry["message"])
    if not entry["ok"]:
        raise entry["error"]
    return 0


def through_desk(game: dict[str, Any], args: argparse.Namespace, kwargs: dict[str, Any]) -> int:
    """A player's move in a team's game day: made by the desk as the role the token proves."""
    answer = roles.move(game, args.role, state_dir(), args.action, kwargs)
    if args.action == "status" and args.json:  # the look is journaled by the desk; the reading is read here
        stack = DockerStack(state_dir()) if backend(args.backend) in ("docker", "k8s") else None
        state = stack.state if stack else running()
        if state is None:
            raise LabError("no lab is up to read")
        snap = asyncio.run(Ops(state, docker=stack).reading())
        print(json.dumps(snap | {"first_look": first_look(snap).splitlines()}, indent=1))
        return 0
    print(answer["message"])
    return 0 if answer["ok"] else int(answer.get("exit_code") or 1)
