"""A team's desk and a room's console with no game runner behind them: what `stormlab fuzz` serves
against the running lab (a move through the desk is made on that lab, as in a game), and what the
API table (docs/api.md) is built from."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from aiohttp import web

from stormcore.settings import LabSettings
from stormlab.artefacts import apidoc
from stormlab.responder import desk_web, monitoring
from stormlab.responder.desk import Desk
from stormlab.responder.moves import ROLES
from stormlab.responder.runbook import Ops
from stormlab.rooms import room as room_mod
from stormlab.rooms import room_debrief, room_web
from stormlab.scenarios.scenario import live_inject


def _inject(body: dict[str, Any]) -> dict[str, Any]:
    return asdict(live_inject(body, "inject"))  # ScenarioError (a 400) for a body that is not one


def _nothing_yet() -> dict[str, Any]:
    """The game so far, as a runner that has scored nothing yet says it."""
    return {"t": 0.0, "pages": [], "player_actions": [], "score": None, "roles": {}, "status_page": None, "injects": [], "held": False,
            "holds": []}  # fmt: skip


async def _seen() -> dict[str, Any]:
    return monitoring.direct([])


def desk(state: dict[str, Any], token: str, directory: Path) -> web.Application:
    """A desk whose first role's token is ``token`` (the lab token too: pages, injects, holds), its
    moves made on the lab of ``state``, its journal in ``directory``."""
    book = Desk(directory, "a game with no runner", {next(iter(ROLES)): token}, team="standalone")
    ops = Ops(state, journal=book.journal, unacked=book.unacked)
    game = desk_web.Game(so_far=_nothing_yet, inject=_inject, hold=lambda on: {"held": on}, held=lambda: False, monitoring=_seen)
    return desk_web.app(book, ops, token, game=game)


def room(token: str, directory: Path) -> web.Application:
    """A room console of one team whose lab is not up, with the room's own controls on a room card
    written in ``directory`` (as `room up` writes one): its reading and its requests' handling are
    the real ones, and there is nothing for its controls to halt, hold or end."""
    home = room_mod.room_dir(directory)
    home.mkdir(parents=True, exist_ok=True)
    settings = LabSettings(racks=2, nodes_per_rack=20)
    card = {
        "backend": "local",
        "teams": {"team-1": str(home / "team-1")},
        "sizing": asdict(room_mod.size(1, settings.nodes_total, 1.0, cores=2)),
        "settings": settings.to_env(),
    }
    (home / room_mod.CARD).write_text(json.dumps(card, indent=1))

    async def read() -> dict[str, room_web.Seen | None]:
        await asyncio.sleep(0)
        return {"team-1": None}

    controls = room_web.Controls(
        halt=partial(room_mod.halt, directory),
        end=partial(room_mod.end, directory),
        inject=lambda body, team: room_mod.inject(body, team, directory),
        hold=lambda on: room_mod.hold(on, directory),
    )
    # A game on in team-1's lab as far as the join page knows: its seats are dealt (their codes on
    # /join/links), and a taken seat is sent to a console that is not there (nothing follows it).
    seats = {"team-1": {role: f"http://127.0.0.1:9/play#token=standalone-{role}" for role in ROLES}}
    (home / room_debrief.PAGE).write_text("<!doctype html><p>no game of this room has ended: a stand-in debrief</p>")
    (home / room_debrief.CHART).write_bytes(STAND_IN_PNG)
    return room_web.app(room_web.Console(card, read, controls, token, home=home, links=lambda: seats))


STAND_IN_PNG = b"\x89PNG\r\n\x1a\n" + b"a stand-in chart"  # served as the debrief's chart, never drawn


@contextlib.contextmanager
def serving(state: dict[str, Any], token: str, directory: Path) -> Iterator[dict[str, str]]:
    """The desk (on the lab of ``state``) and the room console, each on a free loopback port,
    served by an event loop of their own in a thread while the block runs: yields their URLs."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="consoles", daemon=True)
    thread.start()
    runners: list[web.AppRunner] = []

    async def start() -> dict[str, str]:
        urls = {}
        for name, app in (("desk", desk(state, token, directory / "desk")), ("room", room(token, directory / "room"))):
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            runners.append(runner)
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            urls[name] = f"http://127.0.0.1:{runner.addresses[0][1]}"
        return urls

    async def stop() -> None:
        for runner in runners:
            await runner.cleanup()

    try:
        yield asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=30)
    finally:
        asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()


# The game's consoles in the API table (docs/api.md, below the lab's processes): `python -m stormlab.rooms.standalone`.
APPS = {
    "desk": lambda tmp: desk({"directory": str(tmp), "components": {"metadata": {"url": apidoc.NOWHERE}}}, apidoc.TOKEN, tmp),
    "room console": lambda tmp: room(apidoc.TOKEN, tmp),
}
INTRO = (
    "The game's consoles: a team's desk, served by its game's runner, and a room's console (`stormlab room console`). "
    "Each serves `GET /openapi.json`; `stormlab fuzz` serves both itself, against the lab, to judge them."
)


def markdown() -> str:
    return apidoc.markdown(APPS, INTRO)


if __name__ == "__main__":
    print(markdown())
