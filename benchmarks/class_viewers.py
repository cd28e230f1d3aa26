"""A class at once: what every open console costs a room, and whether its labs stay valid.

    .venv/bin/python benchmarks/class_viewers.py [--teams 4] [--roles 5] [--window 60] [--speed auto]

Starts a room of ``--teams`` labs (scenarios/room-2015.yaml: each meets the 2015 blip at the same
moment and storms), its facilitator's console, and the game; once every team storms, it measures
the CPU of the processes that serve the consoles (each team's runner, whose desk serves its
players, and the facilitator's console) over ``--window`` seconds with nobody looking, then over
``--window`` seconds with every role of every team (``--roles`` each) and the facilitator looking,
each viewer asking what its page asks every 2 s (a role: /me, /game.json, /monitoring.json; the
facilitator: /panel). Prints the cost per viewer (CPU milliseconds per second of viewing, and the
share of a core), the viewers' answer times, and each team's validity over the game (its runner's
verdict: loop lag and CPU steal inside its budgets). Run it alone on the host.
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
from stormlab.gameday import room, room_cli

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
    p.add_argument("--window", type=float, default=60.0, help="seconds measured with nobody looking, then with everyone (default 60)")
    p.add_argument("--speed", default="auto", help="the room's speed (default auto: what the host's cores manage for the teams)")
    p.add_argument("--json", action="store_true")
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
        links = {team: room.player_links(Path(where)) for team, where in card["teams"].items()}
        storming = time.monotonic() + 180
        while time.monotonic() < storming:  # every team in the storm before anything is measured
            seen = asyncio.run(room_cli.readings(card))
            if all(s and (s["customer_error_ratio"] or 0.0) > 0.3 for s in seen.values()):
                break
            time.sleep(2)
        else:
            raise SystemExit("the teams did not all storm within 180 s")
        pids = serving_pids(console)
        before = sum(cpu_s(pid) for pid in pids)
        time.sleep(args.window)
        idle = sum(cpu_s(pid) for pid in pids) - before
        before = sum(cpu_s(pid) for pid in pids)
        seen = asyncio.run(viewing(links, console_url, room.facilitator_token() or "", args.roles, args.window))
        busy = sum(cpu_s(pid) for pid in pids) - before
        stormlab("room", "end")
        validity = {}
        for team in card["teams"]:
            journals = sorted((room.room_dir() / "games" / team).glob("*/journal.json"))
            played = json.loads(journals[-1].read_text()) if journals else {}
            validity[team] = played.get("validity", {}).get("valid")
    finally:
        console.terminate()
        console.wait(timeout=30)
        subprocess.run([sys.executable, "-m", "stormlab.cli", "room", "down"], capture_output=True, timeout=300)
    per_viewer_ms = 1000 * (busy - idle) / args.window / seen["viewers"]
    result = {
        "teams": args.teams,
        **seen,
        "window_s": args.window,
        "serving_cpu_s_idle": round(idle, 2),
        "serving_cpu_s_viewed": round(busy, 2),
        "cpu_ms_per_viewer_second": round(per_viewer_ms, 2),
        "core_share_per_viewer": round(per_viewer_ms / 1000, 4),
        "valid": validity,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{seen['viewers']} viewers of {args.teams} teams: {per_viewer_ms:.2f} ms of CPU per viewer-second "
            f"({per_viewer_ms / 10:.2f}% of a core each), answers {seen['answer_ms_median']} ms median, {seen['answer_ms_p99']} ms p99; "
            f"valid: {validity}"
        )
    return 0 if all(validity.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
