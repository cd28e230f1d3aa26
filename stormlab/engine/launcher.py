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
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from chaos.kernel_link import KernelLinks, available
from stormcore import procs, roster
from stormcore.auth import ENV as TOKEN_ENV
from stormcore.auth import ensure_token
from stormcore.errors import LabError, UsageError
from stormcore.fleet import cell_name, cell_of, node_id
from stormcore.labstate import SUPERVISOR_MODULE, is_supervisor, read_state, running, state_dir
from stormcore.racks import SCHEDULE_ORIGIN_ENV
from stormcore.roster import rack_name
from stormcore.settings import LabSettings
from stormcore.wire import DEADLINE_HEADER, REFUSAL_HEADER
from stormlab.engine import door
from stormlab.engine.ports import DEFAULT_BASE_PORT, HOST, PortPlan, port_plan

# Supervisors (or their doors) this process started, kept so `down` can reap them (no zombies, no warnings).
_STARTED: dict[int, subprocess.Popen] = {}
_DOORS: dict[Path, subprocess.Popen] = {}  # a namespace's door, by its lab's directory: it ends after its supervisor


@dataclass(frozen=True)
class Component:
    name: str
    module: str
    port: int
    env: dict[str, str]
    argv: list[str] | None = None  # a process the lab did not write (an external rack): run this instead of the module

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"


@dataclass(frozen=True)
class LabPlan:
    components: list[Component]
    supervisor_port: int


def plan(
    settings: LabSettings, base_port: int, data_dir: Path, cascade: Sequence[str] | None = None, external: Mapping[int, str] | None = None
) -> LabPlan:
    """Every process of the lab (the roster's), with its port and environment. ``cascade``: the
    dependent services to run (None: its incident's); ``external``: racks run by a command of
    the user's instead of the lab's (docs/contract.md), by rack index."""
    external = dict(external or {})
    unknown = sorted(r for r in external if not 0 <= r < settings.racks)
    if unknown:
        raise UsageError(f"--external-rack-at: racks are 0 to {settings.racks - 1}, not {', '.join(map(str, unknown))}")
    cascade = roster.cascade_of(settings.incident) if cascade is None else tuple(s for s in roster.CASCADE if s in cascade)
    ports = port_plan(settings, base_port, cascade)
    metadata = [ports.single["metadata"], *ports.cells]
    customers = {"STORMLAB_METADATA_URL": f"http://{HOST}:{metadata[0]}", "STORMLAB_RACK_URLS": _urls(ports.racks)}
    comps: list[Component] = []
    for process in roster.ROSTER:
        if process.kind == roster.METADATA:
            comps += [Component(cell_name(c), process.module, port, {"STORMLAB_CELL": str(c)}) for c, port in enumerate(metadata)]
        elif process.kind == roster.LINKPROXY:
            comps.append(Component(process.name, process.module, ports.single[process.name], _link_env(settings, ports, metadata)))
        elif process.kind == roster.RACK:
            comps += [
                Component(
                    rack_name(r),
                    process.module,
                    port,
                    {"STORMLAB_RACK": str(r), "STORMLAB_LINK_URL": f"http://{HOST}:{link}", "STORMLAB_DATA_DIR": str(data_dir)}
                    | (external_env(settings, r) if r in external else {}),
                    shlex.split(external[r]) if r in external else None,
                )
                for r, (port, link) in enumerate(zip(ports.racks, ports.links, strict=True))
            ]
        elif process.kind == roster.CUSTOMERS:
            comps.append(Component(process.name, process.module, ports.single[process.name], customers))
        elif process.name in cascade:  # the cascade's services reach each rack through the link proxy (isolate acts there)
            env = {**customers, "STORMLAB_RACK_URLS": _urls(ports.paths[process.name]), "STORMLAB_DATA_DIR": str(data_dir / process.name)}
            comps.append(Component(process.name, process.module, ports.single[process.name], env))
    common = settings.to_env()
    return LabPlan(
        [
            Component(c.name, c.module, c.port, {**common, **c.env, "STORMLAB_PORT": str(c.port), "STORMLAB_HOST": HOST}, c.argv)
            for c in comps
        ],
        ports.single["supervisor"],
    )


def external_env(settings: LabSettings, rack: int) -> dict[str, str]:
    """What an external rack is told beyond what every rack gets (docs/contract.md): its node ids,
    the metadata service's URL through its link (the same as STORMLAB_LINK_URL), the headers, and
    the durations it needs in wall-clock seconds at this run's speed."""
    s = settings
    return {
        "STORMLAB_NODE_IDS": ",".join(node_id(rack, i) for i in range(s.nodes_per_rack)),
        "STORMLAB_DEADLINE_HEADER": DEADLINE_HEADER,
        "STORMLAB_REFUSAL_HEADER": REFUSAL_HEADER,
        "STORMLAB_WALL_RENEWAL_PERIOD_S": f"{s.renewal_period_s:g}",
        "STORMLAB_WALL_ALLOWANCE_S": f"{s.allowance_s:g}",
        "STORMLAB_EXTERNAL_RACK": "1",
    }


