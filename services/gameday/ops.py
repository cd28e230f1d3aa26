"""`stormlab ops …`: the operator runbook of 2015, for the players (and the autopilot).

  status          what a responder looks at first: errors, who is disqualified, the margin
  add-capacity N  metadata cores, through the shared admin path (times out in a storm, as in
                  2015) or --break-glass around it
  pause-metadata  stop taking membership requests (AWS, 5:06 AM)
  resume          readmit the fleet, all at once or --staged N --every S
  note TEXT       mark the timeline

Every command is written to the lab's ops journal (ops-journal.jsonl in the state directory):
a running scenario reads it to mark the players' moves and to score them.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import aiohttp

from chaos.cli import ChaosError, call
from chaos.lease import max_duration_s
from services import observe
from services.common.auth import ensure_token
from services.common.settings import SettingsError, parse_duration
from services.gameday.chaos_args import fault_request
from services.launcher import LabError, running, state_dir

JOURNAL = "ops-journal.jsonl"
ACTIONS = ("status", "add-capacity", "pause-metadata", "resume", "note")


def journal_path(directory: Path | None = None) -> Path:
    return (directory or state_dir()) / JOURNAL


def record(directory: Path, action: str, args: dict, ok: bool, message: str) -> dict:
    entry = {"at": time.time(), "action": action, "args": args, "ok": ok, "message": message}
    path = journal_path(directory)
    path.parent.mkdir(parents=True, exist_ok=True)  # the compose stack's players may have no state dir yet
    with path.open("a") as f:
        f.write(json.dumps(entry) + "\n")
    return entry


def read_journal(directory: Path, since: float = 0.0) -> list[dict]:
    path = journal_path(directory)
    if not path.exists():
        return []
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in entries if e["at"] >= since]


def moves_since(directory: Path, started_at: float) -> list[dict]:
    """The journal's entries since a run started, each with ``t`` in seconds since then."""
    return [{**e, "t": round(e["at"] - started_at, 3)} for e in read_journal(directory, started_at)]


def first_look(snap: dict) -> str:
    """The responder's first lines: is it the storm, and how close is the margin."""
    p99, allowance = snap.get("metadata_processing_p99_s"), snap.get("allowance_s")
    margin = f"{p99 / allowance:.0%} of the allowance" if p99 is not None and allowance else "n/a"
    total = snap.get("nodes_total") or 0
    disq = snap.get("nodes_disqualified") or 0
    worst = sorted(((v or 0.0, t) for t, v in snap.get("table_error_ratio", {}).items()), reverse=True)[:3]
    diagnosis = ("STORM: renewals are timing out and nodes disqualify themselves; retries keep the metadata "
                 "service overloaded. Runbook: pause-metadata, add-capacity, resume --staged"
                 if total and disq / total > 0.1 else
                 "margin is thin: big memberships take most of the allowance" if p99 and allowance and p99 / allowance > 0.6
                 else "no storm")
    return "\n".join([
        f"diagnosis:  {diagnosis}",
        f"margin:     membership processing p99 is {margin} (sizes {snap.get('membership_sizes', {})})",
        f"fleet:      {disq} of {total} nodes disqualified",
        f"tables:     worst {', '.join(f'{t} {v:.1%}' for v, t in worst) or 'n/a'}",
    ])


