"""`stormlab replay JOURNAL [--shift MOVE=±S] [--drop MOVE]`: a recorded game day played again on a
fresh lab of its own, and what changed (stormlab/scenarios/replay.py)."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from stormcore import commandline
from stormcore.errors import UsageError
from stormlab.artefacts.plotting import pyplot
from stormlab.scenarios import cli as gameday_cli
from stormlab.scenarios import replay
from stormlab.scenarios.replay import curve


def add_parser(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser(
        "replay",
        help="play a recorded game day again from its seed with its moves (one shifted or dropped), and compare the curves",
        description=replay.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("journal", type=Path, help="a game day's journal.json (scenario run, room play)")
    r.add_argument(
        "--shift",
        action="append",
        default=[],
        metavar="MOVE=±S",
        help="make every MOVE (its action) S s later or earlier (repeatable; default: none)",
    )
    r.add_argument(
        "--drop", action="append", default=[], metavar="MOVE", help="leave every MOVE (its action) out (repeatable; default: none)"
    )
    r.add_argument("--out", type=Path, default=Path("reports/replays"), help="where the replay's directory goes")
    r.add_argument("--json", action="store_true", help="the verdict as one JSON document on stdout")
    r.set_defaults(func=run)
    commandline.explain(
        r,
        "stormlab replay reports/gamedays/RUN/journal.json --shift pause-metadata=-60",
        "stormlab replay journal.json --drop resume --json",
    )


def read(path: Path) -> dict[str, Any]:
    try:
        journal = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror}") from None
    except ValueError:
        raise UsageError(f"{path}: not a game day's journal (not JSON)") from None
    if not isinstance(journal, dict) or not {"samples", "player_actions", "seed", "speed", "score"} <= set(journal):
        raise UsageError(f"{path}: not a game day's journal (journal.json of a scenario run)")
    if "scenario_text" not in journal:
        raise UsageError(f"{path}: recorded before replays could be made: it does not hold its scenario")
    return journal


def run(args: argparse.Namespace) -> int:
    recorded = read(args.journal)
    shifts = dict(replay.parse_shift(s) for s in args.shift)
    moves = replay.edit(replay.recorded_moves(recorded), shifts, set(args.drop))
    changes = [f"{name} {by:+g} s" for name, by in shifts.items()] + [f"{name} dropped" for name in args.drop]
    out = args.out / f"{time.strftime('%Y%m%d-%H%M%S')}-replay"
    out.mkdir(parents=True, exist_ok=True)
    (out / "scenario.yaml").write_text(recorded["scenario_text"])
    # a fresh lab of its own (its own state directory, free ports), whatever else runs on this host
    os.environ["STORMLAB_STATE_DIR"] = str((out / "lab").resolve())
    game = argparse.Namespace(
        scenario_command="run",
        file=out / "scenario.yaml",
        backend="local",
        speed=f"{recorded['speed']:g}",
        seed=recorded["seed"],
        set=recorded.get("set", []),
        autopilot=False,
        out=out,
        leaderboard=out / "leaderboard.jsonl",
        keep_lab=False,
        team=f"{recorded.get('team') or 'a team'} (replay)",
        desk_port=0,
        listen=None,
        public_url=None,
        tls_cert=None,
        tls_key=None,
        json=args.json,
        base_port=0,
        script=moves,
    )
    print(f"replaying {args.journal} ({len(moves)} moves{'; ' + '; '.join(changes) if changes else ''}) …", flush=True)
    gameday_cli.run(game)
    [played] = [p for p in out.glob("*/journal.json")]
    replayed = json.loads(played.read_text())
    verdict = replay.explain(recorded, replayed, changes)
    verdict["chart"] = str(draw(recorded, replayed, changes, out / "curves.png"))
    (out / "replay.json").write_text(json.dumps(verdict, indent=1))
    if args.json:
        print(json.dumps(verdict))
        return 0
    d = verdict["curves_apart"]
    print(f"\nthe game:   {verdict['game']}\nthe replay: {verdict['replay']}")
    print(f"the curves: {d['mean_pp']} points apart on average, {d['p90_pp']} at the 90th percentile, {d['worst_pp']} at worst")
    print(("the outcome differs: " if verdict["outcome_differs"] else "the same outcome: ") + "; ".join(verdict["why"]))
    print(f"chart: {verdict['chart']}\nreplay's report: {played.parent / 'report.html'}")
    return 0


def draw(recorded: dict[str, Any], replayed: dict[str, Any], changes: list[str], path: Path) -> Path:
    """Both curves of the customers' error, the recorded moves and the replay's marked."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(11, 3.6))
    for journal, label, color in ((recorded, "the game", "#2c3e50"), (replayed, "the replay", "#c0392b")):
        points = curve(journal)
        ax.plot([t for t, _ in points], [100 * v for _, v in points], lw=1.5, color=color, label=label)
        for move in replay.recorded_moves(journal):
            ax.axvline(move.t, color=color, lw=0.8, ls=":")
    ax.set_xlabel("seconds into the game")
    ax.set_ylabel("customers failing (%)")
    ax.set_ylim(0, 100)
    ax.set_title("replay: " + ("; ".join(changes) if changes else "no change"))
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
