"""The local launcher: the lab as OS processes on loopback, tracked by pid.

``up`` writes a plan (which process, which port, which settings) into the state directory
and starts a supervisor in its own session; the supervisor starts every component, restarts
one that dies, and stops them all on SIGTERM. Children die with the supervisor (Linux
parent-death signal), so ``down`` (or a killed supervisor) leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from stormcore.auth import ENV as TOKEN_ENV
from stormcore.auth import ensure_token
from stormcore.errors import LabError
from stormcore.fleet import cell_name, cell_of
from stormcore.labstate import SUPERVISOR_MODULE, is_supervisor, read_state, running, state_dir
from stormcore.settings import LabSettings

HOST = "127.0.0.1"
DEFAULT_BASE_PORT = 8700
# The services beside the database, whose control planes live in the lab's tables (ports base+4…).
DEPENDENT = tuple((name, f"services.{name}") for name in ("queues", "scaling", "console", "metrics"))
# Supervisors this process started, kept so `down` can reap them (no zombies, no warnings).
_STARTED: dict[int, subprocess.Popen] = {}


@dataclass(frozen=True)
class Component:
    name: str
    module: str
    port: int
    env: dict[str, str]

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"


_HANDED_OUT: set[int] = set()  # ports this process chose for a lab: never chosen twice


def _ephemeral_low() -> int:
    """The lowest port the kernel hands to outgoing connections (Linux; 32768 elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _free_ports(n: int) -> list[int]:
    """``n`` free ports below the ephemeral range: between choosing a port and its process binding
    it, the lab's own outgoing connections (which take ephemeral ports) cannot take it first."""
    low, high = 10_000, _ephemeral_low() - 1
    if high - low < 4 * n:  # an unusual range: let the kernel choose
        return _kernel_ports(n)
    start, found = random.randrange(low, high), []
    for offset in range(high - low):
        port = low + (start - low + offset) % (high - low)
        if port not in _HANDED_OUT and _port_free(port):  # not bound yet does not mean not promised
            found.append(port)
            if len(found) == n:
                _HANDED_OUT.update(found)
                return found
    raise LabError(f"not {n} free ports between {low} and {high}")


def _kernel_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do: TIME_WAIT is no obstacle
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def plan(settings: LabSettings, base_port: int, data_dir: Path) -> list[Component]:
    """Every process of the lab with its port and environment."""
    n, d, extra = settings.racks, len(DEPENDENT), settings.cells - 1
    if base_port == 0:
        ports = _free_ports(3 + 2 * n + d + d * n + extra)
    else:
        if not 1024 <= base_port <= 65535 - 500:
            raise LabError("base port must be 0 (pick free ports) or between 1024 and 65035")
        ports = (
            [base_port, base_port + 1, base_port + 2]
            + [base_port + 10 + r for r in range(n)]
            + [base_port + 100 + r for r in range(n)]
            + [base_port + 4 + i for i in range(d)]
            + [base_port + 200 + 64 * i + r for i in range(d) for r in range(n)]  # each service's path to each rack
            + [base_port + 80 + c for c in range(1, settings.cells)]  # the other cells' metadata services
            + [base_port + 3]
        )
        busy = [p for p in ports if not _port_free(p)]
        if busy:
            raise LabError(f"ports {busy} are in use on {HOST}; pick another --base-port, or 0 for any free ports")
    meta, proxy, loadgen, links, racks = ports[0], ports[1], ports[2], ports[3 : 3 + n], ports[3 + n : 3 + 2 * n]
    dependent_ports = ports[3 + 2 * n : 3 + 2 * n + d]
    # The cascade's services reach each rack through the link proxy (the isolate fault acts there).
    paths = {name: ports[3 + 2 * n + d + i * n : 3 + 2 * n + d + (i + 1) * n] for i, (name, _) in enumerate(DEPENDENT)}
    cell_ports = [meta, *ports[3 + 2 * n + d + d * n : 3 + 2 * n + d + d * n + extra]]
    common = settings.to_env()
    rack_urls = ",".join(f"http://{HOST}:{p}" for p in racks)
    comps = [
        *(Component(cell_name(c), "metadata_service", p, {"STORMLAB_CELL": str(c)}) for c, p in enumerate(cell_ports)),
        Component(
            "linkproxy",
            "chaos.linkproxy",
            proxy,
            {
                "STORMLAB_METADATA_PORT": str(meta),
                "STORMLAB_LINK_PORTS": json.dumps({r: p for r, p in enumerate(links)}),
                "STORMLAB_CELL_PORTS": json.dumps({r: cell_ports[cell_of(r, settings)] for r in range(n)}),
                "STORMLAB_PATH_PORTS": json.dumps({name: {r: [p, racks[r]] for r, p in enumerate(ps)} for name, ps in paths.items()}),
            },
        ),
    ]
    comps += [
        Component(
            f"rack-{r:02d}",
            "storage_node",
            racks[r],
            {"STORMLAB_RACK": str(r), "STORMLAB_LINK_URL": f"http://{HOST}:{links[r]}", "STORMLAB_DATA_DIR": str(data_dir)},
        )
        for r in range(n)
    ]
    customers = {"STORMLAB_METADATA_URL": f"http://{HOST}:{meta}", "STORMLAB_RACK_URLS": rack_urls}
    comps.append(Component("loadgen", "services.loadgen", loadgen, customers))
    for (name, module), port in zip(DEPENDENT, dependent_ports, strict=True):
        env = {**customers, "STORMLAB_RACK_URLS": ",".join(f"http://{HOST}:{p}" for p in paths[name])}
        comps.append(Component(name, module, port, {**env, "STORMLAB_DATA_DIR": str(data_dir / name)}))
    return [Component(c.name, c.module, c.port, {**common, **c.env, "STORMLAB_PORT": str(c.port), "STORMLAB_HOST": HOST}) for c in comps]


def up(settings: LabSettings, base_port: int = DEFAULT_BASE_PORT, wait_s: float = 60.0, directory: Path | None = None) -> dict:
    directory = directory or state_dir()
    if running(directory):
        raise LabError(f"a lab is already up (state in {directory}); run `stormlab down` first")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "logs").mkdir(exist_ok=True)
    (directory / "state.json").unlink(missing_ok=True)
    data_dir = directory / "data"
    components = plan(settings, base_port, data_dir)
    sup_port = base_port + 3 if base_port else _free_ports(1)[0]
    (directory / "plan.json").write_text(
        json.dumps(
            {
                "settings": settings.to_env(),
                "supervisor_port": sup_port,
                "supervisor_url": f"http://{HOST}:{sup_port}",
                "components": [c.__dict__ | {"url": c.url} for c in components],
            },
            indent=1,
        )
    )
    env = {**os.environ, TOKEN_ENV: ensure_token(directory), "STORMLAB_EVENT_LOG": str(directory / "chaos-events.jsonl")}
    with open(directory / "logs" / "supervisor.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", SUPERVISOR_MODULE, str(directory)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _STARTED[proc.pid] = proc
    pending = {c.name: c.url for c in components} | {"supervisor": f"http://{HOST}:{sup_port}"}
    try:
        with _term_as_interrupt():
            _wait_healthy(proc, pending, wait_s, directory)
    except BaseException:  # Ctrl-C, SIGTERM, a component that never came up: nothing stays behind
        _stop(proc)
        (directory / "state.json").unlink(missing_ok=True)
        raise
    return read_state(directory) or {}


def _wait_healthy(proc: subprocess.Popen, pending: dict[str, str], wait_s: float, directory: Path) -> None:
    deadline = time.monotonic() + wait_s
    while pending:
        if proc.poll() is not None:
            raise LabError(f"the supervisor exited ({proc.returncode}); see {directory / 'logs'}")
        if time.monotonic() > deadline:
            raise LabError(f"not healthy after {wait_s:.0f}s: {', '.join(sorted(pending))}; see {directory / 'logs'}")
        for name, url in list(pending.items()):
            if _healthy(url):
                del pending[name]
        time.sleep(0.2)


@contextlib.contextmanager
def _term_as_interrupt() -> Iterator[None]:
    """SIGTERM during start-up interrupts it like Ctrl-C (in the main thread, where Python takes
    signals), so the half-started lab is stopped; the previous handler comes back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop(proc: subprocess.Popen, wait_s: float = 15.0) -> None:
    """Stop the supervisor this process started (its children follow it)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()  # its children get SIGKILL too, via the parent-death signal
            proc.wait()
    _STARTED.pop(proc.pid, None)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=1.0) as resp:
            return resp.status == 200
    except OSError:
        return False


def down(directory: Path | None = None, wait_s: float = 15.0) -> bool:
    """Stop exactly what ``up`` started; returns False if nothing was up."""
    directory = directory or state_dir()
    state = read_state(directory)
    if not state or not is_supervisor(state["supervisor_pid"], directory):
        (directory / "state.json").unlink(missing_ok=True)
        return False
    pid = state["supervisor_pid"]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while is_supervisor(pid, directory) and time.monotonic() < deadline:
        time.sleep(0.1)
    if is_supervisor(pid, directory):
        os.kill(pid, signal.SIGKILL)  # its children get SIGKILL too, via the parent-death signal
    if pid in _STARTED:
        _STARTED.pop(pid).wait()
    (directory / "state.json").unlink(missing_ok=True)
    return True
