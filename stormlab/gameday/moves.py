"""The responders' moves in a game day: what each `stormlab ops` action is, and the fault lease
it takes (pure). Scenario files, `ops` and the runner all read this table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chaos import catalog
from chaos.lease import max_duration_s


@dataclass(frozen=True)
class Action:
    name: str
    help: str
    fault: str | None = None  # the lease this move takes
    keys: tuple[str, ...] = ()  # the fault's arguments the move takes


ACTIONS = {
    a.name: a
    for a in (
        Action("status", "what a responder looks at first"),
        Action("set-capacity", "set the metadata service's virtual cores", "capacity", ("cores", "break_glass", "timeout", "duration")),
        Action("pause-metadata", "stop taking membership requests (AWS, 5:06 AM)", "pause-metadata", ("duration",)),
        Action("resume", "readmit the fleet, at once or in steps", "resume-metadata", ("staged", "every")),
        Action("note", "mark the timeline"),
    )
}


def move_values(action: Action, args: dict[str, Any]) -> dict[str, Any]:
    """A move's arguments as the catalog takes them: a lease without a duration lasts as long
    as any lease may (the responder ends it, or it ends by itself)."""
    unknown = sorted(set(args) - set(action.keys))
    if unknown:
        raise catalog.ChaosError(f"{action.name} takes no {', '.join(unknown)}; it takes {', '.join(action.keys)}")
    values = {k: v for k, v in args.items() if v is not None}
    if "duration" in action.keys:
        values.setdefault("duration", max_duration_s())
    return values
