"""`stormlab room up | status | play | hold | continue | end | debrief | inject | console | env | halt | down`: one
lab per team on this host (stormlab/rooms/room.py)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shlex
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from chaos.flags import BACKEND_CHOICES, backend_word
from stormcore import commandline
from stormcore.auth import headers, join_token, lab_token_in
from stormcore.errors import LabError, UsageError
from stormcore.labstate import BACKENDS
from stormcore.settings import DEFAULT_PROFILE, LabSettings, flag_of
from stormlab.engine import launcher, observe
from stormlab.engine.speed import parse_speed
from stormlab.responder import reach
from stormlab.responder.desk import ANSWERS, TEAM
from stormlab.responder.moves import ROLES
from stormlab.responder.reach import Reach
from stormlab.rooms import room, room_compose, room_debrief, room_web
from stormlab.scenarios import cli as gameday_cli
from stormlab.scenarios.scenario import live_inject

# The lab flags a scenario's settings decide (room up --scenario): giving one too is refused, not ignored
# (--seed and --set go on top, --speed is the room's).
SCENARIO_SETS = tuple(f.name for f in dataclasses.fields(LabSettings) if f.name not in ("seed", "speed"))
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
    u.add_argument(
        "--scenario",
        type=Path,
        help="the scenario the room will play: the labs start with its settings (--set and --speed on top), "
        "and `room play` and the console's start button play it (default: none, the profile's settings)",
    )
    u.add_argument(
        "--backend",
        choices=BACKEND_CHOICES,
        type=backend_word,
        help="where the labs run: local (processes on this host) or docker (a compose project per team, with its Prometheus "
        "and Alertmanager, on ports 20000 + 20n; speed 1); Kubernetes has no room yet (default auto: STORMLAB_BACKEND, else local)",
    )
    reach.add_arguments(u, "the room's pages (the facilitator's console, every desk and every player's console)", make=True)
    lab_flags(u)
    u.set_defaults(func=lambda args: up(args, settings_from(args)))
    st = actions.add_parser("status", help="each team's lab: nodes serving, customers' error, validity")
    st.add_argument("--json", action="store_true", help="one JSON document: the room's card and each team's reading")
    st.set_defaults(func=status)
    p = actions.add_parser(
        "play",
        help="start a scenario in every team's lab at once (a runner per team: its desk, its roles' tokens, its journal)",
        description="Start the scenario in every team's lab at once and print each role's console (its token in the link). "
        "The room's labs must have the scenario's settings (start the room with them). `room end` ends the game.",
    )
    p.add_argument("scenario", type=Path, nargs="?", help="the scenario every team plays (default: the one `room up --scenario` named)")
    p.add_argument("--autopilot", action="store_true", help="every team's runner plays AWS's runbook itself (a demonstration)")
    p.set_defaults(func=play)
    actions.add_parser("end", help="end the game in every team's lab: each runner rolls back, scores and writes its report").set_defaults(
        func=end
    )
    i = actions.add_parser(
        "inject",
        help="send an inject now to every team's game (or one team's): a page to a role or the team, scored by its answer",
        description="Send an inject typed live to the games on: delivered as a page to its role (every role for team), "
        "answered as it asks within its time, scored beside the scenario's injects.",
    )
    i.add_argument("message", help="what the role is told")
    i.add_argument("--to", required=True, choices=(TEAM, *ROLES), help="the role it goes to, or team (every role; anyone answers)")
    i.add_argument("--team", help="one team (default: every team)")
    i.add_argument("--expect", default="ack", choices=ANSWERS, help="what is expected back: ack (default), post (a status post), note")
    i.add_argument("--within", default="5m", help="how long the answer may take, wall time (default 5m)")
    i.add_argument("--names-tables", action="store_true", help="with --expect post: the post must name a table whose customers fail")
    i.set_defaults(func=inject)
    h = actions.add_parser(
        "hold",
        help="hold the game in every team's lab: its clock stands still (steps, injects, time limits, score), "
        "moves on the lab wait; the labs run on",
        description="Hold the game in every team's lab, for a word with the room: each game's clock stands still (its next "
        "steps, its injects, the operator phase's time limit and the score wait) and the players' moves on the lab are "
        "refused until `room continue`; looks, acks, notes and status posts go on. The labs themselves run on: a storm "
        "does not wait.",
    )
    h.set_defaults(func=lambda args: hold(True))
    actions.add_parser("continue", help="let the held game go on in every team's lab").set_defaults(func=lambda args: hold(False))
    c = actions.add_parser("console", help="the facilitator's console: every team side by side in the browser, and its controls")
    c.add_argument("--port", type=int, default=CONSOLE_PORT, help=f"the port it listens on (default {CONSOLE_PORT}; 0: any free port)")
    c.add_argument("--listen", help="the address it listens on (default: where `room up --listen` put the room's pages)")
    c.add_argument("--public-url", help="the scheme and host its printed link uses (default: `room up`'s)")
    c.add_argument(
        "--scenario", type=Path, help="the scenario the console's start button plays in every team's lab (default: `room up --scenario`'s)"
    )
    c.set_defaults(func=console)
    actions.add_parser(
        "debrief",
        help="write the room's debrief again (room/debrief.html): every team's game beside the others' and the 2015 account "
        "(`room end` writes it)",
    ).set_defaults(func=debrief)
    e = actions.add_parser(
        "env",
        help='the variables a team\'s commands act on its own lab with (`eval "$(stormlab room env team-1)"`)',
        description="Print, as shell exports, what makes `stormlab status`, `chaos`, `ops` and `scenario run` act on one "
        "team's lab: its state directory (and unset a token exported here: the team's own is in its directory), and on "
        "compose its project, its ports and the docker backend.",
    )
    e.add_argument("team", help="the team (team-1, team-2, …)")
    e.set_defaults(func=env)
    actions.add_parser("halt", help="end every fault lease in every team's lab now, each reverted").set_defaults(func=halt)
    actions.add_parser("down", help="stop every team's lab").set_defaults(func=down)
    for name, child in actions.choices.items():
        commandline.explain(child, *(f"stormlab room {line}" for line in EXAMPLES[name]), description=DESCRIPTIONS.get(name))


EXAMPLES = {  # each as a person types it (a test parses every one)
    "up": ("up --teams 4 --scenario scenarios/room-2015.yaml", "up --teams 2 --scenario scenarios/room-2015.yaml --listen 0.0.0.0 --tls"),
    "status": ("status", "status --json"),
    "play": ("play", "play scenarios/room-2015.yaml --autopilot"),
    "end": ("end",),
    "inject": ("inject 'Customers report errors on the catalog table' --to database --expect post --names-tables --within 5m",),
    "hold": ("hold",),
    "continue": ("continue",),
    "console": ("console", "console --port 8708 --listen 0.0.0.0"),
    "debrief": ("debrief",),
    "env": ("env team-1",),
    "halt": ("halt",),
    "down": ("down",),
}
DESCRIPTIONS = {
    "up": "Size the room against this host (how many teams of how many nodes at which speed stay valid here), then start "
    "one lab per team, sharing nothing: each its own processes (or compose project), ports, state directory and tokens. "
    "It prints each team's directory; `room play` starts the game in every lab.",
    "status": "Each team's lab: nodes serving, the customers' error rate, whether the lab is valid, and its game if one is on.",
    "end": "End the game in every team's lab: each runner rolls back every lease, scores its game and writes its report; "
    "then the room's debrief, every team side by side.",
    "continue": "Let the held game go on in every team's lab: each game's clock runs again from where it stood.",
    "console": "Serve the facilitator's console: every team side by side in the browser (errors, margin, pages, moves), and "
    "its controls (play, hold, continue, inject, end) behind the room's token.",
    "debrief": "Write the room's debrief again (room/debrief.html): every team's game beside the others' and the 2015 "
    "account. `room end` writes it.",
    "halt": "End every fault lease in every team's lab now, each reverted by its holder; a lab that does not answer is named.",
    "down": "Stop every team's lab (exactly what `room up` started) and the room's pages.",
}


def room_backend(given: str | None) -> str:
    """Where a room's labs run, as the room's card says it: local, or compose (``--backend docker``)."""
    chosen = given if given not in (None, "auto") else backend_word(os.environ.get("STORMLAB_BACKEND") or "local")
    if chosen not in BACKENDS:
        raise UsageError(f"STORMLAB_BACKEND={chosen}: a backend is one of {', '.join(BACKENDS)}")
    if chosen == "k8s":
        raise UsageError("Kubernetes has no room yet: a room's labs run on this host (--backend local) or in compose (--backend docker)")
    return "compose" if chosen == "docker" else "local"


def up(args: argparse.Namespace, settings: LabSettings) -> int:
    where = reach.from_args(args)
    if args.external_rack:
        raise UsageError("--external-rack runs one lab's rack: start that lab with `stormlab up`, not a room")
    if args.base_port != launcher.DEFAULT_BASE_PORT:
        raise UsageError("a room's labs each take free ports: drop --base-port")
    if args.scenario is not None:  # the scenario's settings, and what --set (and --seed) change on top
        given = [flag_of(k) for k in SCENARIO_SETS if getattr(args, k, None) is not None]
        if args.profile != DEFAULT_PROFILE:
            given.append("--profile")
        if given:
            raise UsageError(f"with --scenario the labs take its settings: drop {', '.join(given)} (change one with --set KEY=VALUE)")
        settings = gameday_cli.read(args.scenario).settings.with_text(args.set)
        if args.seed is not None:
            settings = settings.replace(seed=args.seed)
    args.backend = room_backend(args.backend)
    sizing = room.size(args.teams, settings.nodes_total, parse_speed(args.speed), backend=args.backend)
    print(f"room: {sizing.words()}", flush=True)
    scenario_path = None if args.scenario is None else args.scenario.resolve()
    say = lambda line: print(line, flush=True)  # noqa: E731
    card = room.up(settings.sped_up(sizing.speed), sizing, say=say, scenario=scenario_path, backend=args.backend, where=where, tls=args.tls)
    commandline.tell(room={k: v for k, v in card.items() if k in ("teams", "sizing", "backend", "compose", "scenario")})
    if args.backend == "compose":
        print("each team plays its own stack (status, chaos, ops, scenario run --backend docker) with its variables:")
        for team, variables in card["compose"].items():
            print(
                f'  {team}: eval "$(stormlab room env {team})"  (project {variables["COMPOSE_PROJECT_NAME"]}; '
                f"metadata on 127.0.0.1:{variables['METADATA_PORT']}, Prometheus on :{variables['PROMETHEUS_PORT']}, "
                f"Grafana on :{variables['GRAFANA_PORT']})"
            )
    else:
        print("each team plays its own lab (status, chaos, ops, scenario run) with its state directory:")
        for team, directory in card["teams"].items():
            print(f"  {team}: STORMLAB_STATE_DIR={directory}")
    said = Reach.of(card.get("reach"))
    if not said.local:
        print(f"the room's pages are served on {said.listen}; the players' links use {said.base()}")
    if said.tls:
        print(f"over https: the players check their browser shows this certificate's SHA-256 fingerprint: {said.tls.fingerprint()}")
    print("`stormlab room status` reads every team's lab; `stormlab room down` stops them all")
    return 0


async def readings(card: dict[str, Any]) -> dict[str, room_web.Seen | None]:
    """Each team's reading and its validity (None: its lab is not up)."""
    async with aiohttp.ClientSession() as session:

        async def one(team: str) -> room_web.Seen | None:
            state = await asyncio.to_thread(room.team_state, card, team)
            if not state:
                return None
            if card.get("backend") == "compose":
                snap = await room_compose.sample(card["compose"][team], Path(card["teams"][team]))
            else:
                snap = await observe.snapshot(session, state, token=lab_token_in(Path(card["teams"][team])))
            return room_web.Seen(snap, observe.now_invalid(snap))

        teams = list(card["teams"])
        found = await asyncio.gather(*(one(team) for team in teams))
        return dict(zip(teams, found, strict=True))


