"""The docker backend: the same faults on the compose project's containers.

Each fault is built, by a pure function, as the exact commands to run inside the target
container, and the revert goes in with the fault: one detached shell applies the rules, sleeps
for the duration, then removes them. That shell lives in the target's own namespaces, so the
revert is armed on the target side: killing the chaos command (or its container) does not
leave the fault behind. Network faults use iptables in the target's network namespace (the
pattern pumba uses), so they drop packets and never stop the process.

Only containers carrying the lab's compose project label are touched; anything else is
refused before a command runs.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from stormcore import roster

try:  # the Docker SDK is optional: only the docker backend needs it
    import docker.errors  # (without the SDK, `docker` may name this repository's docker/ folder)

    import docker
except ImportError:  # pragma: no cover - installed with stormlab[docker]
    docker = None  # type: ignore[assignment]
NOT_FOUND: type[Exception] = docker.errors.NotFound if docker is not None else LookupError

PROJECT_LABEL = "com.docker.compose.project"
STACK_LABEL = "com.docker.stack.namespace"  # a swarm stack's containers
DEFAULT_PROJECT = "stormlab"


class NotOurs(PermissionError):
    """The target is not a container of the lab: refused, nothing changed (exit 2)."""


@dataclass(frozen=True)
class Exec:
    container: str
    argv: tuple[str, ...]
    detach: bool = True


# The shell holding a fault writes ``FAULT_FILE + its pid`` once every rule is in: the first line
# "fault ends-at-epoch-seconds", then its undo commands (newest first). /dev/shm is a tmpfs that
# a container restart empties, so a file never outlives the container's processes.
FAULT_FILE = "/dev/shm/stormlab-fault."


# Only files owned by the user reading them (root: the fault shells run as root) are trusted; the
# service's own user can write to /dev/shm too. A file's holder is alive when its pid is a number
# above 1 whose command line is a fault shell; a file whose holder is gone (killed, crashed) is an
# orphan: its undo lines are run and it is removed, by `list` and by `halt` alike. A name that is
# not a pid is removed, never signalled.
def _each(prefix: str) -> str:
    return (
        f'for f in {prefix}*; do [ -f "$f" ] && [ -O "$f" ] || continue; p="${{f##*.}}"; '
        'case "$p" in ""|*[!0-9]*) rm -f "$f"; continue;; esac; first="$(head -n 1 "$f")"; '
        'if [ "$p" -gt 1 ] && grep -qs stormlab-fault "/proc/$p/cmdline"; then '
    )


_REAP = 'else tail -n +2 "$f" | sh; rm -f "$f"; '


def list_command(prefix: str = FAULT_FILE) -> tuple[str, ...]:
    """Faults held in a container, one line each: "pid fault ends-at state" (state: held, or
    orphan: its holder was gone and it has just been reverted)."""
    return ("sh", "-c", _each(prefix) + 'echo "$p $first held"; ' + _REAP + 'echo "$p $first orphan"; fi; done; true')


def halt_command(prefix: str = FAULT_FILE) -> tuple[str, ...]:
    """Ends them now: TERM to each live holding shell runs its revert; orphans are reverted here."""
    return ("sh", "-c", "n=0; " + _each(prefix) + 'kill -TERM "$p" && n=$((n+1)); ' + _REAP + "n=$((n+1)); fi; done; echo $n")


LIST, HALT = list_command(), halt_command()

Step = tuple[str, "str | None"]  # a command, and what undoes it (None: nothing to undo)


def _dq(command: str) -> str:
    """``command`` inside double quotes: its ``$p`` expands when written, nothing else does."""
    return '"' + command.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`") + '"'


def _armed(fault: str, steps: list[Step], duration_s: float, prefix: str = FAULT_FILE) -> tuple[str, ...]:
    """One shell that applies the steps, writes its fault file, waits out the lease, and reverts;
    TERM or INT (`chaos halt`) reverts at once. A step that fails undoes the steps before it and
    the shell exits 1 without a file: nothing applied, nothing reverted that was not its own."""
    parts: list[str] = ["f=" + prefix + "$$"]
    undone: list[str] = []
    for apply, undo in steps:
        parts.append(f"if ! {apply}; then {'; '.join([*undone, 'exit 1'])}; fi")
        if undo is not None:
            undone.insert(0, undo)
    ends = f"$(( $(date +%s) + {max(1, round(duration_s))} ))"
    parts += [
        f"undo() {{ {'; '.join([*undone, 'rm -f $f'])}; }}",
        "trap 'kill $! 2>/dev/null; undo; exit 0' TERM INT",
        f"printf '%s\\n' \"{fault} {ends}\" {' '.join(_dq(u) for u in undone)} > $f",
        f"sleep {duration_s:g} & wait $!",
        "undo",
    ]
    return ("sh", "-c", "; ".join(parts))


def _drop_rules(peer_ips: list[str], direction: str) -> list[list[str]]:
    rules = []
    for ip in peer_ips:
        if direction in ("both", "out"):
            rules.append(["OUTPUT", "-d", ip, "-j", "DROP"])
        if direction in ("both", "in"):
            rules.append(["INPUT", "-s", ip, "-j", "DROP"])
    return rules


def partition(container: str, peer_ips: list[str], duration_s: float, direction: str = "both", fault: str = "partition") -> list[Exec]:
    """Cut ``container`` off from ``peer_ips``: both ways, or only ``out`` / ``in``."""
    if direction not in ("both", "out", "in"):
        raise ValueError("direction must be both, out or in")
    if not peer_ips:
        raise ValueError("no peers to cut off")
    steps: list[Step] = [(shlex.join(["iptables", "-I", *r]), shlex.join(["iptables", "-D", *r])) for r in _drop_rules(peer_ips, direction)]
    return [Exec(container, _armed(fault, steps, duration_s))]


def _netem(container: str, fault: str, spec: list[str], duration_s: float, device: str) -> list[Exec]:
    add = shlex.join(["tc", "qdisc", "add", "dev", device, "root", "netem", *spec])
    return [Exec(container, _armed(fault, [(add, shlex.join(["tc", "qdisc", "del", "dev", device, "root", "netem"]))], duration_s))]


def latency(container: str, delay_ms: float, jitter_ms: float, duration_s: float, device: str = "eth0") -> list[Exec]:
    spec = ["delay", f"{delay_ms:g}ms"] + ([f"{jitter_ms:g}ms"] if jitter_ms else [])
    return _netem(container, "latency", spec, duration_s, device)


def loss(container: str, probability: float, duration_s: float, device: str = "eth0") -> list[Exec]:
    return _netem(container, "loss", ["loss", f"{100 * probability:g}%"], duration_s, device)


# The lab's containers run with `init: true`: PID 1 is docker-init, the service is its child.
# (A signal to a namespace's PID 1 from inside is ignored, so the service must not be PID 1.)
SERVICE_PID = "p=$(pgrep -o -P 1)"


def freeze(container: str, duration_s: float, find_pid: str = SERVICE_PID) -> list[Exec]:
    """SIGSTOP the container's service process (``find_pid`` sets ``$p`` to it); the shell doing
    it stays awake to SIGCONT it."""
    return [Exec(container, _armed("freeze", [(find_pid, None), ("kill -STOP $p", "kill -CONT $p")], duration_s))]


def kill(container: str) -> list[Exec]:
    """SIGKILL the service; docker-init exits with it and compose's restart policy brings it back."""
    return [Exec(container, ("sh", "-c", f"{SERVICE_PID} && kill -KILL $p"))]


