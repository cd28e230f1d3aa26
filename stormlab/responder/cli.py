"""`stormlab ops …`: the operator runbook (stormlab/responder/runbook.py) of 2015, for the players (and the autopilot).

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
from typing import Any

from chaos import catalog
from chaos.flags import add_backend, add_fault_args, cell_number
from stormcore import commandline
from stormcore.errors import LabError
from stormcore.labstate import backend, running, state_dir
from stormcore.settings import max_duration_s
from stormlab.engine.compose import DockerStack
from stormlab.responder import roles
from stormlab.responder.moves import ACTIONS, ROLES, SEVERITIES, Action, fault_of, move_values
from stormlab.responder.runbook import Ops, first_look


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
            add_fault_args(p, fault, action.keys, positional=("cores", "workers", "rate", "host", "limit"), required=False, filled=FILLED)
        if action.name == "status":
            p.add_argument("--json", action="store_true", help="one JSON document: the reading and the first look's lines")
        if action.ends:
            holder = catalog.FAULTS[action.ends].holder
            p.description = f"{action.help}.\nIt ends the {action.ends} leases its {holder} service holds now, each reverted."
            if "cell" in action.keys:
                p.add_argument("--cell", type=cell_number, help="the cell whose metadata service holds them (default 0, the first)")
        if action.name == "note":
            p.add_argument("text", nargs="+")
        if action.name == "ack":
            p.add_argument("alert", nargs="?", help="the alert to acknowledge (default: your role's newest page)")
        if action.name == "post-status":
            p.add_argument("--severity", required=True, choices=SEVERITIES, help="how bad it is for customers")
            p.add_argument("text", nargs="+", help="what customers read: what fails, for whom (name the tables), what you do")
    commandline.anywhere(ops, "--backend", "--as")
    for name, child in actions.choices.items():
        commandline.explain(child, *(f"stormlab ops {line}" for line in EXAMPLES[name]))
        child.description = DESCRIPTIONS.get(name, child.description)
    ops.set_defaults(func=run)


FILLED = {  # what a move fills in when its lease's argument is not given, as its help says
    "duration": f"default {max_duration_s():g}s, the longest lease",
    **dict.fromkeys(("retry_policy", "allowance", "renewal_period"), "default: the running one, unchanged"),
}
EXAMPLES = {  # each as a person types it (a test parses every one)
    "status": ("status", "--as database status --json"),
    "set-capacity": ("set-capacity 80", "set-capacity 80 --break-glass"),
    "pause-metadata": ("pause-metadata --duration 5m",),
    "resume": ("resume", "resume --staged 4 --every 10s"),
    "enable": ("--as queues enable stale-cache",),
    "scale-workers": ("--as scaling scale-workers 8",),
    "deploy": ("deploy --allowance 2s --staged 5 --every 20s", "deploy --retry-policy full-jitter"),
    "restore-partition": ("restore-partition",),
    "throttle": ("--as leases throttle 10", "throttle 10 --duration 5m"),
    "restart-host": ("--as leases restart-host 0",),
    "queue-limit": ("--as leases queue-limit 300",),
    "repair-endpoint": ("--as leases repair-endpoint",),
    "note": ("note blip seen, renewals failing",),
    "ack": ("--as database ack", "--as database ack RetryStorm"),
    "post-status": ("post-status --severity degraded errors on the catalog and clickstream tables",),
}


DESCRIPTIONS = {
    "status": "What a responder looks at first: the customers' error rate, how many nodes are disqualified and serving, the "
    "metadata service's load and margin, each table's errors, and the first look's lines (what 2015's on-call would have "
    "read). Journaled as a look; a game day scores when each role first looked.",
    "note": "Mark the timeline with a line of text: it goes into the responders' journal (in a game, the desk's) and onto the "
    "report's timeline beside the moves and the pages.",
    "ack": "Acknowledge your role's page (the newest, or the one named): the game day scores the time from the page to its "
    "ack, as an on-call rotation would.",
    "post-status": "Post to the status page the customers read: how bad it is and what fails for whom. A game day scores "
    "whether and when it came, and whether it names the tables whose customers fail.",
}


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
            check_offline(spec, kwargs)  # bad input is told as such (exit 2), not hidden behind "no lab is up" (exit 1)
            raise LabError(
                "no lab is up: start one with `stormlab up` or `stormlab scenario run` (or --backend docker for the compose stack)"
            )
        ops = Ops(state)
    if args.action == "status" and args.json:
        snap = asyncio.run(ops.reading())
        look = first_look(snap)
        ops.journal.record("status", {}, True, look, role=args.role)
        print(json.dumps(snap.to_json() | {"first_look": look.splitlines()}, indent=1))
        return 0
    entry = asyncio.run(ops.run(args.action, kwargs, args.role))
    commandline.tell(move={k: v for k, v in entry.items() if k != "error"})
    print(entry["message"])
    if not entry["ok"]:
        raise entry["error"]
    return 0


def check_offline(spec: Action, kwargs: dict[str, Any]) -> None:
    """A move's arguments read as the catalog reads them, where no lab is up to judge them. With a lab
    up, the move is made (a bad one journaled as a failed move, as the game day scores it)."""
    fault = fault_of(spec, kwargs)
    if fault is not None:
        catalog.request(fault, move_values(spec, kwargs))


def through_desk(game: dict[str, Any], args: argparse.Namespace, kwargs: dict[str, Any]) -> int:
    """A player's move in a team's game day: made by the desk as the role the token proves."""
    answer = roles.move(game, args.role, state_dir(), args.action, kwargs)
    if args.action == "status" and args.json:  # the look is journaled by the desk; the reading is read here
        stack = DockerStack(state_dir()) if backend(args.backend) in ("docker", "k8s") else None
        state = stack.state if stack else running()
        if state is None:
            raise LabError("no lab is up to read")
        snap = asyncio.run(Ops(state, docker=stack).reading())
        print(json.dumps(snap.to_json() | {"first_look": first_look(snap).splitlines()}, indent=1))
        return 0
    commandline.tell(move=answer)
    print(answer["message"])
    return 0 if answer["ok"] else int(answer.get("exit_code") or 1)
