"""The desk's HTTP side, served by the game-day runner while a game lasts.

    POST /alertmanager   Alertmanager's webhook (the lab token as a Bearer token)
    POST /moves          a player's move: {"action", "args", "as"} with the role's token as a
                         Bearer token; the desk checks the token is that role's and the move is
                         the role's (or everyone's), makes it with the lab token and journals it
    GET  /               the status page
    GET  /status.json    {"posts": [...], "pages": [...]}
    GET  /game.json      the game so far, read-only: its title and team, the team's timeline (every
                         page, ack, move and status post, by role), the live score, each role's
                         card and the status page's score
    GET  /me             the role a Bearer token is, its unacknowledged pages, its moves (forms) and
                         the lab's dashboards it can open (a compose stack's Grafana and Prometheus)
    GET  /monitoring.json
                         what the players' monitoring shows: per watched probe its recent series,
                         read from the lab's own metrics service when the scenario's monitoring
                         shares fate (gaps where it lost the datapoints), else the runner's readings
    GET  /play           the players' console (stormlab/responder/players.py), opened as
                         /play#token=ROLE_TOKEN
    POST /inject         an inject typed live, sent now (the lab token as a Bearer token: the room's
                         console sends it): {"to", "message", "expect", "within", "names_tables"}
    POST /hold           {"on": true} holds the game (its clock stands still, the lab runs on),
                         {"on": false} lets it go on (the lab token, as the room's console sends it)

While the game is held a move on the lab (a lease taken or ended) is a 409 and nothing is made;
looks, acks, notes and status posts go on.

A game is bounded (stormlab/responder/bounds.py): its players' moves (4 kB of arguments each,
10,000 and 4 MB a game), its pages (20,000 and 16 MB) and its injects (500 and 1 MB) past their
budget are refused with nothing taken, 413 for one too large, 429 once the game's budget is spent.
The views anyone may open without a token (``/``, ``/status.json``, ``/game.json``,
``/monitoring.json``) are made at most once a second, and afresh after each write the game takes.

A move that was made and failed (the admin path timing out in a storm, as in 2015) is a move:
200 with ``ok`` false and the exit code the command gives. A request that is not a move (a bad
body, an unknown action, wrong arguments) is a 400, another role's move a 403, a token the desk
does not know a 401: nothing is made or journaled.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from chaos.catalog import ChaosError
from stormcore.auth import carries, check_strength
from stormcore.documents import encoded_bytes
from stormcore.errors import LabError, UsageError
from stormcore.web import BadRequest, described_app, json_error, read_object
from stormlab.responder import bounds, desk_api, players, reach
from stormlab.responder.desk import Desk
from stormlab.responder.moves import ACTIONS, EVERYONE, check_role, role_events
from stormlab.responder.reach import Reach
from stormlab.responder.runbook import Ops

VIEW_EVERY_S = 1.0  # a tokenless view is made at most this often (and after each write), whoever reads it


@dataclass(frozen=True)
class Game:
    """The runner behind the desk: the game so far as it scores it (``so_far()``: its journal's
    ``pages`` and ``player_actions`` on the game's timeline, ``score``, ``roles``, ``status_page``,
    ``injects``), an inject sent now (``inject(body)``: its record; a UsageError (the scenario reader's ScenarioError) if it is not one),
    the facilitator's hold (``hold(on)``: what it did), whether the game is held (``held()``), what
    the players' monitoring shows (``monitoring()``: stormlab/responder/monitoring.py's view) and the
    lab's dashboards a player can open (``dashboards``: title and url each)."""

    so_far: Callable[[], dict[str, Any]]
    inject: Callable[[dict[str, Any]], dict[str, Any]]
    hold: Callable[[bool], dict[str, Any]]
    held: Callable[[], bool]
    monitoring: Callable[[], Awaitable[dict[str, Any]]]
    dashboards: tuple[dict[str, str], ...] = ()


class Side:
    """What the desk's handlers share: the desk and the runbook behind it, the lab token, the runner
    (``game``; none: no score, no injects), what the game has spent of its budgets and the tokenless
    views. ``guard_reads``: the game's readings (its JSON documents) only to its own roles' tokens
    and the lab's, for a desk served to other machines; on loopback they are open to this host."""

    def __init__(
        self,
        desk: Desk,
        ops: Ops,
        lab_token: str,
        on_page: Callable[[dict[str, Any]], None] | None,
        game: Game | None,
        guard_reads: bool,
    ) -> None:
        check_strength(lab_token)  # a lab token anyone could guess (or none): the desk would take pages from anyone
        self.desk, self.ops, self.lab_token, self.on_page, self.game, self.guard_reads = desk, ops, lab_token, on_page, game, guard_reads
        self.spent = bounds.budgets()  # what this game takes from its players, its pages and its injects, at most
        # What anyone may open without a token, made at most once a second and after each write.
        self.views = {name: bounds.Cached(make, time.monotonic, VIEW_EVERY_S) for name, make in
                      (("page", self.page_html), ("status", self.status_doc), ("game", self.game_doc),
                       ("monitoring", self.monitoring_doc))}  # fmt: skip

    async def page_html(self) -> bytes:
        return self.desk.status_page().encode()

    async def status_doc(self) -> bytes:
        return _json({"posts": self.desk.posts(), "pages": self.desk.pages})

    async def game_doc(self) -> bytes:
        return _json(game_document(self.desk, self.game.so_far() if self.game else None))

    async def monitoring_doc(self) -> bytes:
        assert self.game is not None
        return _json(await self.game.monitoring())

    def written(self) -> None:
        for name in ("page", "status", "game"):
            self.views[name].forget()

    def with_lab_token(self, request: web.Request) -> bool:
        return carries(request.headers.get("Authorization", ""), self.lab_token)

    def role_of(self, request: web.Request) -> str | None:
        return self.desk.role_of(request.headers.get("Authorization", ""))

    def may_read(self, request: web.Request) -> bool:
        return not self.guard_reads or self.with_lab_token(request) or self.role_of(request) is not None


SIDE = web.AppKey("desk", Side)


def _over(exc: bounds.OverBudget) -> web.Response:
    return json_error(exc.status, "too_large" if exc.status == 413 else "too_many", str(exc))


def _unread() -> web.Response:
    return json_error(401, "unauthorized", "this game's readings take a role's token of this game (or the lab token) as a Bearer token")


async def alertmanager(request: web.Request) -> web.Response:
    side = request.app[SIDE]
    if not side.with_lab_token(request):
        return json_error(401, "unauthorized", "the desk takes pages with the lab token as a Bearer token")
    body = await read_object(request)
    alerts = body.get("alerts")
    try:
        side.spent["pages"].take(encoded_bytes(body), max(1, len(alerts) if isinstance(alerts, list) else 1))
    except bounds.OverBudget as exc:
        return _over(exc)
    try:
        taken = side.desk.page(body, via="alertmanager")
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    side.written()
    if side.on_page is not None:
        for page in taken:
            side.on_page(page)
    return web.json_response({"recorded": len(taken)})


async def moves(request: web.Request) -> web.Response:
    side = request.app[SIDE]
    role = side.role_of(request)
    if role is None:
        return json_error(401, "unauthorized", "the desk takes moves with a role's token (STORMLAB_ROLE_TOKEN) from this game")
    action, args, claimed = _move(await read_object(request))
    if claimed != role:
        return json_error(403, "forbidden", f"this token is the {role} on-call's, not {claimed}'s")
    try:
        check_role(role, ACTIONS[action], args)
    except ChaosError as exc:
        return json_error(403, "forbidden", str(exc))
    if side.game is not None and side.game.held() and action not in EVERYONE:
        waits = f"the facilitator holds the game: {action} waits until it goes on (looks, acks, notes and posts do not)"
        return json_error(409, "held", waits)
    try:
        side.spent["moves"].take(encoded_bytes(args))
    except bounds.OverBudget as exc:
        return _over(exc)
    entry = await side.ops.run(action, args, role)
    side.written()
    error = entry.get("error")
    if isinstance(error, UsageError) and "at" not in entry:  # refused before it was journaled: not a move
        raise BadRequest(str(error))
    code = 0 if entry["ok"] else error.exit_code if isinstance(error, (UsageError, LabError)) else 1
    return web.json_response({"ok": entry["ok"], "message": entry["message"], "role": role, "exit_code": code})


async def page(request: web.Request) -> web.Response:
    return web.Response(body=await request.app[SIDE].views["page"].get(), content_type="text/html")


async def status(request: web.Request) -> web.Response:
    side = request.app[SIDE]
    if not side.may_read(request):
        return _unread()
    return web.Response(body=await side.views["status"].get(), content_type="application/json")


async def so_far(request: web.Request) -> web.Response:
    side = request.app[SIDE]
    if not side.may_read(request):
        return _unread()
    return web.Response(body=await side.views["game"].get(), content_type="application/json")


async def inject(request: web.Request) -> web.Response:
    side = request.app[SIDE]
    if not side.with_lab_token(request):
        return json_error(401, "unauthorized", "the desk takes injects with the lab token as a Bearer token")
    body = await read_object(request)
    if side.game is None:
        return json_error(409, "no_game", "no game runs behind this desk: nothing to send an inject in")
    try:
        side.spent["injects"].take(encoded_bytes(body))
    except bounds.OverBudget as exc:
        return _over(exc)
    try:
        sent = side.game.inject(body)
    except UsageError as exc:
        raise BadRequest(str(exc)) from None
    side.written()
    return web.json_response({"inject": sent})


async def hold(request: web.Request) -> web.Response:
    side = request.app[SIDE]
    if not side.with_lab_token(request):
        return json_error(401, "unauthorized", "the desk takes holds with the lab token as a Bearer token")
    on = hold_wanted(await read_object(request))
    if side.game is None:
        return json_error(409, "no_game", "no game runs behind this desk: nothing to hold")
    done = side.game.hold(on)
    side.written()
    return web.json_response(done)


async def seen(request: web.Request) -> web.Response:
    side = request.app[SIDE]
    if not side.may_read(request):
        return _unread()
    if side.game is None:
        return json_error(409, "no_game", "no game runs behind this desk: no monitoring to show")
    return web.Response(body=await side.views["monitoring"].get(), content_type="application/json")


async def me(request: web.Request) -> web.Response:
    side = request.app[SIDE]
    role = side.role_of(request)
    if role is None:
        return json_error(401, "unauthorized", "this is a role's page: open it with the role's token (/play#token=…)")
    dashboards = list(side.game.dashboards) if side.game is not None else []
    desk = side.desk
    return web.json_response(
        {
            "role": role,
            "team": desk.team,
            "title": desk.title,
            "pages": desk.unacked(role),
            "moves": players.moves_for(role),
            "dashboards": dashboards,
        }
    )


async def play(request: web.Request) -> web.Response:
    return web.Response(text=players.PAGE, content_type="text/html")


# Every route, by its operation in desk_api (where each is described: the fuzzer judges it).
HANDLERS = {"alertmanager": alertmanager, "moves": moves, "page": page, "status": status, "game": so_far, "monitoring": seen,
            "inject": inject, "hold": hold, "me": me, "play": play}  # fmt: skip


def app(
    desk: Desk,
    ops: Ops,
    lab_token: str,
    on_page: Callable[[dict[str, Any]], None] | None = None,
    game: Game | None = None,
    guard_reads: bool = False,
) -> web.Application:
    """The desk's routes over ``desk`` (a weak lab token is refused: see Side)."""
    served = described_app("stormlab desk", desk_api.OPERATIONS, HANDLERS)
    served[SIDE] = Side(desk, ops, lab_token, on_page, game, guard_reads)
    return served


def game_document(desk: Desk, so_far: dict[str, Any] | None) -> dict[str, Any]:
    """The game as the consoles read it. Without the runner's view (``so_far`` None) the timeline
    and the score are not known: the desk's pages and posts only."""
    base = {"title": desk.title, "team": desk.team, "posts": desk.posts()}
    if so_far is None:
        return base | {"timeline": [], "score": None, "roles": {}, "status_page": None, "pages": desk.pages, "held": False, "holds": []}
    events = role_events({"pages": so_far["pages"], "player_actions": so_far["player_actions"]})
    return base | {
        "t": so_far["t"],
        "timeline": [{"t": t, "role": lane, "what": mark, "detail": label} for t, lane, mark, label in events],
        "score": so_far["score"],
        "roles": so_far["roles"],
        "status_page": so_far["status_page"],
        "injects": so_far["injects"],
        "held": so_far["held"],
        "holds": so_far["holds"],
    }


def _json(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def hold_wanted(body: dict[str, Any]) -> bool:
    """A hold's body, ``{"on": true|false}``, as the desk and the room's console take it; else BadRequest."""
    on = body.get("on")
    if not isinstance(on, bool):
        raise BadRequest("on must be true (hold the game) or false (let it go on)")
    return on


def _move(body: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    action, args, claimed = body.get("action"), body.get("args", {}), body.get("as")
    if not isinstance(action, str) or action not in ACTIONS:
        raise BadRequest(f"action must be one of {', '.join(ACTIONS)}")
    if not isinstance(args, dict) or not all(isinstance(k, str) for k in args):
        raise BadRequest("args must be an object of the move's arguments")
    if not isinstance(claimed, str):
        raise BadRequest("as must name the role the move is made as")
    return action, args, claimed


@asynccontextmanager
async def serving(
    desk: Desk,
    ops: Ops,
    where: Reach,
    port: int,
    lab_token: str,
    on_page: Callable[[dict[str, Any]], None] | None = None,
    game: Game | None = None,
    alerts: tuple[str, int] | None = None,
) -> AsyncIterator[reach.Served]:
    """The desk where ``where`` says, on ``port``, while the block runs (``on_page`` hears each page
    it takes); yields where it is served (the URL its players open, the one this host's programs use).
    ``alerts``: an address and port where it also takes pages in plain http (a compose stack's
    Alertmanager, over the host's bridge, while the players reach it elsewhere, over TLS perhaps)."""
    plain = (alerts[0], alerts[1], "--desk-port") if alerts else None
    served = await reach.start(
        app(desk, ops, lab_token, on_page, game, guard_reads=not where.local),
        where,
        port,
        "desk",
        "--play-port" if alerts else "--desk-port",
        also=[reach.DESK_NAME],
        plain=plain,
    )
    try:
        yield served
    finally:
        await served.runner.cleanup()
