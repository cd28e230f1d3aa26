"""The responders' journal: every move on the lab, made with `stormlab ops`.

One JSON line per move in ``ops-journal.jsonl`` in the lab's state directory (it rotates, see
``stormcore/jsonlog.py``): when (``at``: the wall clock, for people; ``mono``: the host's monotonic
clock, for order and for the game's timeline, so a clock step cannot put an ack before its page),
what (``action``: the command's own name; ``fault``: the lease it took, if any), with which
arguments, through which command (``via``), by which on-call ``role``, whether it worked and what
it said.

During a team's game day the runner's desk is the journal's one writer: it keeps the entries it
wrote in memory (``Journal(remember=True)``) and the game is scored from those, not from the file,
which any local process could append a line to.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stormcore import jsonlog

JOURNAL = "ops-journal.jsonl"
log = logging.getLogger(__name__)


def journal_path(directory: Path) -> Path:
    return directory / JOURNAL


class Journal:
    """Writes the journal of one lab (and, with ``remember``, keeps what it wrote)."""

    def __init__(
        self,
        directory: Path,
        remember: bool = False,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory, self.remember, self.wall, self.mono = directory, remember, wall, mono
        self.kept: list[dict[str, Any]] = []

    def record(
        self,
        action: str,
        args: dict[str, Any],
        ok: bool,
        message: str,
        *,
        fault: str | None = None,
        via: str = "ops",
        role: str | None = None,
    ) -> dict[str, Any]:
        entry = {
            "at": self.wall(),
            "mono": self.mono(),
            "action": action,
            "args": args,
            "ok": ok,
            "message": message,
            "fault": fault,
            "via": via,
            "role": role,
        }
        if self.remember:
            self.kept.append(entry)
        try:
            jsonlog.append(journal_path(self.directory), entry)
        except OSError as exc:
            if not self.remember:  # nobody else holds it: the caller must know it was not written
                raise
            log.error("journal entry not written to %s (kept in memory): %s", self.directory, exc)
        return entry

    def entries(self, since_mono: float = float("-inf")) -> list[dict[str, Any]]:
        """What it wrote (kept), or what the file holds, from ``since_mono`` on."""
        found = self.kept if self.remember else read_journal(self.directory)
        return [e for e in found if e.get("mono", float("-inf")) >= since_mono]


def record(directory: Path, action: str, args: dict[str, Any], ok: bool, message: str, **how: Any) -> dict[str, Any]:
    """One entry into the lab's journal file (outside a game, where no desk keeps it)."""
    return Journal(directory).record(action, args, ok, message, **how)


def read_journal(directory: Path, since: float = 0.0) -> list[dict[str, Any]]:
    """The journal file's entries (its rotated generations too) from ``since`` (wall clock)."""
    return [e for e in jsonlog.read(journal_path(directory)) if isinstance(e.get("at"), (int, float)) and e["at"] >= since]


def timeline(entries: list[dict[str, Any]], started_mono: float, started_at: float) -> list[dict[str, Any]]:
    """Entries with ``t``, seconds since the run started: by the monotonic clock, or by the wall
    clock for an entry that has none (written before the journal kept one)."""
    return [{**e, "t": round(e["mono"] - started_mono if "mono" in e else e["at"] - started_at, 3)} for e in entries]
