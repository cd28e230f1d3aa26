"""Starts the lab's components, restarts any that dies, and stops them all on SIGTERM.

Run by ``stormlab up`` as ``python -m services.supervisor STATE_DIR``; it reads
``plan.json`` and keeps ``state.json`` (pids and URLs) current for ``status`` and ``down``.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
RESTART_DELAY_S = 1.0


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:  # not Linux: down still stops every child by pid
        pass


class Supervisor:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.plan = json.loads((directory / "plan.json").read_text())
        self.procs: dict[str, subprocess.Popen] = {}
        self.restarts: dict[str, int] = {}
        self.stopping = False

    def start(self, comp: dict) -> None:
        log = open(self.directory / "logs" / f"{comp['name']}.log", "ab")
        env = {**os.environ, **comp["env"], "PYTHONUNBUFFERED": "1"}
        self.procs[comp["name"]] = subprocess.Popen(
            [sys.executable, "-m", comp["module"]], env=env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        log.close()

    def write_state(self) -> None:
        state = {
            "supervisor_pid": os.getpid(),
            "started_at": self.started_at,
            "settings": self.plan["settings"],
            "components": {c["name"]: {"url": c["url"], "port": c["port"], "pid": self.procs[c["name"]].pid,
                                       "restarts": self.restarts.get(c["name"], 0)} for c in self.plan["components"]},
        }
        tmp = self.directory / "state.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.directory / "state.json")

    def run(self) -> None:
        self.started_at = time.time()
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        for comp in self.plan["components"]:
            self.start(comp)
        self.write_state()
        while not self.stopping:
            time.sleep(0.2)
            for comp in self.plan["components"]:
                proc = self.procs[comp["name"]]
                if proc.poll() is not None and not self.stopping:
                    print(f"{comp['name']} exited with {proc.returncode}; restarting", flush=True)
                    time.sleep(RESTART_DELAY_S)
                    self.restarts[comp["name"]] = self.restarts.get(comp["name"], 0) + 1
                    self.start(comp)
                    self.write_state()
        self.shutdown()

    def _stop(self, signum: int, frame: object) -> None:
        self.stopping = True

    def shutdown(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10.0
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        (self.directory / "state.json").unlink(missing_ok=True)


if __name__ == "__main__":
    Supervisor(Path(sys.argv[1])).run()
