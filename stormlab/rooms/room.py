"""A training room: one lab per team on one host, sharing nothing but the host.

Game-day organisers run the exercise for a room of people: ``stormlab room up --teams N`` starts N
labs of one profile and one seed (every team meets the same storm), each in a state directory of
its own (``room/team-1`` … under the state directory: its token, its ports, its link proxy, its
kernel link chains, its fault leases and journal), so a move in one lab cannot reach another.
A team plays its lab as one plays any lab, with that directory: ``STORMLAB_STATE_DIR=… stormlab
status | chaos … | ops …``.

On docker compose (``--backend compose``) each team's lab is a compose project of its own
(``stormlab-team-1`` …: the whole stack, its network, volumes and token, on a block of ports of its
own; stormlab/rooms/room_compose.py); the room's commands act on every team's stack the same way.

Before starting anything the room is sized against the host: a lab of the 2015 profile at the herd
takes what :func:`lab_cores` says (measured here, docs/rooms.md), the room's labs together must
stay under the validity budget of the host's cores, and a room that cannot is refused with the
reason and what would fit (fewer teams, or a slower speed). Once up, each team's lab is judged
valid or not on its own readings (``room status``), as ``stormlab status`` judges a lab.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from chaos import client
from stormcore.auth import ENV as TOKEN_ENV
from stormcore.auth import FILE_ENV as TOKEN_FILE_ENV
from stormcore.auth import lab_token_in
from stormcore.errors import LabError, UsageError
from stormcore.labstate import running, state_dir
from stormcore.procs import Child
from stormcore.settings import LabSettings
from stormlab.engine import launcher
from stormlab.engine.speed import HERD_CPU_FACTOR, LADDER
from stormlab.responder import reach, roles
from stormlab.responder.moves import ROLES
from stormlab.responder.reach import Reach
from stormlab.rooms import room_compose, room_debrief
from stormlab.scenarios.scenario import live_inject

ROOM = "room"
CARD = "room.json"
GAME = "game.json"  # the room's game: the scenario every team plays, each team's runner
GAME_LOG = "game.log"  # a team's runner's lines (--json), in the team's directory
FACILITATOR = "facilitator"  # the facilitator's token (0600): the console's controls take it
MAX_TEAMS = 32
PRIVATE = (TOKEN_ENV, TOKEN_FILE_ENV)  # a token exported where the room starts: each team's lab has its own instead
# What one lab takes from the host in its baseline, in cores at speed 1 (docs/rooms.md): a part that
# does not grow with the fleet (the metadata service's loop, loadgen, the link proxy, the cascade's
# services, the supervisor) and a part per node (the racks' renewals, the metadata service's work).
# A room's lab at the herd asks ROOM_HERD_CPU_FACTOR times the baseline: more than a lab alone
# (HERD_CPU_FACTOR), for its customers' retries and its runner's readings grow with the herd too.
LAB_FIXED_CORES = 0.12  # measured 2026-12-03, 2 cores: a 1,000-node lab 0.19 cores at its baseline
LAB_CORES_PER_NODE = 0.00007  # … and a 10,000-node lab 0.81 (docs/scale.md)
ROOM_HERD_CPU_FACTOR = 2.8  # measured 2026-12-05, 2 cores: each 400-node lab of a room 0.41-0.42 cores at the herd
# A host running several labs (each some 14 processes) breaks the loop-lag budget sooner than one lab's
# (LAB_CPU_BUDGET): measured 2026-12-05 here, four 400-node labs at the herd (1.64 cores, the host 91%
# busy) ran loadgen and racks 127-256 ms late, three (1.25 cores, the host 68-80%) stayed valid.
ROOM_CPU_BUDGET = 0.70
# On compose a team's stack is some 36 containers: each rack and service its own interpreter, their
# healthchecks (an exec every 5 s each), Docker's port proxies, Prometheus and Alertmanager. Measured
# 2026-12-03 here (2 teams of 400 nodes): 0.50 cores a team at its baseline, 0.63 in the storm, 0.87
# at the herd, against the local lab's 0.15 / 0.30: a part that grows with the herd like the rest.
# And a host running them breaks the loop-lag budget sooner (loadgen 210-240 ms late with the host
# 75% busy), so compose rooms keep their herds under a lower share of the cores.
COMPOSE_TEAM_CORES = 0.29
COMPOSE_SPEEDS = (1.0,)  # game days on compose run the stack at its STORMLAB_SPEED, 1


def lab_cores(nodes: int, speed: float, backend: str = "local") -> float:
    """What one lab of ``nodes`` asks of the host at the herd, in cores, at ``speed``."""
    if backend == "compose":  # its herd measured at HERD_CPU_FACTOR times the stack's baseline
        return HERD_CPU_FACTOR * (LAB_FIXED_CORES + COMPOSE_TEAM_CORES + LAB_CORES_PER_NODE * nodes) * speed
    return ROOM_HERD_CPU_FACTOR * (LAB_FIXED_CORES + LAB_CORES_PER_NODE * nodes) * speed


def teams_fit(nodes: int, speed: float, cores: int, backend: str = "local") -> int:
    """How many labs of ``nodes`` fit on ``cores`` at ``speed``: their herds together under the budget."""
    return math.floor(ROOM_CPU_BUDGET * cores / lab_cores(nodes, speed, backend) + 1e-9)


@dataclass(frozen=True)
class Sizing:
    teams: int
    nodes: int  # each team's fleet
    speed: float
    host_cores: int
    fit: int  # teams of this size the host holds at this speed
    cores: float  # what the room asks at the herd

    def words(self) -> str:
        return (
            f"{self.teams} team{'s' if self.teams > 1 else ''} of {self.nodes:,} nodes at speed {self.speed:g}: "
            f"{self.cores:.2f} of the host's {self.host_cores} cores at the herd "
            f"(up to {self.fit} team{'s fit' if self.fit != 1 else ' fits'} here at this speed)"
        )


def size(teams: int, nodes: int, speed: float | None, cores: int | None = None, backend: str = "local") -> Sizing:
    """The room's sizing: ``speed`` None picks the fastest of the ladder at which every team fits;
    a room that does not fit is refused (UsageError) with what would. On compose the speed is 1."""
    cores = cores or os.cpu_count() or 1
    ladder = COMPOSE_SPEEDS if backend == "compose" else LADDER
    if not 1 <= teams <= MAX_TEAMS:
        raise UsageError(f"--teams is a whole number from 1 to {MAX_TEAMS}, got {teams}")
    if speed is not None and speed not in ladder and backend == "compose":
        raise UsageError(f"a room on compose runs at speed 1 (its game days read the stack at its STORMLAB_SPEED), not {speed:g}")
    if speed is None:
        fits = [s for s in ladder if teams_fit(nodes, s, cores, backend) >= teams]
        if not fits:
            raise UsageError(
                f"{teams} teams of {nodes:,} nodes do not fit on {cores} cores even at speed {ladder[-1]:g} "
                f"(each lab asks {lab_cores(nodes, ladder[-1], backend):.2f} cores at the herd there): fewer teams, or smaller fleets"
            )
        speed = fits[0]
    fit = teams_fit(nodes, speed, cores, backend)
    sizing = Sizing(teams, nodes, speed, cores, fit, teams * lab_cores(nodes, speed, backend))
    if teams > fit:
        slower = next((s for s in ladder if teams_fit(nodes, s, cores, backend) >= teams), None)
        hint = f"; at --speed {slower:g} all {teams} fit" if slower is not None else ""
        other = (
            "a compose room runs at speed 1: fewer teams, or --backend local, whose labs ask less"
            if backend == "compose"
            else "or --speed auto"
        )
        raise UsageError(
            f"{sizing.words()}: over the {ROOM_CPU_BUDGET:.0%} "
            f"of the host's cores a valid {'compose room' if backend == 'compose' else 'room'} may use: "
            f"at most {fit} team{'s' if fit != 1 else ''} here{hint} ({other})"
        )
    return sizing


# -- the room on disk, and its labs ------------------------------------------------------------


def room_dir(directory: Path | None = None) -> Path:
    return (directory or state_dir()) / ROOM


def team_names(teams: int) -> list[str]:
    return [f"team-{i}" for i in range(1, teams + 1)]


def read_card(directory: Path | None = None, name: str = CARD) -> dict[str, Any] | None:
    """The room's card (room.json), or another of its JSON files (``name``); None if there is none."""
    try:
        card = json.loads((room_dir(directory) / name).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return card if isinstance(card, dict) else None


def the_card(directory: Path | None = None) -> dict[str, Any]:
    """The room's card, or LabError: no room is up."""
    card = read_card(directory)
    if card is None:
        raise LabError("no room is up: start one with `stormlab room up --teams N`")
    return card


def up(
    settings: LabSettings,
    sizing: Sizing,
    directory: Path | None = None,
    say=print,
    scenario: Path | None = None,
    backend: str = "local",
    where: Reach | None = None,
    tls: bool = False,
) -> dict[str, Any]:
    """Start one lab per team (each in its own state directory, on free ports; on compose a
    project each, on its block of ports); if one cannot start, stop those that did. The room's
    card (room.json) says who is where, and where its pages are served (``where``: loopback by
    default; ``tls``: over https with a certificate made for it, kept in the room's directory)."""
    where = where or Reach()
    home = room_dir(directory)
    earlier = read_card(directory)
    if earlier and any(team_state(earlier, t) for t in earlier.get("teams", {})):
        raise LabError(f"a room is already up (in {home}); run `stormlab room down` first")
    home.mkdir(parents=True, exist_ok=True)
    if tls:
        where = reach.with_certificate(where, home)
    teams = team_names(sizing.teams)
    card: dict[str, Any] = {
        "backend": backend,
        "teams": {t: str(home / t) for t in teams},
        "sizing": asdict(sizing),
        "settings": settings.to_env(),
        "reach": where.record(),
    }
    if backend == "compose":
        card["compose"] = {t: room_compose.variables(t, n, settings, home / t) for n, t in enumerate(teams, start=1)}
        for n in range(1, len(teams) + 1):
            room_compose.check_ports(n)
    if scenario is not None:
        card["scenario"] = str(scenario)
    (home / CARD).write_text(json.dumps(card, indent=1))
    roles.write_private(home / FACILITATOR, secrets.token_urlsafe(24) + "\n")
    started = []
    try:
        if backend == "compose":  # the stacks start side by side: Docker does the waiting
            for team in teams:
                say(f"  {team}: starting {settings.nodes_total:,} nodes (compose project {room_compose.project(team)}) …")
            started += teams
            room_compose.up_teams({t: (card["compose"][t], home / t) for t in teams}, say)
        else:
            for team in teams:
                say(f"  {team}: starting {settings.nodes_total:,} nodes …")
                started.append(team)
                launcher.up(settings, base_port=0, directory=home / team, token=lab_token_in(home / team))  # its own, always
    except BaseException:
        for team in started:
            try:
                stop_team(card, team)
            except LabError as exc:  # the first failure is the one to tell; this one is said
                say(f"  {team}: not stopped: {exc}")
        (home / CARD).unlink(missing_ok=True)
        (home / FACILITATOR).unlink(missing_ok=True)
        raise
    return card


def team_state(card: dict[str, Any], team: str) -> dict[str, Any] | None:
    """A team's lab as `ops` and the observers see it (its processes' URLs, its settings), or None
    if it is not up."""
    where = Path(card["teams"][team])
    if card.get("backend") == "compose":
        return room_compose.state(card["compose"][team], where)
    return running(where)


def stop_team(card: dict[str, Any], team: str) -> bool:
    """A team's lab stopped (on compose: its project removed with its volumes); whether it was up."""
    where = Path(card["teams"][team])
    if card.get("backend") == "compose":
        return room_compose.down_team(card["compose"][team], where)
    return launcher.down(where)


def facilitator_token(directory: Path | None = None) -> str | None:
    try:
        return (room_dir(directory) / FACILITATOR).read_text().strip() or None
    except FileNotFoundError:
        return None


def each_team(card: dict[str, Any], act: Callable[[str], Any], at_once: bool = False) -> dict[str, Any]:
    """``act`` done for every team of the room: side by side on compose (each a `docker compose`
    run of seconds) or when asked ``at_once``, one after the other for local labs."""
    teams = list(card["teams"])
    if card.get("backend") != "compose" and not at_once:
        return {team: act(team) for team in teams}
    with ThreadPoolExecutor(max_workers=len(teams)) as pool:
        return dict(zip(teams, pool.map(act, teams), strict=True))


def halt(directory: Path | None = None) -> dict[str, tuple[int, list[str]]]:
    """End every fault lease in every team's lab, each reverted, every team asked at once: per team,
    how many and what did not answer (a team whose lab is not up is left out; one whose services do
    not answer is halted as far as it can be, and named)."""
    card = read_card(directory)
    if card is None:
        return {}

    def one(team: str) -> tuple[int, list[str]] | None:
        where = Path(card["teams"][team])
        try:
            if card.get("backend") == "compose":  # not its /status: a frozen metadata service must not hide its freeze
                variables = card["compose"][team]
                return room_compose.halt(variables, where) if room_compose.stack_up(variables, where) else None
            state = running(where)
            return None if state is None else client.halt_every_holder(state, lab_token_in(where))
        except Exception as exc:  # this team's lab, not the others': named, and the others are halted
            return 0, [f"{type(exc).__name__}: {exc}" if not isinstance(exc, LabError) else str(exc)]

    return {team: done for team, done in each_team(card, one, at_once=True).items() if done is not None}


def down(directory: Path | None = None) -> list[str]:
    """Stop every team's lab; the teams that were up."""
    card = read_card(directory)
    home = room_dir(directory)
    if card is None:
        return []
    end(directory)  # a game on: its runners roll back first, their labs still up
    (home / GAME).unlink(missing_ok=True)
    stopped = [team for team, was_up in each_team(card, partial(stop_team, card)).items() if was_up]
    (home / CARD).unlink(missing_ok=True)
    (home / FACILITATOR).unlink(missing_ok=True)
    return stopped


# -- the game: one scenario runner per team, all started at once ---------------------------------

# Runners this process started, kept so it reaps them (the console starts games and stays).
_RUNNERS: dict[int, subprocess.Popen] = {}


def runner_alive(entry: dict[str, Any]) -> bool:
    """Whether a team's runner (game.json's ``{"pid", "started"}``) still runs: this process's
    child not yet reaped, or that very process (its pid and start time) neither gone nor a zombie.
    A pid alone is not a runner: once its runner is gone the pid may be anyone's."""
    pid = entry.get("pid")
    if isinstance(pid, int) and pid in _RUNNERS:
        return _RUNNERS[pid].poll() is None
    child = Child.read(entry)
    return child is not None and child.alive()


def read_game(directory: Path | None = None) -> dict[str, Any] | None:
    """The game started in the room (game.json), or None."""
    return read_card(directory, GAME)


def runner_argv(
    scenario: Path,
    team: str,
    speed: float,
    autopilot: bool,
    home: Path,
    desk_port: int | None = None,
    where: Reach | None = None,
    play_port: int = 0,
) -> list[str]:
    """A team's runner: the scenario on the team's lab (kept up), its desk on a free port (on
    compose: ``desk_port``, where the team's Alertmanager posts, and the players' pages on
    ``play_port`` when the room is served to other machines) where the room's pages are served,
    its lines as JSON, its run directory and the room's leaderboard in the room's directory."""
    argv = [sys.executable, "-m", "stormlab.cli", "scenario", "run", str(scenario), "--keep-lab", "--desk-port", str(desk_port or 0)]
    argv += ["--backend", "local" if desk_port is None else "docker"]
    reachable = where is not None and not where.local
    argv += where.argv() if where is not None and reachable else []
    argv += ["--play-port", str(play_port)] if reachable and desk_port is not None else []
    argv += ["--team", team, "--speed", f"{speed:g}", "--json", "--out", str(home / "games" / team)]
    argv += ["--leaderboard", str(home / "leaderboard.jsonl")]
    return argv + (["--autopilot"] if autopilot else [])


RUNNER_NICENESS = 10  # a team's runner gives way to the labs' processes when the host's cores are busy


def play(scenario: Path, autopilot: bool = False, directory: Path | None = None) -> dict[str, Any]:
    """Start the scenario in every team's lab at once: a runner per team, each against its own lab
    (its desk, its roles' tokens, its journal in the team's directory). One game at a time."""
    card = the_card(directory)
    home = room_dir(directory)
    earlier = read_game(directory)
    if earlier and any(runner_alive(t) for t in earlier["teams"].values()):
        raise LabError(f"a game is on in this room ({earlier['scenario']}): `stormlab room end` first")
    down_teams = [team for team in card["teams"] if not team_state(card, team)]
    if down_teams:
        raise LabError(f"these teams' labs are not up: {', '.join(down_teams)} (`stormlab room down`, then `room up` again)")
    speed = float(card["sizing"]["speed"])
    teams = {}
    for team, where in card["teams"].items():
        log_path = Path(where) / GAME_LOG
        # the team's token from its own directory, never one exported where the room started
        env = {k: v for k, v in os.environ.items() if k not in PRIVATE} | {"STORMLAB_STATE_DIR": where}
        desk_port, play_port = None, 0
        if card.get("backend") == "compose":
            env = room_compose.environment(card["compose"][team], Path(where))
            desk_port, play_port = room_compose.desk_port(card["compose"][team]), room_compose.play_port(card["compose"][team])
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                runner_argv(scenario.resolve(), team, speed, autopilot, home, desk_port, Reach.of(card.get("reach")), play_port),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # the room's Ctrl-C is not the runners': `room end` ends them, rolled back
            )
        # Below the labs on the CPU: every runner starts at once (the whole command, ~2.5 CPU-seconds of
        # imports each), and two of them took both cores of this 2-core host for seconds, long enough
        # to put a 400-node lab at speed 2 into the herd before its game began (seen here: INVALID, a
        # rack's loop 159 ms late, the team storming at its start). A runner samples; its labs serve.
        os.setpriority(os.PRIO_PROCESS, proc.pid, RUNNER_NICENESS)
        _RUNNERS[proc.pid] = proc
        teams[team] = Child.of(proc.pid).record() | {"log": str(log_path)}
    game = {"scenario": str(scenario.resolve()), "autopilot": autopilot, "started_at": time.time(), "teams": teams}
    (home / GAME).write_text(json.dumps(game, indent=1))
    return game


