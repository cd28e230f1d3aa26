"""The what-if replay of a recorded game day (`stormlab replay JOURNAL`): the same scenario from
the same seed at the same speed on a fresh lab, with the recorded moves made again at their
recorded times, one shifted or dropped if asked; then both curves of the customers' error side by
side, how far apart they are, and what the change did to the outcome. The edits, the comparison
and the explanation are pure; `stormlab/scenarios/replay_cli.py` runs the lab.

A move is named by its action (`pause-metadata`, `set-capacity`, `resume` …): ``--shift
pause-metadata=+30s`` moves every pause of the game 30 s later, ``--drop set-capacity`` leaves
every capacity move out.
"""

from __future__ import annotations

import bisect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from stormcore.errors import UsageError
from stormcore.settings import SettingsError, parse_duration
from stormlab.engine.reading import readings
from stormlab.responder.moves import is_move


@dataclass(frozen=True)
class Move:
    t: float  # seconds into the game (wall), as recorded
    action: str
    args: dict[str, Any]
    role: str | None


def recorded_moves(journal: dict[str, Any]) -> list[Move]:
    """The moves of a game that changed the lab (leases taken, leases ended), in order; looks,
    acks, notes and posts change nothing a replay could see."""
    moves = [Move(float(a["t"]), a["action"], dict(a["args"]), a.get("role")) for a in journal["player_actions"] if is_move(a)]
    return sorted(moves, key=lambda m: m.t)


def parse_shift(text: str) -> tuple[str, float]:
    """``MOVE=±S`` (S a duration: 30s, 1m, or seconds)."""
    name, sep, amount = text.partition("=")
    sign = -1.0 if amount.strip().startswith("-") else 1.0
    try:
        if not sep or not name.strip():
            raise SettingsError("")
        return name.strip(), sign * parse_duration(amount.strip().lstrip("+-"))
    except SettingsError:
        raise UsageError(f"--shift takes MOVE=+S or MOVE=-S (e.g. pause-metadata=+30s), got {text!r}") from None


def edit(moves: list[Move], shifts: dict[str, float], drops: set[str]) -> list[Move]:
    """The moves with every one of a shifted action moved by its shift and every one of a dropped
    action left out; naming a move the game did not make, or shifting one before the game began,
    is refused (UsageError)."""
    made = sorted({m.action for m in moves})
    unknown = sorted((set(shifts) | drops) - set(made))
    if unknown:
        raise UsageError(f"no {', '.join(unknown)} in this game; its moves: {', '.join(made) or 'none'}")
    if set(shifts) & drops:
        raise UsageError(f"{', '.join(sorted(set(shifts) & drops))}: shift it or drop it, not both")
    out = [replace(m, t=round(m.t + shifts.get(m.action, 0.0), 3)) for m in moves if m.action not in drops]
    early = [m for m in out if m.t < 0]
    if early:
        raise UsageError(f"{early[0].action} would come {-early[0].t:g}s before the game began")
    return sorted(out, key=lambda m: m.t)


class Script:
    """The moves a replay makes, each once its time of the game has come (``make``: the move,
    made as the desk made it)."""

    def __init__(self, moves: list[Move], make: Callable[[Move], Awaitable[dict[str, Any]]]) -> None:
        self.waiting, self.make = list(moves), make
        self.made: list[dict[str, Any]] = []

    async def due(self, t: float) -> None:
        while self.waiting and self.waiting[0].t <= t:
            move = self.waiting.pop(0)
            answer = await self.make(move)
            self.made.append({"t": t, "planned_t": move.t, "action": move.action, "ok": bool(answer.get("ok"))})


def curve(journal: dict[str, Any]) -> list[tuple[float, float]]:
    """The customers' error over a game: (seconds into it, ratio)."""
    return [(s.t, s.customer_error_ratio) for s in readings(journal["samples"]) if s.customer_error_ratio is not None]


