"""Where a local lab keeps its state, and whether one is up (read by every command that acts
on a running lab: `status`, `chaos`, `ops`, `scenario run`).

``stormlab up`` writes ``state.json`` through its supervisor: the supervisor's pid and URL, each
component's URL and pid, and the lab's settings as ``STORMLAB_*`` variables.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SUPERVISOR_MODULE = "stormlab.engine.supervisor"


def state_dir() -> Path:
    default = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "stormlab"
    return Path(os.environ.get("STORMLAB_STATE_DIR", default)).resolve()


def read_state(directory: Path | None = None) -> dict[str, Any] | None:
    path = (directory or state_dir()) / "state.json"
    try:
        state = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def is_supervisor(pid: int, directory: Path) -> bool:
    """Only signal the process we started: check its command line, not just the pid."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return SUPERVISOR_MODULE.encode() in cmdline and str(directory).encode() in cmdline


def running(directory: Path | None = None) -> dict[str, Any] | None:
    """The state of the lab that is up in ``directory``, or None."""
    directory = directory or state_dir()
    state = read_state(directory)
    if state and isinstance(state.get("supervisor_pid"), int) and is_supervisor(state["supervisor_pid"], directory):
        return state
    return None