def events(log_path: Path) -> list[dict[str, Any]]:
    """A team's runner's JSON lines so far (a line being written is left for the next read)."""
    try:
        lines = log_path.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            out.append(event)
    return out


def game_state(directory: Path | None = None) -> dict[str, dict[str, Any]]:
    """Each team's game: running or not, its desk, its outcome once done (with its score), and
    the runner's last words when it ended without one (a refusal, a crash)."""
    card, game = read_card(directory), read_game(directory)
    if card is None or game is None:
        return {}
    out = {}
    for team, t in game["teams"].items():
        seen = events(Path(t["log"]))
        done = next((e for e in reversed(seen) if e.get("event") == "done"), None)
        desk = next((e.get("local") or e["url"] for e in seen if e.get("event") == "desk"), None)  # this host's way in
        alive = runner_alive(t)
        state = {"running": alive, "desk": desk if alive else None, "outcome": done["outcome"] if done else None}
        if done:
            state |= {"score": done.get("score"), "roles": done.get("roles"), "report": done.get("report")}
        elif not alive:
            try:
                state["said"] = Path(t["log"]).read_text().strip().splitlines()[-1][-300:]
            except (OSError, IndexError):
                state["said"] = ""
        out[team] = state
    return out


def player_links(team_dir: Path) -> dict[str, str]:
    """Each role's console in a team's game (its token in the fragment), or {} if no game is on there."""
    card = roles.current(team_dir)
    if card is None:
        return {}
    out = {}
    for role in ROLES:
        try:
            out[role] = f"{card['desk']}/play#token={(roles.game_dir(team_dir) / role).read_text().strip()}"
        except OSError:
            continue
    return out


