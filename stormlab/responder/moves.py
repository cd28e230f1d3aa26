"""The responders' moves in a game day: what each `stormlab ops` action is, which on-call role
owns it, and the fault lease it takes (pure). Scenario files, `ops` and the runner all read this
table.

A team plays with one role per service: the database's on-call owns the metadata service's
runbook (AWS's, 2015) and deploys to the storage fleet; the queues', scaling's, metrics' and console's on-calls own the fixes AWS
announced for their services, switched on in the running service; in the aws-2025-10 profile, the
lease manager's on-call (EC2's) owns the throttle, the host restarts, the queue limit and the
endpoint's repair. Looking, noting, acknowledging
a page and posting to the status page are everyone's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chaos import catalog
from stormcore import roster
from stormcore.settings import max_duration_s

ROLES = roster.ROLES
SEVERITIES = ("investigating", "degraded", "partial-outage", "major-outage", "resolved")


@dataclass(frozen=True)
class Action:
    name: str
    help: str
    fault: str | None = None  # the lease this move takes
    keys: tuple[str, ...] = ()  # the fault's arguments the move takes
    fixes: tuple[str, ...] = ()  # `enable`: the fault is the fix named by the first argument
    ends: str | None = None  # the fault whose leases this move ends (a repair, not a lease of its own)


ACTIONS = {
    a.name: a
    for a in (
        Action("status", "what a responder looks at first"),
        Action(
            "set-capacity", "set the metadata service's virtual cores", "capacity", ("cores", "break_glass", "timeout", "duration", "cell")
        ),
        Action("pause-metadata", "stop taking membership requests (AWS, 5:06 AM)", "pause-metadata", ("duration", "cell")),
        Action("resume", "readmit the fleet, at once or in steps", "resume-metadata", ("staged", "every", "cell")),
        Action("enable", "switch on a fix AWS announced in its running service", keys=("fix", "duration"), fixes=catalog.FIXES),
        Action("scale-workers", "drain the scaling backlog with N workers", "scale-workers", ("workers", "duration")),
        Action(
            "deploy",
            "deploy a retry policy, allowance or renewal period to the running fleet, rack by rack",
            "deploy",
            ("retry_policy", "allowance", "renewal_period", "staged", "every", "duration"),
        ),
        Action(
            "restore-partition",
            "restore the metadata partition that does not take its share (Monday: ends the stuck partition)",
            keys=("cell",),
            ends="stuck-partition",
        ),
        Action(
            "throttle",
            "throttle the new work each lease manager host admits (October 2025; AWS, 04:14 PDT)",
            "throttle-work",
            ("rate", "duration"),
        ),
        Action(
            "restart-host",
            "restart one lease manager host: its queue and its work in flight dropped (October 2025)",
            "restart-host",
            ("host", "duration"),
        ),
        Action(
            "queue-limit",
            "AWS's fix: refuse new work at a lease manager host whose queue is this long (October 2025)",
            "queue-limit",
            ("limit", "duration"),
        ),
        Action(
            "repair-endpoint",
            "put the database endpoint's DNS record back by hand (October 2025; AWS, 02:25 PDT): ends the dns-empty leases",
            ends="dns-empty",
        ),
        Action("note", "mark the timeline"),
        Action("ack", "acknowledge your role's page (the newest unacknowledged, or the alert named)"),
        Action("post-status", "post to the status page customers read"),
    )
}
EVERYONE = ("status", "note", "ack", "post-status")  # no role owns these: every responder may
ENDERS = {a.name: a.ends for a in ACTIONS.values() if a.ends}  # the moves that end a fault's leases, and which


def fault_of(action: Action, args: dict[str, Any]) -> str | None:
    """The lease a move takes (``enable``'s is the fix it names)."""
    if action.fixes:
        fix = args.get("fix")
        if fix not in action.fixes:
            raise catalog.ChaosError(f"{action.name}: fix must be one of {', '.join(action.fixes)}, got {fix!r}")
        return str(fix)
    return action.fault


def owner(fault: str) -> str:
    """The on-call role whose service holds this lease."""
    return roster.role_of(catalog.FAULTS[fault].holder)


def owner_of(action: Action, args: dict[str, Any]) -> str | None:
    """The role a move belongs to (None: everyone's): the one whose service holds its lease, or
    the leases it ends."""
    fault = fault_of(action, args) or action.ends
    return None if fault is None else owner(fault)


def check_role(role: str | None, action: Action, args: dict[str, Any]) -> None:
    """A role may make its own moves and everyone's; another role's is refused (exit 2)."""
    if role is None:
        return
    if role not in ROLES:
        raise catalog.ChaosError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
    mine = owner_of(action, args)
    if mine is not None and mine != role:
        raise catalog.ChaosError(f"{action.name} {args.get('fix') or ''}".strip() + f" is the {mine} on-call's move, not {role}'s")


def move_values(action: Action, args: dict[str, Any]) -> dict[str, Any]:
    """A move's arguments as the catalog takes them: a lease without a duration lasts as long
    as any lease may (the responder ends it, or it ends by itself)."""
    unknown = sorted(set(args) - set(action.keys))
    if unknown:
        raise catalog.ChaosError(f"{action.name} takes no {', '.join(unknown)}; it takes {', '.join(action.keys)}")
    values = {k: v for k, v in args.items() if v is not None and k != "fix"}
    if "duration" in action.keys:
        values.setdefault("duration", max_duration_s())
    return values


INJECT = "inject"  # the ``via`` of a page that delivers an inject


def acted_as(action: dict[str, Any]) -> str | None:
    """Whose move a journal entry is: the role it was made as, else the role owning its lease."""
    if action.get("role"):
        return str(action["role"])
    fault = action.get("fault") or ENDERS.get(action.get("action", ""))
    return owner(fault) if fault in catalog.FAULTS else None


def is_move(action: dict[str, Any]) -> bool:
    """A responder's move on the lab: a lease taken, or a repair (leases of a fault ended)."""
    return action.get("fault") in catalog.MOVES or action.get("action") in ENDERS


EVENT_NAMES = {"page": "page", "inject": "inject", "ack": "ack", "move": "move", "failed": "failed move", "post": "status post"}


def role_events(journal: dict[str, Any]) -> list[tuple[float, str, str, str]]:
    """(t, lane, mark, label): every page, ack, move and post, in the lane of its role."""
    firing = [p for p in journal.get("pages", []) if p["status"] == "firing"]
    out = [(p["t"], p["role"], INJECT if p.get("via") == INJECT else "page", p["alert"]) for p in firing]
    for a in journal["player_actions"]:
        lane = acted_as(a) or "anyone"
        if a["action"] == "ack":
            out.append((a["t"], lane, "ack", str(a["args"].get("alert", ""))))
        elif a["action"] == "post-status":
            out.append((a["t"], lane, "post", str(a["args"].get("severity", ""))))
        elif a.get("fault") or a["action"] in ENDERS:
            out.append(
                (a["t"], lane, "move" if a["ok"] else "failed", a["action"] + (f" {a['args'].get('fix')}" if a["args"].get("fix") else ""))
            )
    return sorted(out)
