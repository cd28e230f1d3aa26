"""`stormlab scenario run FILE` and `stormlab scenario validate FILE`."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Coroutine
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from chaos import catalog
from chaos.flags import add_backend
from chaos.journal import timeline
from stormcore import commandline, incidents
from stormcore.errors import UsageError
from stormcore.labstate import backend, running, state_dir
from stormcore.settings import SET_HELP, LabSettings, profile
from stormlab.engine import compose, launcher
from stormlab.engine.speed import first_guess, parse_speed
from stormlab.responder import desk, desk_web, monitoring, reach, roles
from stormlab.responder.alerts import Evaluator
from stormlab.responder.desk import TEAM, Desk
from stormlab.responder.moves import ACTIONS, INJECT, ROLES, fault_of, move_values
from stormlab.scenarios import debrief, leaderboard, report, scoring
from stormlab.scenarios.labs import DockerLab, LocalLab
from stormlab.scenarios.reader import load
from stormlab.scenarios.replay import Move, Script
from stormlab.scenarios.runner import Runner
from stormlab.scenarios.scenario import Scenario, ScenarioError, schedule

FLAGSHIP = f"scenarios/{incidents.FIRST.scenarios[0]}"  # the first incident's game day, the examples' scenario

EXIT_FAILED = 1  # an expectation did not hold
EXIT_INTERRUPTED = 130

T = TypeVar("T")


class RealClock:
    def now(self) -> float:
        """The monotonic clock the desk's entries are timed by too; read also after the loop has
        closed (an interrupted game's journal is written then)."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def add_parser(sub: argparse._SubParsersAction) -> None:
    sc = sub.add_parser(
        "scenario",
        help="game days: run or validate a scenario file",
        description="Run a scripted game day against the lab, or check a scenario file.",
    )
    actions = sc.add_subparsers(dest="scenario_command", required=True)
    v = actions.add_parser("validate", help="check a scenario file without running it (exit 2 if broken)")
    v.add_argument("file", type=Path)
    v.add_argument("--json", action="store_true", help="one JSON document: the file, its title, profile and steps")
    r = actions.add_parser("run", help="run a scenario: starts a local lab if none is up, writes a run directory")
    r.add_argument("file", type=Path)
    add_backend(r, ("local", "docker"))
    r.add_argument(
        "--speed",
        default="1",
        help="run the profile and the timeline this many times faster (0.05-20; below 1: slow motion for a slow host), "
        "or auto: the speed this host's cores manage for the scenario's fleet (default 1)",
    )
    r.add_argument("--seed", type=int, help="seed for the fault schedule and the lab (default: the scenario's)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP)
    r.add_argument("--autopilot", action="store_true", help="play AWS's runbook instead of waiting for players")
    r.add_argument("--out", type=Path, default=Path("reports/gamedays"), help="where run directories go")
    r.add_argument("--leaderboard", type=Path, help="leaderboard file (default: leaderboard.jsonl in the state dir)")
    r.add_argument("--keep-lab", action="store_true", help="leave a lab this command started running")
    r.add_argument("--team", default="", help="the team's name on the leaderboard (a team plays with `stormlab ops --as ROLE`)")
    r.add_argument(
        "--desk-port",
        type=int,
        default=desk.DEFAULT_PORT,
        help=f"where the runner serves the status page and takes Alertmanager's pages (default {desk.DEFAULT_PORT}; 0: any free port)",
    )
    r.add_argument(
        "--play-port",
        type=int,
        default=0,
        help="with --backend docker and --listen or --tls: the port of the players' pages (default 0: any free port); the "
        "desk's --desk-port stays on the address containers reach the host at, in plain http, for the stack's Alertmanager",
    )
    reach.add_arguments(r, "the desk and the players' consoles")
    r.add_argument("--json", action="store_true", help="one JSON object per line on stdout: steps, progress, pages, the result")
    r.set_defaults(answered="stream")  # one document a line while it plays; the last, its result or its error
    r.add_argument(
        "--base-port",
        type=int,
        default=launcher.DEFAULT_BASE_PORT,
        help=f"first port of a lab this command starts (default {launcher.DEFAULT_BASE_PORT}; 0 picks free ports)",
    )
    sc.set_defaults(func=run)
    commandline.explain(
        v,
        f"stormlab scenario validate {FLAGSHIP}",
        "stormlab scenario validate my-game.yaml --json",
        description="Read a scenario file as `scenario run` would (its schema, its steps, its faults' arguments, its "
        "expectations) without running it: exit 0 if it can run, 2 with every problem named if not.",
    )
    commandline.explain(
        r,
        f"stormlab scenario run {FLAGSHIP} --autopilot --speed 2",
        f"stormlab scenario run {FLAGSHIP} --team blue",
        description="Play a scenario against the lab (one is started if none is up, and stopped after): its steps at their "
        "times, its pages to the on-call roles, the players' moves through the desk; then every lease rolled back, the game "
        "scored against its expectations and a run directory written (journal, report, charts). Exit 0 if every "
        "expectation held, 1 if one failed.",
    )


def read(path: Path) -> Scenario:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"{path}: {exc.strerror}") from None
    scenario = load(text, str(path))
    check_faults(scenario, str(path))
    return scenario


def check_faults(scenario: Scenario, source: str) -> None:
    """Every fault and move as the fault catalog takes it (its arguments, its limits), on a lab
    of the scenario's size; a bad argument names the step's line."""
    racks = scenario.settings.racks
    for planned in schedule(scenario, scenario.settings.seed):
        for step in (planned.step, *planned.step.autopilot, *scenario.rollback):
            args = planned.args if step is planned.step else step.args
            try:
                if step.fault:
                    catalog.request(step.fault, args, racks)
                elif step.action and (fault := fault_of(move := ACTIONS[step.action], args)):
                    catalog.request(fault, move_values(move, args), racks)
            except catalog.ChaosError as exc:
                raise ScenarioError(f"{source}:{step.line}: {step.path} ({step.name}): {exc}") from None


def run(args: argparse.Namespace) -> int:
    scenario = read(args.file)
    if args.scenario_command == "validate":
        checked = {"file": str(args.file), "ok": True, "title": scenario.title, "profile": scenario.profile, "steps": len(scenario.steps)}
        print(
            json.dumps(checked)
            if args.json
            else f"{args.file}: ok — {scenario.title!r}, {len(scenario.steps)} steps, profile {scenario.profile}"
        )
        return 0
    say = Say(args.json)
    requested = parse_speed(args.speed)
    args.speed = requested if requested is not None else first_guess(scenario.settings.with_text(args.set).nodes_total)
    if requested is None:
        say("speed", f"speed auto: {args.speed:g} for this host's {os.cpu_count()} cores (the report says whether the run stayed valid)")
    docker = backend(args.backend, ("local", "docker")) == "docker"
    if scenario.promql() and not docker:
        raise ScenarioError(f"{args.file}: its promql probes need the compose stack's Prometheus: --backend docker")
    seed = scenario.settings.seed if args.seed is None else args.seed
    settings = scenario.settings.with_text(args.set).replace(seed=seed).sped_up(args.speed)
    plan = schedule(scenario, seed, args.speed)
    if docker:
        if args.speed != 1:
            raise ScenarioError(
                "--speed applies to a lab the runner starts; the compose stack runs at its STORMLAB_SPEED (.env), "
                "and its game days need that at 1"
            )
        needed = " ".join(f"{k}={v}" for k, v in differences(settings, scenario.profile).items())
        if needed:
            say("needs", f"this scenario needs the stack started with: {needed} docker compose up -d")
        return play(scenario, plan, seed, args, DockerLab(state_dir(), scenario.promql()))
    state, started = running(), False
    if state is not None:
        if unlike := unlike_lab(settings, state):
            raise ScenarioError(
                f"a lab is already up with other settings (the scenario needs "
                f"{' '.join(f'{k}={v}' for k, v in unlike.items())}): `stormlab down` first "
                "and the scenario starts its own"
            )
    else:
        say("starting", f"starting a local lab: {settings.nodes_total} nodes, {args.speed:g}x speed, seed {seed}")
        state, started = launcher.up(settings, args.base_port), True
    try:
        with launcher.terms_as_interrupt():  # SIGTERM or SIGHUP at any point still stops the lab it started
            return play(scenario, plan, seed, args, LocalLab(state))
    finally:
        if started and not args.keep_lab:
            launcher.down()


def unlike_lab(settings: LabSettings, state: dict) -> dict[str, str]:
    """The settings a running lab does not have of those a scenario needs (its seed aside: a
    scenario plays on a lab of any seed); link_cut=auto read as the launcher would choose."""
    wanted, _ = launcher.choose(settings)
    return {k: v for k, v in differences(wanted, state["settings"]).items() if k != "STORMLAB_SEED"}


def differences(settings: LabSettings, other: str | dict) -> dict[str, str]:
    """The settings' variables that differ from a profile's (by name) or from a running lab's."""
    theirs = profile(other).to_env() if isinstance(other, str) else other
    return {k: v for k, v in settings.to_env().items() if theirs.get(k) != v}


class Say:
    """What the runner tells the room: lines for people, or JSON objects (``--json``)."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def __call__(self, event: str, text: str, **fields: object) -> None:
        print(json.dumps({"event": event, **fields, "text": text}) if self.as_json else text, flush=True)

    def progress(self, p: dict) -> None:
        value = "n/a" if p["value"] is None else f"{p['value']:.3g}"
        errors = "n/a" if p["customer_error_ratio"] is None else f"{100 * p['customer_error_ratio']:.1f}%"
        left = "" if p["left_s"] is None else f"; {p['left_s']:g}s left"
        now = f"; {p['probe']} now {value}" if p["probe"] else ""
        launches = "" if p.get("launch_error_ratio") is None else f", launch errors {100 * p['launch_error_ratio']:.1f}%"
        line = f"[{p['t']:7.1f}s] waiting: {p['step'] or 'next step'}: {p['waiting_for']}{now}{left} (customer errors {errors}{launches})"
        self("progress", line, **p)


def play(scenario: Scenario, plan: list, seed: int, args: argparse.Namespace, lab) -> int:
    say = Say(args.json)
    text = args.file.read_text()  # what a replay plays again (stormlab replay): read now, the file may change
    book = Desk(Path(lab.ops.directory), scenario.title, team=args.team)  # the game's one record of pages and moves
    lab.ops.journal, lab.ops.unacked = book.journal, book.unacked  # the autopilot's moves go into it too
    evaluator = None if isinstance(lab, DockerLab) else Evaluator(lambda body: page(book, body, "runner", say), args.speed)
    shared = shared_fate(scenario, lab)
    watching = [] if evaluator is None else [lambda sample: evaluator.observe(sample.t, sample, time.time())]
    watching += [] if shared is None else [lambda sample: shared.observe(sample, time.time())]
    runner = Runner(
        scenario,
        plan,
        lab,
        RealClock(),
        autopilot=args.autopilot,
        speed=args.speed,
        echo=lambda line: say("step", line),
        observers=tuple(watching),
        progress=say.progress,
        on_inject=partial(deliver, book, say),
        script=Script(args.script, partial(replayed_move, lab)) if getattr(args, "script", None) else None,
    )
    try:
        journal = run_loop(settle_then(lab, runner, book, args, say, shared))
    except (KeyboardInterrupt, asyncio.CancelledError):
        journal = runner.journal("interrupted")
        say("interrupted", "interrupted: rollbacks ran, every fault halted")
    journal = scoring.judged_effects(journal, lab.effects().effect_of)  # the leases have all ended: rolled back
    journal["seed"] = seed
    journal["team"] = args.team
    journal["scenario_text"] = text
    journal["set"] = list(args.set)
    journal["started_at"] = lab.started_at  # when t = 0 was (epoch seconds)
    pages = timeline([p for p in book.pages if p["mono"] >= lab.started_mono], lab.started_mono, lab.started_at)
    journal["pages"] = runner.on_game_clock(pages)
    return finish(scenario, journal, args, say)


async def replayed_move(lab, move: Move) -> dict:
    """A replay's move, made as the desk made it in the game: as its role, its arguments as given."""
    return await lab.ops.run(move.action, move.args, move.role)


def run_loop(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, then SIGTERM and SIGHUP interrupting again: closing the loop put them back
    to the default, which would kill the runner during scoring and reports, its lab left up."""
    try:
        return asyncio.run(coro)
    finally:
        launcher.interrupt_on_term()


def page(book: Desk, body: dict, via: str, say: Say) -> None:
    """A page the runner's own evaluation raised (the local lab): taken as Alertmanager's are."""
    for p in book.page(body, via):
        announce(say, p)


EXPECTED = {"ack": "acknowledge it", "post": "a status post", "note": "a note"}


def deliver(book: Desk, say: Say, inject: dict) -> None:
    """An inject, delivered as a page to its role (to each role for the team's): it waits on the
    consoles and in `ops` like any page, and `ops --as ROLE ack NAME` acknowledges it."""
    to = list(ROLES) if inject["to"] == TEAM else [inject["to"]]
    asked = EXPECTED[inject["answer"]] + (" naming the tables whose customers fail" if inject["names_tables"] else "")
    summary = f"{inject['message']} (expected: {asked} within {inject['within_s']:g}s)"
    labels = [{"alertname": inject["name"], "role": role, "severity": INJECT} for role in to]
    book.page({"alerts": [{"labels": lab, "annotations": {"summary": summary}} for lab in labels]}, INJECT)
    say("inject", f"INJECT {inject['name']} -> {inject['to']}: {summary}", **inject)


def announce(say: Say, p: dict) -> None:
    say("page", f"PAGE {p['status'].upper()} {p['alert']} -> {p['role']}: {p['summary']}", **p)


def shared_fate(scenario: Scenario, lab) -> monitoring.SharedFate | None:
    """The players' monitoring through the lab's own metrics service, if the scenario asks for it."""
    if scenario.monitoring != "shared-fate":
        return None
    url = lab.ops.state.get("components", {}).get("metrics", {}).get("url")
    if not url:
        raise UsageError("monitoring: shared-fate reads the lab's own metrics service, and this lab runs none")
    return monitoring.SharedFate(url)


async def settle_then(
    lab, runner: Runner, book: Desk, args: argparse.Namespace, say: Say, shared: monitoring.SharedFate | None = None, limit_s: float = 180.0
) -> dict:
    """Before the timeline: every node serving, and the customers' 10 s error window clear of
    the start-up for every table (a lab just started refuses customers until its nodes have
    memberships, and a small table can still be over 5% when the aggregate is under 1%); then
    the desk (the status page, Alertmanager's webhook, the players' moves, with a token per
    role) for as long as the run lasts."""
    deadline, calm_since = time.monotonic() + limit_s, None
    while time.monotonic() < deadline:
        snap = await lab.sample()
        tables = [v or 0.0 for v in snap.table_error_ratio.values()]
        calm = (
            snap.nodes_total
            and snap.nodes_serving == snap.nodes_total
            and max([snap.customer_error_ratio or 0.0, *tables]) < 0.01  # every table: the aggregate can hide one
        )
        calm_since = (calm_since or time.monotonic()) if calm else None
        if calm_since and time.monotonic() - calm_since >= 5:
            break
        await asyncio.sleep(1.0)
    say(
        "settled",
        f"settled: {snap.nodes_serving}/{snap.nodes_total} nodes serving, customer errors {100 * (snap.customer_error_ratio or 0):.1f}%",
    )
    lab.started_at, lab.started_mono = time.time(), time.monotonic()
    # SIGTERM cancels the run like Ctrl-C does: the runner's rollbacks still run.
    task = asyncio.current_task()
    assert task is not None
    for sig in launcher.TERMINATING:
        asyncio.get_running_loop().add_signal_handler(sig, task.cancel)
    bridge = desk_host(isinstance(lab, DockerLab))
    where = reach.from_args(args, default=bridge)
    # On compose the stack's Alertmanager posts to the desk port on the host's bridge in plain http; players
    # reached elsewhere (or over TLS) get a port of their own.
    apart = isinstance(lab, DockerLab) and (where.listen != bridge or where.tls is not None)
    alerts, port = ((bridge, args.desk_port), args.play_port) if apart else (None, args.desk_port)
    heard = partial(announce, say)  # Alertmanager's pages, printed as they arrive

    async def seen() -> dict:
        return await shared.read() if shared is not None else monitoring.direct(runner.samples)

    links = tuple(await asyncio.to_thread(lab.dashboards))  # asked once: the stack is up and settled
    game = desk_web.Game(partial(so_far, runner, book, lab), runner.inject_now, runner.hold, lambda: runner.holds.on, seen, links)
    async with desk_web.serving(book, lab.ops, where, port, lab.ops.token, heard, game, alerts) as served:
        url = served.url
        say(
            "desk",
            f"status page: {url}/ (post with `stormlab ops --as ROLE post-status --severity … TEXT`)",
            url=url,
            local=served.local_url,
        )
        incident = runner.scenario.settings.incident
        book.roles = roles.issue(book.directory, url, runner.scenario.title, args.team, served.local_url, incident)
        if not args.autopilot:
            tell_roles(say, book)
        try:
            return await runner.run()
        finally:
            roles.end(book.directory)
            if shared is not None:
                await shared.close()


def so_far(runner: Runner, book: Desk, lab) -> dict:
    """The game so far, scored as the end will score it: what the consoles show while it runs."""
    pages = [p for p in timeline(book.pages, lab.started_mono, lab.started_at) if p["t"] >= 0]
    journal = runner.journal("running") | {"pages": runner.on_game_clock(pages)}
    score = scoring.score(runner.scenario, journal)
    onset = score["onset_s"]
    return {
        "t": round(runner.elapsed(), 1) if runner.t0 else 0.0,
        "pages": journal["pages"],
        "player_actions": journal["player_actions"],
        "score": score,
        "roles": scoring.roles(journal, onset),
        "status_page": scoring.status_page(journal, onset),
        "injects": scoring.injects(journal),
        "held": runner.holds.on,
        "holds": journal["holds"],
    }


def tell_roles(say: Say, book: Desk) -> None:
    """The roles' tokens, for the organiser to hand out: a move needs one while the game is on.
    Printed to a person's terminal only: a runner's JSON lines go to files (a room's game.log), so
    they say where each role's token file is (0600), never the token."""
    folder = roles.game_dir(book.directory)
    if say.as_json:
        text = f"each player moves as a role, with its token: each role's is in {folder}/ROLE (readable by its owner only)"
        say("roles", text, roles=sorted(book.roles), tokens_in=str(folder))
        return
    lines = [f"  {role:<9} STORMLAB_ROLE_TOKEN={token}" for role, token in book.roles.items()]
    say(
        "roles",
        "each player moves as a role, with its token (on this machine `--as ROLE` finds it):\n"
        + "\n".join(lines)
        + "\n  e.g. STORMLAB_ROLE_TOKEN=… stormlab ops --as database ack",
        roles=sorted(book.roles),
    )


def desk_host(docker: bool) -> str:
    """Where the desk listens: loopback for a local lab; for compose, the address containers
    reach the host at (Alertmanager posts there)."""
    if os.environ.get("STORMLAB_DESK_HOST"):
        return os.environ["STORMLAB_DESK_HOST"]
    return compose.host_address() if docker else "127.0.0.1"


def finish(scenario: Scenario, journal: dict, args: argparse.Namespace, say: Say) -> int:
    """Score the run, write its debrief, put it on the leaderboard, tell the room; the exit code."""
    out = args.out / f"{time.strftime('%Y%m%d-%H%M%S')}-{args.file.stem}"
    period = scenario.settings.with_text(args.set).sped_up(args.speed).renewal_period_s  # the lab the runner started
    journal = scoring.scored(scenario, journal, period)
    page = report.write(journal, out)
    board_path = args.leaderboard or state_dir() / "leaderboard.jsonl"
    standing = None
    if any(s.kind == "operator" for s in scenario.steps):  # only runs with players are ranked
        board = leaderboard.of_scenario(
            leaderboard.append(board_path, leaderboard.entry(journal, args.team, args.autopilot, args.speed)), journal["title"]
        )
        standing = (board_path, leaderboard.rank(board, journal["score"]), len(board))
    say(
        "done",
        debrief.text(journal, standing, args.team, page, out / "journal.json"),
        outcome=journal["outcome"],
        score=journal["score"],
        roles=journal["roles"],
        status_page=journal["status_page"],
        valid=journal["validity"]["valid"],
        report=str(page),
        journal=str(out / "journal.json"),
    )
    return {"passed": 0, "interrupted": EXIT_INTERRUPTED}.get(journal["outcome"], EXIT_FAILED)  # failed, deviated, aborted: 1