def wait_for_desks(directory: Path | None = None, limit_s: float = 240.0, tick: Callable[[], None] = lambda: None) -> dict[str, str]:
    """Each team's desk once its runner has settled its lab and issued the roles' tokens; a runner
    that ended first is an error with its last words."""
    card = read_card(directory) or {"teams": {}}
    deadline = time.monotonic() + limit_s
    while True:
        state = game_state(directory)
        ended = {t: s for t, s in state.items() if not s["running"]}
        if ended:
            raise LabError("; ".join(f"{t}'s runner ended: {s.get('said') or s.get('outcome')}" for t, s in ended.items()))
        issued = {t: roles.current(Path(card["teams"][t])) for t in state}
        if state and all(issued.values()):
            return {t: c["desk"] for t, c in issued.items() if c}
        if time.monotonic() > deadline:
            raise LabError(f"the teams' runners did not settle their labs within {limit_s:g}s")
        tick()
        time.sleep(1.0)


def end(directory: Path | None = None, wait_s: float = 120.0) -> dict[str, dict[str, Any]]:
    """End the game in every team's lab: each runner is told to stop (SIGTERM: its rollbacks run,
    every fault is halted, its journal and report are written); waits for them, then writes the
    room's debrief (room/debrief.html: every team beside the others and the 2015 account). Each
    team's state after."""
    game = read_game(directory)
    if game is None:
        return {}
    runners = [(t, Child.read(t)) for t in game["teams"].values()]
    for entry, child in runners:  # only the very processes `room play` started: a pid alone may be anyone's now
        if child is not None and runner_alive(entry):
            child.send(signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while any(runner_alive(t) for t, _ in runners) and time.monotonic() < deadline:
        time.sleep(0.2)
    for entry, child in runners:
        if child is not None and runner_alive(entry):
            child.send(signal.SIGKILL)  # past its rollbacks' time: `room halt` ends what it left
        proc = _RUNNERS.pop(entry.get("pid"), None)
        if proc is not None:
            proc.wait()
    room_debrief.write(room_dir(directory), game.get("started_at", 0.0))
    return game_state(directory)


def inject(body: dict[str, Any], team: str | None = None, directory: Path | None = None) -> dict[str, dict[str, Any] | str]:
    """An inject typed live, sent now to every team's game (or ``team``'s) through its desk with its
    lab token: per team the inject as its runner recorded it, or why it was not sent. A body that is
    not an inject is refused before anything is sent (ScenarioError)."""
    live_inject(body, "check")
    return {t: a if isinstance(a, str) else a["inject"] for t, a in to_desks("/inject", body, team, directory).items()}


def hold(on: bool, directory: Path | None = None) -> dict[str, dict[str, Any] | str]:
    """Hold every team's game (``on``: its clock stands still, its players' moves on the lab wait;
    the labs run on) or let them all go on: per team what its runner said, or why it was not told."""
    return to_desks("/hold", {"on": on}, None, directory)


def to_desks(path: str, body: dict[str, Any], team: str | None, directory: Path | None) -> dict[str, dict[str, Any] | str]:
    """``body`` posted to every team's desk (or ``team``'s) with its lab token: per team the desk's
    answer, or why it was not sent (no game on there, the desk refused it or did not answer)."""
    state = game_state(directory)
    card = read_card(directory) or {"teams": {}}
    if team is not None and team not in card["teams"]:
        raise UsageError(f"no team {team!r} in this room; teams: {', '.join(card['teams'])}")
    out: dict[str, dict[str, Any] | str] = {}
    for name in [team] if team else list(card["teams"]):
        desk = state.get(name, {}).get("desk")
        if not desk:
            out[name] = "no game on in this lab"
            continue
        try:
            out[name] = client.call("POST", f"{desk}{path}", lab_token_in(Path(card["teams"][name])), body)
        except (UsageError, LabError, TimeoutError) as exc:
            out[name] = str(exc)
    return out
