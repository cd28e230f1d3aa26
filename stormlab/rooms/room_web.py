"""The facilitator's console of a training room (`stormlab room console`): every team side by side.

    GET  /            the page: each team's customers' error over the last minutes (one curve a
                      team), nodes serving, validity, and once a game is on its pages, acks, moves,
                      status posts and score, and the live leaderboard; it refreshes every 2 s.
                      Opened as /#token=FACILITATOR_TOKEN its controls work (the token stays in
                      the browser: a fragment is never sent)
    GET  /panel       the part of the page that refreshes
    GET  /debrief     the room's debrief once a game has ended (room/debrief.html, and its chart
                      /debrief.png): every team beside the others and the incident's account
                      (served to other machines: with the facilitator's token)
    GET  /join        the join page to project: each team's seats as claim codes (with the join token)
    GET  /seat/CODE   a seat's page: whose seat, and a button to take it
    POST /seat/CODE   take the seat: the first browser gets the role's console (303), others a 409
    POST /seats/release  {"team", "role"}: the seat free again under a new code
    GET  /room.json   {"room": the card, "teams": each team's last reading, "history": each
                      team's [seconds since the console started, customers' error] pairs,
                      "games": each team's game (its runner, its desk's view), "leaderboard"}
    POST /start       start the console's scenario in every team's lab at once ({"autopilot": bool})
    POST /end         end the game in every team's lab (each runner rolls back and scores)
    POST /halt        end every fault lease in every team's lab
    POST /hold        {"on": true}: hold the game in every team's lab (its clock stands still, moves
                      on the lab wait; the labs run on); {"on": false}: let it go on
    POST /inject      an inject typed live: {"team": "all" or a team, "to", "message", "expect", "within"}

Reading needs no token; a control does (the facilitator's, as a Bearer token: `room up` writes it
to room/facilitator): a missing or wrong token is a 401 and nothing changes.
"""

from __future__ import annotations

import asyncio
import html
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from stormcore.auth import carries, join_token
from stormcore.errors import LabError
from stormcore.web import BadRequest, described_app, json_error, read_object
from stormlab.engine.reading import Reading
from stormlab.responder.desk import ANSWERS, TEAM
from stormlab.responder.desk_web import hold_wanted
from stormlab.responder.moves import ROLES
from stormlab.rooms import join, room_api, room_debrief
from stormlab.rooms.seats import SeatError, Seats
from stormlab.scenarios.leaderboard import standing
from stormlab.scenarios.scenario import ScenarioError

log = logging.getLogger(__name__)
HISTORY = 150  # readings kept per team (5 minutes at one every 2 s)
LOCKED = "<p>Every team's readings show with the facilitator's token: open this page as <code>/#token=…</code> (room/facilitator).</p>"
EVERY_S = 2.0


@dataclass(frozen=True)
class Seen:
    """A team's last reading, and what the validity check found wrong with it (nothing: valid)."""

    reading: Reading
    invalid: list[str]

    def to_json(self) -> dict[str, Any]:
        return self.reading.to_json() | {"invalid": self.invalid}


Read = Callable[[], Coroutine[Any, Any, dict[str, Seen | None]]]
Games = Callable[[], Coroutine[Any, Any, dict[str, dict[str, Any]]]]


async def no_games() -> dict[str, dict[str, Any]]:
    return {}


@dataclass
class Controls:
    """What the console's controls do (each a blocking call, run off the loop)."""

    halt: Callable[[], dict[str, tuple[int, list[str]]]]
    start: Callable[[bool], dict[str, Any]] | None = None  # None: the console was started without a scenario
    end: Callable[[], dict[str, dict[str, Any]]] = dict
    inject: Callable[[dict[str, Any], str | None], dict[str, Any]] = lambda body, team: {}
    hold: Callable[[bool], dict[str, Any]] = lambda on: {}