def _urls(ports: list[int]) -> str:
    return ",".join(f"http://{HOST}:{p}" for p in ports)


def _link_env(settings: LabSettings, ports: PortPlan, metadata: list[int]) -> dict[str, str]:
    """The link proxy's ports: each rack's link to its cell's metadata service, each service's path to each rack."""
    n = settings.racks
    return {
        "STORMLAB_METADATA_PORT": str(metadata[0]),
        "STORMLAB_LINK_PORTS": json.dumps(dict(enumerate(ports.links))),
        "STORMLAB_CELL_PORTS": json.dumps({r: metadata[cell_of(r, settings)] for r in range(n)}),
        "STORMLAB_PATH_PORTS": json.dumps({name: {r: [p, ports.racks[r]] for r, p in enumerate(ps)} for name, ps in ports.paths.items()}),
    }


NOT_TRIED = "not tried"  # the namespace's probe was not needed


def choose_link_cut(settings: LabSettings, why_not: str | None, why_no_namespace: str | None = NOT_TRIED) -> tuple[LabSettings, str]:
    """Who carries and cuts the racks' links (``link_cut``, ``auto`` chosen here: the kernel where
    the lab may, ``why_not`` None; else the kernel in a namespace of the lab's own where this user
    may make one, ``why_no_namespace`` None; else the link proxy), and the sentence that says so;
    a lab asked to cut in the kernel or a namespace where it cannot is refused with the reason."""
    kernel = "the kernel carries and cuts the racks' links (iptables), the link proxy holds their faults and a latency's detour"
    inside = f"{kernel}, in a user and network namespace of the lab's own (rootless; the lab's ports passed in from the host)"
    proxy = "the link proxy carries and cuts the racks' links"
    if settings.link_cut == "kernel":
        if why_not is not None:
            raise LabError(why_not)
        return settings, f"{kernel} (link_cut=kernel)"
    if settings.link_cut == "namespace":
        if why_no_namespace is not None:
            raise LabError(f"link_cut=namespace: {why_no_namespace}; or use link_cut=proxy")
        return settings, f"{inside} (link_cut=namespace)"
    if settings.link_cut == "proxy":
        return settings, f"{proxy} (link_cut=proxy)"
    if why_not is None:
        return settings.replace(link_cut="kernel"), f"{kernel} (link_cut=auto: root, with iptables)"
    if why_no_namespace is None:
        return settings.replace(link_cut="namespace"), f"{inside} (link_cut=auto: not root)"
    because = why_not.split(";")[0] + ("" if why_no_namespace == NOT_TRIED else f"; {why_no_namespace}")
    return settings.replace(link_cut="proxy"), f"{proxy} (link_cut=auto: {because})"


def choose(settings: LabSettings) -> tuple[LabSettings, str]:
    """``choose_link_cut`` on this host: the namespace tried only where it could be the answer."""
    why_not = available()
    wants_namespace = settings.link_cut == "namespace" or (settings.link_cut == "auto" and why_not is not None)
    return choose_link_cut(settings, why_not, door.why_not() if wants_namespace else NOT_TRIED)


