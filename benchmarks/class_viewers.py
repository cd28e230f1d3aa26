"""A class at once: what every open console costs a room, and whether its labs stay valid.

    .venv/bin/python benchmarks/class_viewers.py [--teams 4] [--roles 5] [--window 90] [--speed auto] [--out docs/benchmarks.md]

Starts a room of ``--teams`` labs (scenarios/room-2015.yaml: each meets the 2015 blip 10 s into the
game and storms) and its facilitator's console, then the game; as soon as the roles' links exist
(a second or two after ``room play``, before the blip) every role of every team (``--roles`` each)
and the facilitator open their consoles, each asking what its page asks every 2 s (a role: /me,
/game.json, /monitoring.json; the facilitator: /panel), for ``--window`` seconds: through the blip
and the herd. Then nobody looks for as long. It measures the CPU of the processes that serve the
consoles (each team's runner, whose desk serves its players, and the facilitator's console) in
both windows, and prints the cost per viewer (CPU milliseconds per second of viewing, and the share
of a core: the difference of the two windows over the viewers), the viewers' answer times, and each
team's validity over the whole game (its runner's verdict: loop lag and CPU steal inside their
budgets, the herd included), with the reasons where it was not. Run it alone on the host.

With ``--out PAGE`` the run is kept (beside the page, in class-viewers.json, one per room size and
speed) and the page's "A class at once" section is written from every run kept.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from stormcore.labstate import state_dir
from stormlab.rooms import cli as room_cli
from stormlab.rooms import room
from stormlab.runs.bench import with_section

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "room-2015.yaml"
EVERY_S = 2.0  # the consoles' refresh (players.py, room_web.EVERY_S)
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """A process's CPU seconds so far (user and system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def stormlab(*argv: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "stormlab.cli", *argv], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"stormlab {' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    return done


async def view(session: aiohttp.ClientSession, base: str, token: str, paths: tuple[str, ...], until: float, took: list[float]) -> int:
    """One open console: its page's requests every EVERY_S until ``until``; how many it made."""
    headers = {"Authorization": f"Bearer {token}"}
    asked = 0
    while time.monotonic() < until:
        started = time.monotonic()
        for path in paths:
            t0 = time.monotonic()
            async with session.get(base + path, headers=headers) as answer:
                await answer.read()
            took.append(time.monotonic() - t0)
            asked += 1
        await asyncio.sleep(max(0.0, EVERY_S - (time.monotonic() - started)))
    return asked


async def viewing(links: dict[str, dict[str, str]], console: str, facilitator: str, roles: int, seconds: float) -> dict[str, Any]:
    took: list[float] = []
    until = time.monotonic() + seconds
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        jobs = [view(session, console, facilitator, ("/panel",), until, took)]
        for team_links in links.values():
            for link in list(team_links.values())[:roles]:
                base, token = link.split("/play#token=", 1)
                jobs.append(view(session, base, token, ("/me", "/game.json", "/monitoring.json"), until, took))
        asked = await asyncio.gather(*jobs)
    took.sort()
    return {
        "viewers": len(jobs),
        "requests": sum(asked),
        "answer_ms_median": round(1000 * statistics.median(took), 1) if took else None,
        "answer_ms_p99": round(1000 * took[int(0.99 * (len(took) - 1))], 1) if took else None,
    }