class Console:
    """The room as the facilitator sees it: the last reading of each team, each one's curve, and
    each one's game (``games()``: per team its runner's state and its desk's ``/game.json``)."""

    def __init__(
        self,
        card: dict[str, Any],
        read: Read,
        controls: Controls,
        token: str,
        games: Games = no_games,
        home: Path | None = None,
        guard_reads: bool = False,
        links: Callable[[], dict[str, dict[str, str]]] = dict,
    ) -> None:
        self.card, self.read, self.controls, self.token, self.games = card, read, controls, token, games
        self.home = home  # the room's directory: its debrief, once a game has ended
        # Served to other machines: every team's readings and game only with the facilitator's token.
        self.guard_reads = guard_reads
        self.links = links  # each team's role links (their tokens in them): handed only to the browser that takes a seat
        self.seats = Seats()
        self.base: str | None = None  # the console's address as the players reach it (None: as the join page was asked)
        self.started = time.monotonic()
        self.last: dict[str, Seen | None] = {team: None for team in card["teams"]}
        self.game: dict[str, dict[str, Any]] = {}
        self.history: dict[str, deque[tuple[float, float]]] = {team: deque(maxlen=HISTORY) for team in card["teams"]}

    async def sample(self) -> None:
        self.last, self.game = await asyncio.gather(self.read(), self.games())
        at = round(time.monotonic() - self.started, 1)
        for team, seen in self.last.items():
            if seen and seen.reading.customer_error_ratio is not None:
                self.history[team].append((at, seen.reading.customer_error_ratio))

    def leaderboard(self) -> list[dict[str, Any]]:
        """The teams whose game has a score, best first (recovered, then fewest error-minutes)."""
        scored = [(team, g["score"], moves_of(g)) for team, g in self.game.items() if g.get("score")]
        return [{"team": team, **score, "moves": moves} for team, score, moves in sorted(scored, key=lambda ts: standing(ts[1]))]

    def document(self) -> dict[str, Any]:
        return {
            "room": self.card,
            "teams": {team: None if seen is None else seen.to_json() for team, seen in self.last.items()},
            "history": {t: list(h) for t, h in self.history.items()},
            "games": self.game,
            "leaderboard": self.leaderboard(),
        }

    def panel(self) -> str:
        e = html.escape
        rows = []
        for team, seen in self.last.items():
            game = game_cells(self.game.get(team))
            if seen is None:
                rows.append(f"<tr data-team='{e(team)}'><td>{e(team)}</td><td colspan='4'>not up</td>{game}</tr>")
                continue
            snap, error = seen.reading, seen.reading.customer_error_ratio
            valid = "valid" if not seen.invalid else "INVALID: " + "; ".join(seen.invalid)
            rows.append(
                f"<tr data-team='{e(team)}'><td>{e(team)}</td><td>{snap.nodes_serving}/{snap.nodes_total}</td>"
                f"<td>{'n/a' if error is None else f'{error:.1%}'}</td><td>{e(valid)}</td>"
                f"<td>{curve(list(self.history[team]))}</td>{game}</tr>"
            )
        board = "".join(
            f"<tr><td>{i}</td><td>{e(b['team'])}</td><td>{'yes' if b['recovered'] else 'not yet'}</td>"
            f"<td>{b['customer_error_minutes']:.2f}</td><td>{room_debrief.seconds(b.get('time_to_detect_s'))}</td><td>{b['moves']}</td></tr>"
            for i, b in enumerate(self.leaderboard(), 1)
        )
        return f"""<table id="teams"><tr><th>team</th><th>nodes serving</th><th>customers failing</th><th>validity</th>
<th>customers' error</th><th>game</th><th>pages</th><th>acks</th><th>moves</th><th>status posts</th><th>injects answered</th></tr>
{"".join(rows)}</table>
<h2>Leaderboard</h2>
<table id="leaderboard"><tr><th>#</th><th>team</th><th>recovered</th><th>customer error-minutes</th><th>time to detect</th>
<th>moves</th></tr>
{board or "<tr><td colspan='6'>no game scored yet</td></tr>"}</table>"""

    def page(self) -> str:
        sizing = self.card["sizing"]
        start = "" if self.controls.start is None else "<button id='start'>start the game in every team's lab</button>"
        teams = "".join(f"<option>{html.escape(t)}</option>" for t in self.card["teams"])
        roles = "".join(f"<option>{r}</option>" for r in (TEAM, *ROLES))
        roles_only = "".join(f"<option>{r}</option>" for r in ROLES)
        answers = "".join(f"<option>{a}</option>" for a in ANSWERS)
        return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>stormlab room</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em}} td,th{{border:1px solid #ccc;padding:.3em .6em}}
table{{border-collapse:collapse}} #said{{color:#555}}</style></head><body>
<h1>Training room: {sizing["teams"]} teams</h1>
<p>Each team's lab: {sizing["nodes"]:,} nodes at speed {sizing["speed"]:g}, one profile, one seed. Customers' error is the last 10 s;
the curve the last {HISTORY * EVERY_S / 60:g} minutes (0 to 100%). Pages, acks, moves and posts are each team's game so far.</p>
<p>{start} <button id="hold">hold</button> <button id="continue">continue</button>
<button id="end">end the game</button> <button id="halt">halt every fault</button> <a id="debrief" href="/debrief">the debrief</a>
<span id="said"></span></p>
<form id="release">release a seat: <select name="team">{teams}</select> <select name="role">{roles_only}</select>
<button type="submit">release</button></form>
<form id="inject">inject to <select name="team"><option>all</option>{teams}</select>
<select name="to">{roles}</select> <input name="message" size="60" placeholder="what they are told">
expecting <select name="expect">{answers}</select> within <input name="within" size="5" value="5m">
<button type="submit">send</button></form>
<div id="room">{LOCKED if self.guard_reads else self.panel()}</div>
<script>
const token = new URLSearchParams(location.hash.slice(1)).get("token") || "";
window.addEventListener("hashchange", () => location.reload());
async function control(name, path, sent) {{
  const headers = {{"Authorization": "Bearer " + token, "Content-Type": "application/json"}};
  const r = await fetch(path, {{method: "POST", headers: headers, body: JSON.stringify(sent)}});
  const body = await r.json();
  document.getElementById("said").textContent = name + ": " + (r.status === 200 ? "done" : body.message);
}}
document.getElementById("inject").addEventListener("submit", async (ev) => {{
  ev.preventDefault();
  const f = ev.target;
  const body = {{team: f.team.value, to: f.to.value, message: f.message.value, expect: f.expect.value, within: f.within.value}};
  const r = await fetch("/inject", {{method: "POST", headers: {{"Authorization": "Bearer " + token, "Content-Type": "application/json"}},
                                    body: JSON.stringify(body)}});
  const answer = await r.json();
  document.getElementById("said").textContent = "inject: " + (r.status === 200 ? JSON.stringify(answer.sent) : answer.message);
}});
document.getElementById("release").addEventListener("submit", (ev) => {{
  ev.preventDefault();
  control("release", "/seats/release", {{team: ev.target.team.value, role: ev.target.role.value}});
}});
// The debrief holds every team's game: on a room others reach it is read with the token, then shown.
document.getElementById("debrief").addEventListener("click", async (ev) => {{
  ev.preventDefault();
  const auth = {{"Authorization": "Bearer " + token}};
  const r = await fetch("/debrief", {{headers: auth}});
  if (r.status !== 200) {{ document.getElementById("said").textContent = "debrief: " + (await r.json()).message; return; }}
  let page = await r.text();
  const chart = await fetch("/debrief.png", {{headers: auth}});
  if (chart.status === 200) page = page.replace('src="debrief.png"', 'src="' + URL.createObjectURL(await chart.blob()) + '"');
  const shown = window.open("", "_blank");
  shown.document.write(page);
  shown.document.close();
}});
const controls = {{start: ["/start", {{}}], end: ["/end", {{}}], halt: ["/halt", {{}}],
                  hold: ["/hold", {{on: true}}], continue: ["/hold", {{on: false}}]}};
for (const [name, [path, sent]] of Object.entries(controls)) {{
  const b = document.getElementById(name);
  if (b) b.addEventListener("click", () => control(name, path, sent));
}}
async function panel() {{
  const r = await fetch("/panel", {{headers: {{"Authorization": "Bearer " + token}}}});
  if (r.status === 200) document.getElementById("room").innerHTML = await r.text();
}}
panel();
setInterval(panel, {EVERY_S * 1000:.0f});
</script></body></html>"""


def cards(game: dict[str, Any]) -> list[dict[str, Any]]:
    """Each role's card in a team's game: as its desk shows them while it runs, as its runner
    scored them once it ended."""
    return list(((game.get("view") or {}).get("roles") or game.get("roles") or {}).values())


def moves_of(game: dict[str, Any]) -> int:
    """The moves a team's roles made so far."""
    return sum(c["moves"] for c in cards(game))


def game_cells(game: dict[str, Any] | None) -> str:
    """A team's game in its row: whether it runs (or how it ended), its pages, acks, moves and posts."""
    if not game:
        return "<td colspan='6'>no game</td>"
    pages, acks, moves, posts = (sum(c[k] for c in cards(game)) for k in ("pages", "acks", "moves", "posts"))
    held = (game.get("view") or {}).get("held")
    state = ("held" if held else "on") if game.get("running") else f"ended: {game.get('outcome') or game.get('said') or 'no outcome'}"
    score = game.get("score") or {}
    injects = f"{score.get('injects_answered', 0)} of {score.get('injects_fired', 0)}"
    return f"<td>{html.escape(state)}</td><td>{pages}</td><td>{acks}</td><td>{moves}</td><td>{posts}</td><td>{injects}</td>"


def curve(points: list[tuple[float, float]], width: int = 300, height: int = 40) -> str:
    """A team's error over time as a small SVG line (0 at the bottom, 100% at the top)."""
    if len(points) < 2:
        return ""
    t0, t1 = points[0][0], points[-1][0]
    span = max(t1 - t0, 1e-9)
    xy = " ".join(f"{(t - t0) / span * width:.1f},{height - min(1.0, max(0.0, v)) * height:.1f}" for t, v in points)
    return (
        f"<svg width='{width}' height='{height}' viewBox='0 0 {width} {height}'>"
        f"<polyline fill='none' stroke='#c0392b' stroke-width='1.5' points='{xy}'/></svg>"
    )


CONSOLE = web.AppKey("console", Console)


def _may_read(request: web.Request) -> bool:
    return not request.app[CONSOLE].guard_reads or _allowed(request)


def _unread() -> web.Response:
    return json_error(401, "unauthorized", "a room served to other machines shows its teams with the facilitator's token")


def _allowed(request: web.Request) -> bool:
    return carries(request.headers.get("Authorization", ""), request.app[CONSOLE].token)


def _refused() -> web.Response:
    return json_error(401, "unauthorized", "the room's controls take the facilitator's token (room/facilitator) as a Bearer token")


async def page(request: web.Request) -> web.Response:
    return web.Response(text=request.app[CONSOLE].page(), content_type="text/html")


async def panel(request: web.Request) -> web.Response:
    if not _may_read(request):
        return _unread()
    return web.Response(text=request.app[CONSOLE].panel(), content_type="text/html")


async def debrief(request: web.Request) -> web.StreamResponse:
    if not _may_read(request):  # every team's game, scored: the facilitator's, on a room others can reach
        return _unread()
    home = request.app[CONSOLE].home
    name = room_debrief.CHART if request.path.endswith(".png") else room_debrief.PAGE
    path = None if home is None else home / name
    if path is None or not path.exists():
        return json_error(404, "no_debrief", "no game of this room has ended yet: the debrief is written when it does")
    return web.FileResponse(path)


async def join_page(request: web.Request) -> web.Response:
    return web.Response(text=join.PAGE, content_type="text/html")


async def join_links(request: web.Request) -> web.Response:
    console = request.app[CONSOLE]
    given = request.headers.get("Authorization", "")
    if not (carries(given, join_token(console.token)) or carries(given, console.token)):
        return json_error(401, "unauthorized", "the join page shows with the join token `stormlab room console` printed")
    links = await asyncio.to_thread(console.links)
    base = console.base or f"{request.scheme}://{request.host}"
    shown = join.links_html(console.seats.shown(links), base, {team: bool(roles) for team, roles in links.items()})
    return web.Response(text=shown, content_type="text/html")


def _seat_refused(status: int, title: str, said: str) -> web.Response:
    return web.Response(status=status, text=join.refused_page(title, said), content_type="text/html")


async def seat_page(request: web.Request) -> web.Response:
    code = request.match_info["code"]
    try:
        team, role = request.app[CONSOLE].seats.seat(code)
    except SeatError as exc:
        return _seat_refused(404, "no such seat", str(exc))
    return web.Response(text=join.seat_page(team, role, code), content_type="text/html")


SEAT_COOKIE = "stormlab-seat"  # scoped to its seat's path: one per seat a browser took


async def seat_claim(request: web.Request) -> web.Response:
    """The first browser to take a seat is handed the role's console (its token in the fragment of
    the address it is sent to) and a cookie that lets it in again; any other browser, a 409."""
    console, code = request.app[CONSOLE], request.match_info["code"]
    try:
        team, role = console.seats.seat(code)
        link = (await asyncio.to_thread(console.links)).get(team, {}).get(role)
        if link is None:
            return _seat_refused(409, "no game", f"no game is on in {team}'s lab now: take the seat once it starts")
        _, secret = console.seats.claim(code, request.cookies.get(SEAT_COOKIE))
    except SeatError as exc:
        return _seat_refused(404 if exc.kind == "unknown" else 409, "seat taken" if exc.kind == "taken" else "no such seat", str(exc))
    answer = web.Response(status=303, headers={"Location": link})
    if secret is not None:
        answer.set_cookie(SEAT_COOKIE, secret, path=f"/seat/{code}", httponly=True, samesite="Strict", secure=request.secure)
    return answer


async def seat_release(request: web.Request) -> web.Response:
    if not _allowed(request):
        return _refused()
    body = await read_object(request)
    team, role = body.get("team"), body.get("role")
    if not isinstance(team, str) or not isinstance(role, str):
        raise BadRequest("team and role: the seat to release")
    try:
        request.app[CONSOLE].seats.release(team, role)
    except SeatError as exc:
        return json_error(404, "no_seat", str(exc))
    return web.json_response({"released": {"team": team, "role": role}})


async def document(request: web.Request) -> web.Response:
    if not _may_read(request):
        return _unread()
    return web.json_response(request.app[CONSOLE].document())


async def halt(request: web.Request) -> web.Response:
    if not _allowed(request):
        return _refused()
    done = await asyncio.to_thread(request.app[CONSOLE].controls.halt)
    return web.json_response(
        {"halted": {team: count for team, (count, _) in done.items()}, "unanswered": {t: f for t, (_, f) in done.items() if f}}
    )


async def start(request: web.Request) -> web.Response:
    if not _allowed(request):
        return _refused()
    controls = request.app[CONSOLE].controls
    body = await read_object(request)
    autopilot = body.get("autopilot", False)
    if not isinstance(autopilot, bool):
        raise BadRequest("autopilot is true or false")
    if controls.start is None:
        return json_error(409, "no_scenario", "this console was started without --scenario: nothing to start")
    try:
        game = await asyncio.to_thread(controls.start, autopilot)
    except LabError as exc:
        return json_error(409, "conflict", str(exc))
    return web.json_response({"started": sorted(game["teams"]), "scenario": game["scenario"]})


async def inject(request: web.Request) -> web.Response:
    if not _allowed(request):
        return _refused()
    console = request.app[CONSOLE]
    body = await read_object(request)
    team = body.pop("team", "all")
    if not isinstance(team, str) or (team != "all" and team not in console.card["teams"]):
        raise BadRequest(f"team: all, or one of {', '.join(console.card['teams'])}")
    try:
        sent = await asyncio.to_thread(console.controls.inject, body, None if team == "all" else team)
    except ScenarioError as exc:
        raise BadRequest(str(exc)) from None
    return web.json_response({"sent": sent})


async def hold(request: web.Request) -> web.Response:
    if not _allowed(request):
        return _refused()
    told = await asyncio.to_thread(request.app[CONSOLE].controls.hold, hold_wanted(await read_object(request)))
    return web.json_response({"told": told})


async def end(request: web.Request) -> web.Response:
    if not _allowed(request):
        return _refused()
    ended = await asyncio.to_thread(request.app[CONSOLE].controls.end)
    return web.json_response({"ended": {team: state.get("outcome") for team, state in ended.items()}})


async def sampling(served: web.Application) -> AsyncIterator[None]:
    """The console reads every team every EVERY_S while it is served."""
    console = served[CONSOLE]

    async def loop() -> None:
        while True:
            try:
                await console.sample()
            except Exception:  # a lab going down mid-read: the next reading says so; the console goes on
                log.exception("reading the room failed")
            await asyncio.sleep(EVERY_S)

    task = asyncio.create_task(loop())
    yield
    task.cancel()


# Every route, by its operation in room_api (where each is described: the fuzzer judges it).
HANDLERS = {"page": page, "panel": panel, "document": document, "debrief": debrief, "chart": debrief, "halt": halt,
            "join": join_page, "join_links": join_links, "seat": seat_page, "claim": seat_claim, "release": seat_release,
            "start": start, "end": end, "inject": inject, "hold": hold}  # fmt: skip


def app(console: Console) -> web.Application:
    served = described_app("stormlab room console", room_api.OPERATIONS, HANDLERS)
    served[CONSOLE] = console
    served.cleanup_ctx.append(sampling)
    return served