class Runner(Protocol):
    def labels(self, container: str) -> dict[str, str]: ...

    def exec(self, command: Exec) -> str: ...

    def racks(self) -> dict[int, str]: ...

    def containers(self, service: str) -> list[str]: ...

    def ip(self, container: str) -> str: ...


def rack_of(labels: dict[str, str]) -> int | None:
    """The rack a container serves, from the labels compose or swarm give it: the ``rack``
    service's replica number on compose, its task slot on a swarm (``stormlab_rack.4.x``); both
    count from 1, as the racks' own rule does (``STORMLAB_RACK=replica`` / ``slot:N``)."""
    number = labels.get("com.docker.compose.container-number", "")
    if labels.get("com.docker.compose.service") != "rack":
        task = labels.get("com.docker.swarm.task.name", "").split(".")
        service = labels.get("com.docker.swarm.service.name", "")
        number = task[1] if len(task) == 3 and service.endswith("_rack") and task[0] == service else ""
    if number.isdigit() and int(number) >= 1:
        return int(number) - 1
    return None


def project_of(labels: dict[str, str]) -> str | None:
    """The compose project, or the swarm stack, a container belongs to."""
    return labels.get(PROJECT_LABEL) or labels.get(STACK_LABEL)


SERVICES = roster.NAMED_TARGETS  # compose services named as their targets (the racks: one scaled service)
ENGINE_FAULTS = ("blip", "partition", "latency", "loss", "freeze", "kill", "isolate")  # what an engine's backend holds


def rack_named(target: str) -> int | None:
    """The rack a ``--target`` names (``rack-3``, ``rack-03``), or None."""
    match = re.fullmatch(r"rack-0*(\d+)", target)
    return int(match.group(1)) if match else None


def not_on_engine(fault: str, engine: str) -> str:
    """Why a fault the local lab's supervisor holds (a live deploy) is refused on an engine."""
    return f"{fault} is held by the local lab's supervisor, which {engine} does not run: use `stormlab up` for it"


