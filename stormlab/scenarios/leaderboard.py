"""The leaderboard: one JSON line per game day that had players, best first when read."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

ROLE_FIGURES = ("time_to_ack_s", "time_to_detect_s", "moves", "failed_moves")  # each role's on the board


def entry(journal: dict[str, Any], team: str, autopilot: bool, speed: float) -> dict[str, Any]:
    """What a scored run puts on the board: its score, each role's figures, the status page's."""
    return {
        "at": time.time(),
        "scenario": journal["title"],
        "team": team,
        "autopilot": autopilot,
        "speed": speed,
        **journal["score"],
        "roles": {r: {k: card[k] for k in ROLE_FIGURES} for r, card in journal["roles"].items()},
        "status_page": {k: journal["status_page"][k] for k in ("time_to_post_s", "impact_named")},
    }


def append(path: Path, run: dict[str, Any]) -> list[dict[str, Any]]:
    """Add a run; returns the board, best first (recovered, then fewest error-minutes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(run) + "\n")
    board = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(board, key=standing)


def standing(score: dict[str, Any]) -> tuple[bool, float]:
    """What ranks a run (or a game so far): recovered first, then the fewest error-minutes (the
    customers' requests, and in the lease manager's lab their launches)."""
    return (not score["recovered"], score["customer_error_minutes"] + score.get("launch_error_minutes", 0.0))


def of_scenario(board: list[dict[str, Any]], title: str) -> list[dict[str, Any]]:
    """The runs of one scenario (a board holds every game played on this host)."""
    return [e for e in board if e.get("scenario") == title]


def rank(board: list[dict[str, Any]], score: dict[str, Any]) -> int:
    """Where a run with ``score`` stands on a sorted board (1: the best)."""
    return 1 + next(i for i, e in enumerate(board) if all(e.get(k) == v for k, v in score.items()))