def apart(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> dict[str, float | int]:
    """How far two curves are, in percentage points: each reading of ``a`` beside ``b``'s nearest
    in time, over the span both cover (mean, 90th percentile, worst, and how many readings)."""
    if not a or not b:
        return {"points": 0, "mean_pp": float("nan"), "p90_pp": float("nan"), "worst_pp": float("nan")}
    times = [t for t, _ in b]
    gaps = []
    for t, v in a:
        if not times[0] <= t <= times[-1]:
            continue
        i = bisect.bisect_left(times, t)
        near = min((j for j in (i - 1, i) if 0 <= j < len(b)), key=lambda j: abs(times[j] - t))
        gaps.append(abs(v - b[near][1]) * 100)
    if not gaps:
        return {"points": 0, "mean_pp": float("nan"), "p90_pp": float("nan"), "worst_pp": float("nan")}
    ranked = sorted(gaps)
    return {
        "points": len(gaps),
        "mean_pp": round(sum(gaps) / len(gaps), 2),
        "p90_pp": round(ranked[min(len(ranked) - 1, int(0.9 * len(ranked)))], 2),
        "worst_pp": round(ranked[-1], 2),
    }


def outcome(journal: dict[str, Any]) -> str:
    score = journal["score"]
    if score["recovered"]:
        return (
            f"recovered {score['time_to_mitigate_s']:g} s after the onset, "
            f"{score['customer_error_minutes']:.2f} customer error-minutes ({journal['outcome']})"
        )
    minutes = score["customer_error_minutes"]
    return f"did not recover in the operator phase's time, {minutes:.2f} customer error-minutes ({journal['outcome']})"


def explain(recorded: dict[str, Any], replayed: dict[str, Any], changes: list[str]) -> dict[str, Any]:
    """What the replay says: both outcomes, how far the curves are, whether the outcome differs, and why
    in the game's own figures (the moves that changed, the recovery's moment, the error-minutes)."""
    a, b = recorded["score"], replayed["score"]
    distance = apart(curve(recorded), curve(replayed))
    minutes = b["customer_error_minutes"] - a["customer_error_minutes"]
    differs = a["recovered"] != b["recovered"] or abs(minutes) > max(0.1, 0.2 * a["customer_error_minutes"])
    why = [f"the change: {'; '.join(changes)}" if changes else "no change: the recorded moves at their recorded times"]
    before, after = recorded_moves(recorded), recorded_moves(replayed)
    if [m.action for m in before] != [m.action for m in after]:
        why.append(
            f"the moves came in another order: {', '.join(f'{m.action} at {m.t:.0f} s' for m in after)} "
            f"(in the game: {', '.join(f'{m.action} at {m.t:.0f} s' for m in before)})"
        )
    failed = [a["action"] for a in replayed["player_actions"] if is_move(a) and not a["ok"]]
    if failed != [a["action"] for a in recorded["player_actions"] if is_move(a) and not a["ok"]]:
        why.append(f"moves that failed in the replay: {', '.join(failed) or 'none'}")
    if a["recovered"] and b["recovered"]:
        later = b["time_to_mitigate_s"] - a["time_to_mitigate_s"]
        why.append(
            "the customers recovered when they did in the game (within a second)"
            if abs(later) < 1
            else f"the customers recovered {abs(later):.0f} s {'later' if later > 0 else 'earlier'} than in the game"
        )
    elif a["recovered"] != b["recovered"]:
        why.append("the game recovered and the replay did not" if a["recovered"] else "the replay recovered and the game did not")
    game, again = a["customer_error_minutes"], b["customer_error_minutes"]
    why.append(f"customer error-minutes {game:.2f} in the game, {again:.2f} in the replay ({minutes:+.2f})")
    return {
        "game": outcome(recorded),
        "replay": outcome(replayed),
        "curves_apart": distance,
        "outcome_differs": differs,
        "why": why,
    }
