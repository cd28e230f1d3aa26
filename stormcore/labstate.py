"""Which lab a command acts on, where a local lab keeps its state, and whether one is up (read
by every command that acts on a running lab: `status`, `chaos`, `ops`, `scenario run`, `soak`).

``stormlab up`` writes ``state.json`` through its supervisor: the supervisor's pid and URL, each
component's URL and pid, and the lab's settings as ``STORMLAB_*`` variables.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from stormcore.errors import UsageError

SUPERVISOR_MODULE = "stormlab.engine.supervisor"
BACKENDS = ("local", "docker", "k8s")  # the local lab's processes, the compose (or swarm) stack, a Kubernetes namespace


def backend(chosen: str | None, allowed: tuple[str, ...] = BACKENDS) -> str:
    """The lab a command acts on, by one rule: ``--backend``, else ``STORMLAB_BACKEND``, else
    detected (``auto``): a Kubernetes namespace if ``STORMLAB_K8S_NAMESPACE`` is set, the compose
    project if ``STORMLAB_COMPOSE_PROJECT`` is, else the local lab. One the command cannot act on
    is refused (UsageError)."""
    name = chosen or os.environ.get("STORMLAB_BACKEND") or "auto"
    if name == "auto":
        name = "k8s" if os.environ.get("STORMLAB_K8S_NAMESPACE") else "docker" if os.environ.get("STORMLAB_COMPOSE_PROJECT") else "local"
    if name not in allowed:
        raise UsageError(f"backend {name!r}: this command acts on {' or '.join(allowed)} labs (--backend, STORMLAB_BACKEND)")
    return name


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