def serving_pids(console: subprocess.Popen) -> list[int]:
    game = room.read_game() or {"teams": {}}
    return [int(t["pid"]) for t in game["teams"].values()] + [console.pid]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teams", type=int, default=4)
    p.add_argument("--roles", type=int, default=5, help="open consoles per team (its roles; default 5, every role)")
    p.add_argument(
        "--window", type=float, default=90.0, help="seconds with every console open (from before the blip), then with none (default 90)"
    )
    p.add_argument("--speed", default="auto", help="the room's speed (default auto: what the host's cores manage for the teams)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--out", type=Path, help="a page to write the runs kept into (docs/benchmarks.md), as its 'A class at once'")
    args = p.parse_args()
    if not 1 <= args.teams <= room.MAX_TEAMS or not 1 <= args.roles <= 5 or not 10 <= args.window <= 600:
        raise SystemExit(f"--teams 1-{room.MAX_TEAMS}, --roles 1-5, --window 10-600")
    print(f"class_viewers: a room of {args.teams} teams in {state_dir()} …", file=sys.stderr, flush=True)
    stormlab("room", "up", "--teams", str(args.teams), "--scenario", str(SCENARIO), "--speed", args.speed)
    console = subprocess.Popen([sys.executable, "-m", "stormlab.cli", "room", "console", "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        assert console.stdout is not None
        console_url = console.stdout.readline().split()[3].rstrip("/")
        stormlab("room", "play")
        card = room.the_card()
        room.wait_for_desks()
        links = {team: room.player_links(Path(where)) for team, where in card["teams"].items()}
        pids = serving_pids(console)
        print(f"class_viewers: every console open for {args.window:g} s, through the blip …", file=sys.stderr, flush=True)
        before = sum(cpu_s(pid) for pid in pids)
        seen = asyncio.run(viewing(links, console_url, room.facilitator_token() or "", args.roles, args.window))
        busy = sum(cpu_s(pid) for pid in pids) - before
        print(f"class_viewers: nobody looking for {args.window:g} s …", file=sys.stderr, flush=True)
        before = sum(cpu_s(pid) for pid in pids)
        time.sleep(args.window)
        idle = sum(cpu_s(pid) for pid in pids) - before
        storming = {team: s.reading.customer_error_ratio if s else None for team, s in asyncio.run(room_cli.readings(card)).items()}
        stormlab("room", "end")
        validity, reasons = {}, {}
        for team in card["teams"]:
            journals = sorted((room.room_dir() / "games" / team).glob("*/journal.json"))
            played = json.loads(journals[-1].read_text()) if journals else {}
            validity[team] = played.get("validity", {}).get("valid")
            reasons[team] = played.get("validity", {}).get("invalid_reasons", [])
            speed = played.get("speed")
    finally:
        console.terminate()
        console.wait(timeout=30)
        subprocess.run([sys.executable, "-m", "stormlab.cli", "room", "down"], capture_output=True, timeout=300)
    per_viewer_ms = 1000 * (busy - idle) / args.window / seen["viewers"]
    result = {
        "teams": args.teams,
        "speed": speed,
        **seen,
        "window_s": args.window,
        "serving_cpu_s_idle": round(idle, 2),
        "serving_cpu_s_viewed": round(busy, 2),
        "cpu_ms_per_viewer_second": round(per_viewer_ms, 2),
        "core_share_per_viewer": round(per_viewer_ms / 1000, 4),
        "customer_error_ratio_after": storming,
        "valid": validity,
        "invalid_reasons": {team: r for team, r in reasons.items() if r},
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{seen['viewers']} viewers of {args.teams} teams: {per_viewer_ms:.2f} ms of CPU per viewer-second "
            f"({per_viewer_ms / 10:.2f}% of a core each), answers {seen['answer_ms_median']} ms median, {seen['answer_ms_p99']} ms p99; "
            f"speed {speed}; customers failing after the window: {storming}; valid: {validity}"
        )
        for team, why in result["invalid_reasons"].items():
            print(f"  {team} invalid: {'; '.join(why)}")
    if args.out is not None:
        write(args.out, result, args.roles)
    return 0 if all(validity.values()) else 1


HEADING = "## A class at once"


def write(page: Path, result: dict[str, Any], roles: int) -> None:
    """This run kept beside ``page`` (one per room size, roles and speed) and the section written from all."""
    kept_at = page.with_name("class-viewers.json")
    kept = json.loads(kept_at.read_text()) if kept_at.exists() else {}
    kept[f"{result['teams']}x{roles}@{result['speed']:g}"] = result | {"roles": roles, "date": time.strftime("%Y-%m-%d")}
    kept_at.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")
    rows = []
    for run in sorted(kept.values(), key=lambda r: (-r["speed"], r["teams"])):
        failing = [e for e in run["customer_error_ratio_after"].values() if e is not None]
        storm = f"{min(failing):.0%}-{max(failing):.0%}" if failing else "-"
        valid = sum(1 for v in run["valid"].values() if v)
        why = "; ".join(sorted({r.split(" ran ")[0].split(") ")[-1] for rs in run["invalid_reasons"].values() for r in rs}))
        rows.append(
            f"| {run['teams']} × {run['roles']} + 1 | {run['speed']:g} | {run['viewers']} | {run['cpu_ms_per_viewer_second']:.2f} ms "
            f"({run['core_share_per_viewer']:.2%} of a core) | {run['answer_ms_median']} / {run['answer_ms_p99']} ms | {storm} | "
            f"{valid} of {run['teams']}{' (late: ' + why + ')' if why else ''} | {run['date']} |"
        )
    text = "\n".join(
        [
            HEADING,
            "",
            "`benchmarks/class_viewers.py --out docs/benchmarks.md`: a room of the room-2015 game (400 nodes a team), every role of every "
            "team and the facilitator looking from before the blip (each page's requests every 2 s), then nobody. The cost per viewer is "
            "the CPU of the processes serving the consoles (each team's runner and desk, the facilitator's console) with everyone "
            "looking, less with nobody, over the viewers; the validity is each team's game's verdict, the herd included.",
            "",
            "| room (teams × roles + facilitator) | speed | viewers | CPU per viewer | answers, median / p99 | customers failing after | "
            "teams valid | measured |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
            *rows,
        ]
    )
    page.write_text(with_section(page.read_text() if page.exists() else "# stormlab benchmarks\n", HEADING, text))
    print(f"wrote {page} ({HEADING[3:]}) and {kept_at}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
