"""`stormlab room up | status | console | halt | down`: one lab per team on this host (stormlab/gameday/room.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from stormcore.errors import LabError, UsageError
from stormcore.labstate import running
from stormcore.settings import LabSettings
from stormlab.engine import launcher, observe
from stormlab.engine.speed import parse_speed
from stormlab.gameday import room, room_web

CONSOLE_PORT = 8708  # beside the desk (8709), below the racks of a lab on the default ports (8710 on)


def add_parser(sub: argparse._SubParsersAction, lab_flags: Any, settings_from: Any) -> None:
    r = sub.add_parser(
        "room",
        help="a training room: one lab per team on this host, sharing nothing",
        description=room.__doc__,
    )
    actions = r.add_subparsers(dest="room_command", required=True)
    u = actions.add_parser("up", help="size the room against this host, then start one lab per team (same profile, same seed)")
    u.add_argument("--teams", type=int, required=True, help=f"how many teams (labs), 1-{room.MAX_TEAMS}")
    lab_flags(u)
    u.set_defaults(func=lambda args: up(args, settings_from(args)))
    st = actions.add_parser("status", help="each team's lab: nodes serving, customers' error, validity")
    st.add_argument("--json", action="store_true", help="one JSON document: the room's card and each team's reading")
    st.set_defaults(func=status)
    c = actions.add_parser("console", help="the facilitator's console: every team side by side in the browser, and its controls")
    c.add_argument(
        "--port", type=int, default=CONSOLE_PORT, help=f"where it listens on 127.0.0.1 (default {CONSOLE_PORT}; 0: any free port)"
    )
    c.set_defaults(func=console)
    actions.add_parser("halt", help="end every fault lease in every team's lab now, each reverted").set_defaults(func=halt)
    actions.add_parser("down", help="stop every team's lab").set_defaults(func=down)


def up(args: argparse.Namespace, settings: LabSettings) -> int:
    if args.external_rack:
        raise UsageError("--external-rack runs one lab's rack: start that lab with `stormlab up`, not a room")
    if args.base_port != launcher.DEFAULT_BASE_PORT:
        raise UsageError("a room's labs each take free ports: drop --base-port")
    sizing = room.size(args.teams, settings.nodes_total, parse_speed(args.speed))
    print(f"room: {sizing.words()}", flush=True)
    card = room.up(settings.sped_up(sizing.speed), sizing, say=lambda line: print(line, flush=True))
    print("each team plays its own lab (status, chaos, ops, scenario run) with its state directory:")
    for team, where in card["teams"].items():
        print(f"  {team}: STORMLAB_STATE_DIR={where}")
    print("`stormlab room status` reads every team's lab; `stormlab room down` stops them all")
    return 0


async def readings(card: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    """Each team's snapshot (None: its lab is not up)."""
    async with aiohttp.ClientSession() as session:

        async def one(where: str) -> dict[str, Any] | None:
            state = running(Path(where))
            if not state:
                return None
            snap = await observe.snapshot(session, state)
            snap.pop("racks", None)
            return snap | {"invalid": observe.now_invalid(snap)}

        teams = list(card["teams"].items())
        found = await asyncio.gather(*(one(where) for _, where in teams))
        return {team: snap for (team, _), snap in zip(teams, found, strict=True)}


def status(args: argparse.Namespace) -> int:
    card = room.read_card()
    if card is None:
        raise LabError("no room is up: start one with `stormlab room up --teams N`")
    seen = asyncio.run(readings(card))
    if args.json:
        print(json.dumps({"room": card, "teams": seen}, indent=1))
        return 0
    print(f"room: {card['sizing']['teams']} teams of {card['sizing']['nodes']:,} nodes at speed {card['sizing']['speed']:g}")
    for team, snap in seen.items():
        if snap is None:
            print(f"  {team}: not up")
            continue
        valid = "valid" if not snap["invalid"] else "INVALID: " + "; ".join(snap["invalid"])
        error = snap["customer_error_ratio"]
        print(
            f"  {team}: {snap['nodes_serving']}/{snap['nodes_total']} nodes serving, customers "
            f"{'n/a' if error is None else f'{error:.1%}'} failing, {valid}"
        )
    return 0


def console(args: argparse.Namespace) -> int:
    card = room.read_card()
    token = room.facilitator_token()
    if card is None or token is None:
        raise LabError("no room is up: start one with `stormlab room up --teams N`")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port is a port number (0-65535), got {args.port}")
    served = room_web.app(room_web.Console(card, lambda: readings(card), room.halt, token))
    print(
        f"the room's console: http://127.0.0.1:{args.port}/ (the controls take the token in {room.room_dir() / room.FACILITATOR})",
        flush=True,
    )
    web.run_app(served, host="127.0.0.1", port=args.port, print=None)
    return 0


def halt(args: argparse.Namespace) -> int:
    if room.read_card() is None:
        raise LabError("no room is up: start one with `stormlab room up --teams N`")
    done = room.halt()
    for team, (count, failed) in done.items():
        print(f"  {team}: halted {count} fault(s)" + (f"; did not answer: {', '.join(failed)}" if failed else ""))
    if any(failed for _, failed in done.values()):
        raise LabError("some holders did not answer; the others were halted")
    return 0


def down(args: argparse.Namespace) -> int:
    stopped = room.down()
    print(f"stopped {len(stopped)} team labs ({', '.join(stopped)})" if stopped else "no room was up")
    return 0