class Ops:
    """The runbook against the local lab (``state``), usable from async code."""

    def __init__(self, state: dict, directory: Path | None = None) -> None:
        self.state = state
        self.directory = Path(state.get("directory") or directory or state_dir())
        self.token = ensure_token(self.directory)
        self.metadata = state["components"]["metadata"]["url"]

    async def run(self, action: str, args: dict[str, Any]) -> dict:
        try:
            ok, message = await getattr(self, action.replace("-", "_"))(**args)
        except (ChaosError, LabError, SettingsError, ValueError) as exc:
            ok, message = False, str(exc)
        return record(self.directory, action, args, ok, message)

    async def lease(self, fault: str, args: dict[str, Any], timeout: float = 5.0) -> dict:
        """The move as the metadata service's fault lease, checked by the chaos CLI's own rules."""
        url, body = fault_request(fault, args, self.state)
        return await asyncio.to_thread(call, "POST", f"{url}/faults", self.token, body, timeout)

    async def status(self) -> tuple[bool, str]:
        async with aiohttp.ClientSession() as session:
            snap = await observe.snapshot(session, self.state)
        return True, observe.render(snap) + "\n" + first_look(snap)

    async def add_capacity(self, cores: float, break_glass: bool = False, timeout: float = 2.0,
                           duration: float | None = None) -> tuple[bool, str]:
        cores = float(cores)
        args = {"cores": cores, "break_glass": bool(break_glass), "duration": f"{duration or max_duration_s():g}s"}
        try:
            await self.lease("capacity", args, timeout=float(timeout))
        except TimeoutError:
            return False, (f"timed out after {float(timeout):g}s: the admin request waits behind the storm on the "
                           "metadata service's own CPU (as in 2015). Nothing changed. Pause first, or --break-glass.")
        return True, f"metadata service now has {cores:g} cores{' (break glass)' if break_glass else ''}"

    async def pause_metadata(self, duration: float | None = None) -> tuple[bool, str]:
        await self.lease("pause-metadata", {"duration": f"{duration or max_duration_s():g}s"})
        return True, "membership requests paused: renewals are turned away at the door"

    async def resume(self, staged: int = 1, every: float = 0.0) -> tuple[bool, str]:
        staged, every = int(staged), float(every)
        await self.lease("resume-metadata", {"staged": staged, **({"every": f"{every:g}s"} if every else {})})
        return True, "readmitting everyone at once" if staged == 1 else f"readmitting in {staged} steps every {every:g}s"

    async def note(self, text: str) -> tuple[bool, str]:
        return True, str(text)


def add_parser(sub: argparse._SubParsersAction) -> None:
    ops = sub.add_parser("ops", help="the operator runbook: status, add-capacity, pause-metadata, resume, note",
                         description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ops.add_argument("--backend", choices=("local", "docker"),
                     help="the local lab or the compose stack on this host (default: STORMLAB_BACKEND, else local)")
    actions = ops.add_subparsers(dest="action", required=True)
    actions.add_parser("status", help="what a responder looks at first")
    p = actions.add_parser("add-capacity", help="set the metadata service's virtual cores")
    p.add_argument("cores", type=float, help="virtual cores (the profile has 40)")
    p.add_argument("--break-glass", action="store_true", help="go around the shared admin path")
    p.add_argument("--timeout", default="2s", help="how long the admin request may take (default 2s)")
    actions.add_parser("pause-metadata", help="stop taking membership requests (AWS, 5:06 AM)")
    p = actions.add_parser("resume", help="readmit the fleet")
    p.add_argument("--staged", type=int, default=1, help="in this many steps (default 1: all at once)")
    p.add_argument("--every", default="0s", help="time between steps, e.g. 10s")
    p = actions.add_parser("note", help="mark the timeline")
    p.add_argument("text", nargs="+")


def run(args: argparse.Namespace) -> int:
    kwargs: dict[str, Any] = {}
    if args.action == "add-capacity":
        kwargs = {"cores": args.cores, "break_glass": args.break_glass, "timeout": parse_duration(args.timeout)}
    elif args.action == "resume":
        kwargs = {"staged": args.staged, "every": parse_duration(args.every)}
    elif args.action == "note":
        kwargs = {"text": " ".join(args.text)}
    if (args.backend or os.environ.get("STORMLAB_BACKEND", "local")) == "docker":
        from services.gameday.docker_lab import DockerLab  # noqa: PLC0415

        lab = DockerLab(state_dir())
        if args.action == "status":
            look = first_look(asyncio.run(lab.sample()))
            print(look)
            record(lab.ops.directory, "status", {}, True, look)
            return 0
        entry = asyncio.run(lab.ops.run(args.action, kwargs))
    else:
        state = running()
        if not state:
            raise LabError("no lab is up: start one with `stormlab up` or `stormlab scenario run` "
                           "(or --backend docker for the compose stack)")
        entry = asyncio.run(Ops(state).run(args.action, kwargs))
    print(entry["message"])
    if not entry["ok"]:
        raise LabError(entry["message"]) if "timed out" in entry["message"] else ChaosError(entry["message"])
    return 0