def up(
    settings: LabSettings,
    base_port: int = DEFAULT_BASE_PORT,
    wait_s: float = 60.0,
    directory: Path | None = None,
    cascade: Sequence[str] | None = None,
    external: Mapping[int, str] | None = None,
    token: str | None = None,
) -> dict:
    """Start a lab of ``settings`` (``cascade``: the dependent services to run, None: its incident's;
    ``external``: racks run by a command of the user's, docs/contract.md; ``token``: the lab's
    token, else the one in force for ``directory``) and return its state once every process
    answers /healthz."""
    directory = directory or state_dir()
    if running(directory):
        raise LabError(f"a lab is already up (state in {directory}); run `stormlab down` first")
    settings, links = choose(settings)
    soft, hard = procs.raise_open_files(procs.files_wanted(settings.nodes_total, settings.nodes_per_rack))  # inherited
    needed = procs.files_needed(settings.nodes_per_rack)
    if 0 <= soft < needed:  # RLIM_INFINITY (-1): no limit
        raise LabError(
            f"a rack of {settings.nodes_per_rack:,} nodes needs about {needed:,} open files; this user may open {hard:,} "
            "(ulimit -Hn): raise the hard limit (limits.conf, or systemd's LimitNOFILE) or run fewer nodes per rack"
        )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "logs").mkdir(exist_ok=True)
    (directory / "state.json").unlink(missing_ok=True)
    data_dir = directory / "data"
    laid_out = plan(settings, base_port, data_dir, cascade, external)
    components, sup_port = laid_out.components, laid_out.supervisor_port
    (directory / "plan.json").write_text(
        json.dumps(
            {
                "settings": settings.to_env(),
                "links": links,
                "supervisor_port": sup_port,
                "supervisor_url": f"http://{HOST}:{sup_port}",
                "components": [c.__dict__ | {"url": c.url} for c in components],
            },
            indent=1,
        )
    )
    env = {
        **os.environ,
        TOKEN_ENV: token or ensure_token(directory),
        "STORMLAB_EVENT_LOG": str(directory / "chaos-events.jsonl"),
        # one origin for every rack's renewal schedule (a rack starting later takes its next slots
        # on it), so the fleet's renewals interleave as one, as in the reference model
        SCHEDULE_ORIGIN_ENV: f"{time.time():.3f}",
    }
    argv, passed = [sys.executable, "-m", SUPERVISOR_MODULE, str(directory)], {}
    if settings.link_cut == "namespace":  # the door first, in the namespace, the lab's ports bound here
        try:
            passed = door.listen([c.port for c in components] + [sup_port])
        except OSError as exc:  # taken since the plan chose it
            raise LabError(f"the lab's ports cannot be bound on {HOST} ({exc}); pick another --base-port, or 0") from exc
        fds = json.dumps({port: sock.fileno() for port, sock in passed.items()})
        argv = [*(door.unshare_argv() or []), sys.executable, "-m", door.__name__, fds, "--", *argv]
    try:
        with open(directory / "logs" / "supervisor.log", "ab") as log:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=[sock.fileno() for sock in passed.values()],
            )
    finally:
        for sock in passed.values():  # the door holds them now
            sock.close()
    _STARTED[proc.pid] = proc
    if passed:
        _DOORS[directory] = proc
    pending = {c.name: c.url for c in components} | {"supervisor": f"http://{HOST}:{sup_port}"}
    try:
        with terms_as_interrupt():  # the half-started lab is stopped
            _wait_healthy(proc, pending, wait_s, directory)
    except BaseException:  # Ctrl-C, SIGTERM, a component that never came up: nothing stays behind
        _stop(proc)
        _DOORS.pop(directory, None)
        _remove_kernel_links(directory)  # a link proxy stopped mid-install had no chance to
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


TERMINATING = (signal.SIGTERM, signal.SIGHUP)  # a stop asked of the process, by a supervisor or a closed terminal


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def interrupt_on_term() -> None:
    """SIGTERM and SIGHUP interrupt the main thread like Ctrl-C from now on (so the `finally`
    that stops a lab runs). Again after an asyncio.run: closing its loop puts them back to the
    default, which kills the process on the spot."""
    if threading.current_thread() is threading.main_thread():
        for sig in TERMINATING:
            signal.signal(sig, _interrupt)


@contextlib.contextmanager
def terms_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP as Ctrl-C while the block runs; the previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in TERMINATING}
    interrupt_on_term()
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
        if state:  # a lab whose supervisor died: what its link proxy left in the kernel goes too
            _remove_kernel_links(directory)
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
    if directory in _DOORS:  # its supervisor gone, the door ends (the namespace and its rules with it)
        _stop(_DOORS.pop(directory), wait_s)
    _remove_kernel_links(directory)
    (directory / "state.json").unlink(missing_ok=True)
    return True


def kernel_links_of(directory: Path) -> KernelLinks | None:
    """The kernel's rules of the lab planned in ``directory`` (its plan.json), if it cut its links
    there (link_cut=kernel) and this process may touch them."""
    try:
        plan_ = json.loads((directory / "plan.json").read_text())
    except (OSError, ValueError):
        return None
    proxy = [c for c in plan_.get("components", []) if c.get("name") == "linkproxy"]
    if plan_.get("settings", {}).get("STORMLAB_LINK_CUT") != "kernel" or not proxy or available() is not None:
        return None
    return KernelLinks(str(proxy[0]["port"]))


def _remove_kernel_links(directory: Path) -> None:
    """The rules a lab's link proxy cut its links with (link_cut=kernel), if a killed proxy left
    any: its own shutdown removes them; this is for when it had no chance to (killed, or stopped
    while it installed them)."""
    links = kernel_links_of(directory)
    if links is not None:
        links.remove()
