"""The responders' journal: every move on the lab, made with `stormlab ops` or `stormlab chaos`.

One JSON line per move in ``ops-journal.jsonl`` in the lab's state directory: when, what
(``action``: the command's own name; ``fault``: the lease it took, if any), with which arguments,
through which command (``via``), by which on-call ``role`` (a team's game day), whether it
worked and what it said. A running game day reads
it to mark the players' moves on its report and to score them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

JOURNAL = "ops-journal.jsonl"


def journal_path(directory: Path) -> Path:
    return directory / JOURNAL


def record(
    directory: Path,
    action: str,
    args: dict[str, Any],
    ok: bool,
    message: str,
    *,
    fault: str | None = None,
    via: str = "ops",
    role: str | None = None,
) -> dict[str, Any]:
    entry = {"at": time.time(), "action": action, "args": args, "ok": ok, "message": message, "fault": fault, "via": via, "role": role}
    path = journal_path(directory)
    path.parent.mkdir(parents=True, exist_ok=True)  # the compose stack's players may have no state dir yet
    with path.open("a") as f:
        f.write(json.dumps(entry) + "\n")
    return entry


def read_journal(directory: Path, since: float = 0.0) -> list[dict[str, Any]]:
    path = journal_path(directory)
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut short by a crash: the others still count
        if isinstance(entry, dict) and isinstance(entry.get("at"), (int, float)) and entry["at"] >= since:
            entries.append(entry)
    return entries


def moves_since(directory: Path, started_at: float) -> list[dict[str, Any]]:
    """The journal's entries since a run started, each with ``t`` in seconds since then."""
    return [{**e, "t": round(e["at"] - started_at, 3)} for e in read_journal(directory, started_at)]