def status(args: argparse.Namespace) -> int:
    card = room.the_card()
    seen = asyncio.run(readings(card))
    games = room.game_state()
    if args.json:
        teams = {team: None if s is None else s.to_json() for team, s in seen.items()}
        print(json.dumps({"room": card, "teams": teams, "games": games}, indent=1))
        return 0
    print(f"room: {card['sizing']['teams']} teams of {card['sizing']['nodes']:,} nodes at speed {card['sizing']['speed']:g}")
    for team, one in seen.items():
        if one is None:
            print(f"  {team}: not up")
            continue
        valid = "valid" if not one.invalid else "INVALID: " + "; ".join(one.invalid)
        snap = one.reading
        error = snap.customer_error_ratio
        game = games.get(team)
        playing = "" if game is None else "; game on" if game["running"] else f"; game ended: {game['outcome'] or game.get('said')}"
        launches = "" if snap.launch_error_ratio is None else f", launches {snap.launch_error_ratio:.1%} failing"  # aws-2025-10
        print(
            f"  {team}: {snap.nodes_serving}/{snap.nodes_total} nodes serving, customers "
            f"{'n/a' if error is None else f'{error:.1%}'} failing{launches}, {valid}{playing}"
        )
    return 0


async def games(card: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each team's game: its runner's state, and what its desk shows (``view``: /game.json, read
    with the team's lab token: a desk served to other machines shows its game to its own team only)."""
    state = room.game_state()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as session:

        async def view(team: str, desk: str | None) -> dict[str, Any] | None:
            if not desk:
                return None
            try:
                token = lab_token_in(Path(card["teams"][team]))
                async with session.get(f"{desk}/game.json", headers=headers(token)) as resp:
                    return await resp.json() if resp.status == 200 else None
            except (TimeoutError, aiohttp.ClientError, ValueError):
                return None  # a runner between its rollbacks and its exit: the next reading says it ended

        views = await asyncio.gather(*(view(team, s.get("desk")) for team, s in state.items()))
    out = {}
    for (team, s), v in zip(state.items(), views, strict=True):
        out[team] = s | {"view": v} | ({"score": v["score"]} if v and v.get("score") else {})
    return out


def the_scenario(given: Path | None, card: dict[str, Any]) -> Path:
    """The scenario named, else the room's (`room up --scenario`)."""
    if given is not None:
        return given
    if card.get("scenario"):
        return Path(card["scenario"])
    raise UsageError("which scenario? name one (`room play FILE`), or start the room with `room up --scenario FILE`")


def checked_scenario(path: Path, card: dict[str, Any]) -> Path:
    """A scenario the room's labs can play: its file valid, its settings the labs'; else UsageError."""
    scenario = gameday_cli.read(path)
    speed = float(card["sizing"]["speed"])
    for team in card["teams"]:
        state = room.team_state(card, team)
        if state is None:
            continue  # room.play names the teams whose labs are down
        if card.get("backend") == "compose":  # the stack runs the settings compose carries, as the room gave them
            found = gameday_cli.differences(scenario.settings.sped_up(speed), card["settings"])
            unlike = {k: v for k, v in found.items() if k in room_compose.carried() and k != "STORMLAB_SEED"}
        else:
            unlike = gameday_cli.unlike_lab(scenario.settings.sped_up(speed), state)
        if unlike:
            raise UsageError(
                f"{path}: the room's labs do not have this scenario's settings ({team}'s lacks "
                f"{' '.join(f'{k}={v}' for k, v in unlike.items())}): `stormlab room down`, then `room up` with them"
            )
    return path


def play(args: argparse.Namespace) -> int:
    card = room.the_card()
    game = room.play(checked_scenario(the_scenario(args.scenario, card), card), args.autopilot)
    print(f"game on in {len(game['teams'])} labs: {game['scenario']}; waiting for each team's lab to settle …", flush=True)
    room.wait_for_desks(tick=lambda: print(".", end="", flush=True))
    print()
    links = {team: room.player_links(Path(where)) for team, where in card["teams"].items()}
    commandline.tell(scenario=str(game["scenario"]), links=links)  # what an organiser's script hands out
    for team, roles_links in links.items():
        print(f"{team}: the players' consoles (hand each role its link; the token is in it):")
        for role, link in roles_links.items():
            print(f"  {role:<9} {link}")
    served = Reach.of(card.get("reach"))
    if served.tls:
        print(f"over https: before going on, each player checks the certificate's SHA-256 fingerprint is {served.tls.fingerprint()}")
    print("`stormlab room console` shows every team; `stormlab room end` ends the game in every lab")
    return 0


def inject(args: argparse.Namespace) -> int:
    body = {"to": args.to, "message": args.message, "expect": args.expect, "within": args.within, "names_tables": args.names_tables}
    live_inject(body, "check")  # a malformed inject is told as such (exit 2) before "no game" (exit 1)
    if room.read_game() is None:
        raise LabError("no game was started in this room (`stormlab room play SCENARIO`)")
    sent = room.inject(body, args.team)
    commandline.tell(sent=sent)
    for team, what in sent.items():
        print(
            f"  {team}: " + (f"sent {what['name']} at {what['fired_s']:g} s of its game" if isinstance(what, dict) else f"not sent: {what}")
        )
    if not any(isinstance(what, dict) for what in sent.values()):
        raise LabError("the inject reached no team's game")
    return 0


def hold(on: bool) -> int:
    if room.read_game() is None:
        raise LabError("no game was started in this room (`stormlab room play SCENARIO`)")
    told = room.hold(on)
    for team, what in told.items():
        if isinstance(what, str):
            print(f"  {team}: not told: {what}")
        elif not what.get("started", True):
            print(f"  {team}: not told: its game has not begun (its lab is settling)")
        else:
            now = "held" if what["held"] else "on"
            print(f"  {team}: {now} at {what['t']:g} s of its game" + ("" if what["changed"] else f" (it was {now} already)"))
    if not any(isinstance(what, dict) for what in told.values()):
        raise LabError("no team's game was told")
    return 0


def end(args: argparse.Namespace) -> int:
    if room.read_game() is None:
        raise LabError("no game was started in this room (`stormlab room play SCENARIO`)")
    print("ending the game in every lab (each runner rolls back and scores) …", flush=True)
    ended = room.end()
    commandline.tell(teams=ended)
    for team, state in ended.items():
        said = state.get("outcome") or state.get("said") or "no outcome"
        print(f"  {team}: {said}" + (f"; report {state['report']}" if state.get("report") else ""))
    if (room.room_dir() / room_debrief.PAGE).exists():
        print(f"the room's debrief, every team side by side: {room.room_dir() / room_debrief.PAGE}")
    return 0


def debrief(args: argparse.Namespace) -> int:
    room.the_card()
    game = room.read_game()
    if game is None:
        raise LabError("no game was started in this room (`stormlab room play SCENARIO`)")
    path = room_debrief.write(room.room_dir(), game.get("started_at", 0.0))
    if path is None:
        raise LabError(f"no game of this room was scored yet (no journal of its game under {room.room_dir() / 'games'})")
    print(f"the room's debrief, every team side by side: {path}")
    return 0


def console(args: argparse.Namespace) -> int:
    card = room.the_card()
    token = room.facilitator_token()
    if token is None:
        raise LabError(f"the room's facilitator token is gone ({room.room_dir() / room.FACILITATOR}): `room down`, then `room up`")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port is a port number (0-65535), got {args.port}")
    start = None
    if args.scenario is not None or card.get("scenario"):
        start = partial(room.play, checked_scenario(the_scenario(args.scenario, card), card))
    controls = room_web.Controls(halt=room.halt, start=start, end=room.end, inject=room.inject, hold=room.hold)
    where = Reach.of(card.get("reach"))
    if args.listen:  # another address for the console alone; the room's certificate still serves it
        where = dataclasses.replace(where, listen=reach.parse_listen(args.listen))
    if args.public_url:
        where = dataclasses.replace(where, public_url=reach.parse_public_url(args.public_url))
    links = lambda: {team: room.player_links(Path(directory)) for team, directory in card["teams"].items()}  # noqa: E731
    shown = room_web.Console(card, lambda: readings(card), controls, token, lambda: games(card), room.room_dir(), not where.local, links)
    asyncio.run(serve(room_web.app(shown), where, args.port))
    return 0


async def serve(served: web.Application, where: Reach, port: int) -> None:
    """The console where ``where`` says until interrupted; says where (the port it got, for --port 0)."""
    at = await reach.start(served, where, port, "console", "--port")
    url, token = at.url, room.room_dir() / room.FACILITATOR
    console = served[room_web.CONSOLE]
    console.base = url  # the seats' claim links: the address the players reach the console at
    print(f"the room's console: {url}/ (its controls: {url}/#token=… with the token in {token})", flush=True)
    shown = f"{url}/join#token={join_token(console.token)}"  # the join token shows the page and can do nothing else
    print(f"the join page to project for the class (each role's seat as a claim code): {shown}", flush=True)
    if where.tls:
        print(f"its certificate's SHA-256 fingerprint: {where.tls.fingerprint()}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await at.runner.cleanup()


def env(args: argparse.Namespace) -> int:
    card = room.the_card()
    if args.team not in card["teams"]:
        raise UsageError(f"no team {args.team!r} in this room; teams: {', '.join(card['teams'])}")
    found = {"STORMLAB_STATE_DIR": card["teams"][args.team]}
    if card.get("backend") == "compose":
        variables = card["compose"][args.team]
        found |= {"STORMLAB_BACKEND": "docker", "STORMLAB_COMPOSE_PROJECT": variables["COMPOSE_PROJECT_NAME"]} | variables
    print(f"unset {' '.join(room.PRIVATE)}")  # the team's own token is in its directory: an exported one is another lab's
    for name, value in found.items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


def halt(args: argparse.Namespace) -> int:
    room.the_card()
    done = room.halt()
    for team, (count, failed) in done.items():
        print(f"  {team}: halted {count} fault(s)" + (f"; did not answer: {', '.join(failed)}" if failed else ""))
    silent = [team for team, (_, failed) in done.items() if failed]
    if silent:
        raise LabError(f"{', '.join(silent)}: some holders did not answer (named above); everything else was halted")
    return 0


def down(args: argparse.Namespace) -> int:
    stopped = room.down()
    print(f"stopped {len(stopped)} team lab{'s' if len(stopped) != 1 else ''} ({', '.join(stopped)})" if stopped else "no room was up")
    return 0