def build(body: dict[str, Any], runner: Runner) -> list[Exec]:
    """The commands for a checked fault request (``chaos/catalog.py``) on the compose project
    (rack N is replica N+1 of the ``rack`` service)."""
    f, duration = body["fault"], body["duration_s"]
    if f not in ENGINE_FAULTS:
        raise NotOurs(not_on_engine(f, "compose or a swarm"))
    racks = runner.racks()
    if f in ("freeze", "kill", "isolate"):
        if body["target"] in SERVICES:
            names = runner.containers(body["target"])
        else:
            rack = rack_named(body["target"])
            names = [racks[rack]] if rack in racks else []
        if not names:
            raise NotOurs(
                f"--target {body['target']!r} is not a container of the lab; targets: {', '.join(SERVICES)}, "
                f"{', '.join(f'rack-{n}' for n in sorted(racks))}"
            )
        if f != "isolate":
            return freeze(names[0], duration) if f == "freeze" else kill(names[0])
    missing = [r for r in body["racks"] if r not in racks]
    if missing:
        raise NotOurs(f"no container for rack(s) {', '.join(map(str, missing))}")
    chosen = [racks[r] for r in body["racks"]]
    if f == "isolate":  # the service's side: its packets to and from those racks are dropped
        return partition(names[0], [runner.ip(c) for c in chosen], duration, "both", f)
    if f in ("blip", "partition"):
        meta_ips = [runner.ip(c) for c in runner.containers("metadata")]
        direction = {"both": "both", "to-metadata": "out", "from-metadata": "in"}[body.get("direction", "both")]
        return [cmd for c in chosen for cmd in partition(c, meta_ips, duration, direction, f)]
    if f == "latency":
        return [cmd for c in chosen for cmd in latency(c, 1000 * body["delay_s"], 1000 * body["jitter_s"], duration)]
    if f == "loss":
        return [cmd for c in chosen for cmd in loss(c, body["probability"], duration)]
    raise ValueError(f"{f} is not a docker fault")


def check_ours(runner: Runner, containers: Iterable[str], project: str = DEFAULT_PROJECT) -> None:
    for container in set(containers):
        if project_of(runner.labels(container)) != project:
            raise NotOurs(f"{container} is not a container of the {project!r} compose project or stack: refused")


def run(runner: Runner, commands: list[Exec], project: str = DEFAULT_PROJECT) -> None:
    """Check every target belongs to the lab, then run the commands."""
    check_ours(runner, (c.container for c in commands), project)
    for command in commands:
        runner.exec(command)


@dataclass(frozen=True)
class Held:
    container: str
    pid: int  # of the shell holding it
    fault: str
    ends_at: float
    orphan: bool  # its holder was gone: reverted just now by the listing


def held(runner: Runner, containers: Iterable[str]) -> list[Held]:
    """Faults held now (orphans found on the way are reverted and reported as such)."""
    rows = []
    for container in containers:
        for line in runner.exec(Exec(container, LIST, detach=False)).splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0].isdigit():
                pid, fault, ends_at, state = parts
                rows.append(Held(container, int(pid), fault, float(ends_at), state == "orphan"))
    return rows


def halt(runner: Runner, containers: Iterable[str]) -> int:
    return sum(int(runner.exec(Exec(c, HALT, detach=False)).strip() or 0) for c in containers)


class SdkRunner:
    """The Docker SDK behind the Runner interface (imported only when the docker backend is used)."""

    def __init__(self, project: str = DEFAULT_PROJECT, client_factory: Callable | None = None) -> None:
        if docker is None and client_factory is None:
            raise ImportError("the docker backend needs the Docker SDK: pip install 'stormlab[docker]'")
        self.project = project
        self.client = client_factory() if client_factory else docker.from_env()  # type: ignore[attr-defined]

    def labels(self, container: str) -> dict[str, str]:
        try:
            return self.client.containers.get(container).labels or {}
        except NOT_FOUND:  # not a container at all
            return {}

    def exec(self, command: Exec) -> str:
        # As root: the services run unprivileged, the fault needs the container's NET_ADMIN.
        result = self.client.containers.get(command.container).exec_run(list(command.argv), detach=command.detach, user="root")
        return "" if command.detach else result.output.decode(errors="replace")

    def _ours(self, service: str | None = None) -> list:
        """The project's running containers (of one service): compose's, else a swarm stack's."""
        compose = [f"{PROJECT_LABEL}={self.project}"] + ([f"com.docker.compose.service={service}"] if service else [])
        found = self.client.containers.list(filters={"label": compose})
        if not found:
            stack = [f"{STACK_LABEL}={self.project}"] + ([f"com.docker.swarm.service.name={self.project}_{service}"] if service else [])
            found = self.client.containers.list(filters={"label": stack})
        return found

    def containers(self, service: str) -> list[str]:
        return sorted(c.name for c in self._ours(service))

    def racks(self) -> dict[int, str]:
        found = {}
        for c in self._ours("rack"):
            rack = rack_of(c.labels or {})
            if rack is not None:
                found[rack] = c.name
        return found

    def ip(self, container: str) -> str:
        networks = self.client.containers.get(container).attrs["NetworkSettings"]["Networks"]
        return next(iter(networks.values()))["IPAddress"]
