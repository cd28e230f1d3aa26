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

try:  # the Docker SDK is optional: only the docker backend needs it
    import docker.errors  # (without the SDK, `docker` may name this repository's docker/ folder)

    import docker
except ImportError:  # pragma: no cover - installed with stormlab[docker]
    docker = None  # type: ignore[assignment]
NOT_FOUND: type[Exception] = docker.errors.NotFound if docker is not None else LookupError

PROJECT_LABEL = "com.docker.compose.project"
DEFAULT_PROJECT = "stormlab"


class NotOurs(PermissionError):
    """The target is not a container of the lab: refused, nothing changed (exit 2)."""


@dataclass(frozen=True)
class Exec:
    container: str
    argv: tuple[str, ...]
    detach: bool = True


FAULT_FILE = "/tmp/stormlab-fault."  # + the pid of the shell holding the fault; it holds "fault ends-at"

# Faults held in a container, one line each: "pid fault ends-at-epoch-seconds".
LIST = ("sh", "-c", f'for f in {FAULT_FILE}*; do [ -e "$f" ] && echo "${{f##*.}} $(cat "$f")"; done; true')
# Ends them now: TERM to each holding shell (by the pid in its file) runs its revert.
HALT = ("sh", "-c", f'n=0; for f in {FAULT_FILE}*; do [ -e "$f" ] && kill -TERM "${{f##*.}}" && n=$((n+1)); done; echo $n')


def _armed(fault: str, apply: list[str], revert: list[str], duration_s: float) -> tuple[str, ...]:
    """One shell that applies, writes its fault file, waits out the lease, and reverts; TERM or
    INT (`chaos halt`) reverts at once. A fault that did not apply leaves no file behind."""
    undo = "; ".join(revert)
    script = (
        f"f={FAULT_FILE}$$; undo() {{ {undo}; rm -f $f; }}; trap 'kill $! 2>/dev/null; undo; exit 0' TERM INT; "
        f'if {" && ".join(apply)}; then echo "{fault} $(( $(date +%s) + {max(1, round(duration_s))} ))" > $f; '
        f"sleep {duration_s:g} & wait $!; fi; undo"
    )
    return ("sh", "-c", script)


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
    rules = _drop_rules(peer_ips, direction)
    apply = [shlex.join(["iptables", "-I", *r]) for r in rules]
    revert = [shlex.join(["iptables", "-D", *r]) for r in rules]
    return [Exec(container, _armed(fault, apply, revert, duration_s))]


def latency(container: str, delay_ms: float, jitter_ms: float, duration_s: float, device: str = "eth0") -> list[Exec]:
    spec = ["delay", f"{delay_ms:g}ms"] + ([f"{jitter_ms:g}ms"] if jitter_ms else [])
    apply = [shlex.join(["tc", "qdisc", "add", "dev", device, "root", "netem", *spec])]
    revert = [shlex.join(["tc", "qdisc", "del", "dev", device, "root", "netem"])]
    return [Exec(container, _armed("latency", apply, revert, duration_s))]


def loss(container: str, probability: float, duration_s: float, device: str = "eth0") -> list[Exec]:
    apply = [shlex.join(["tc", "qdisc", "add", "dev", device, "root", "netem", "loss", f"{100 * probability:g}%"])]
    revert = [shlex.join(["tc", "qdisc", "del", "dev", device, "root", "netem"])]
    return [Exec(container, _armed("loss", apply, revert, duration_s))]


# The lab's containers run with `init: true`: PID 1 is docker-init, the service is its child.
# (A signal to a namespace's PID 1 from inside is ignored, so the service must not be PID 1.)
SERVICE_PID = "p=$(pgrep -o -P 1)"


def pause(container: str, duration_s: float) -> list[Exec]:
    """SIGSTOP the container's service process; the shell doing it stays awake to SIGCONT it."""
    return [Exec(container, _armed("pause", [SERVICE_PID, "kill -STOP $p"], ["kill -CONT $p"], duration_s))]


def kill(container: str) -> list[Exec]:
    """SIGKILL the service; docker-init exits with it and compose's restart policy brings it back."""
    return [Exec(container, ("sh", "-c", f"{SERVICE_PID} && kill -KILL $p"))]


class Runner(Protocol):
    def labels(self, container: str) -> dict[str, str]: ...

    def exec(self, command: Exec) -> str: ...

    def racks(self) -> dict[int, str]: ...

    def containers(self, service: str) -> list[str]: ...

    def ip(self, container: str) -> str: ...


RACK_SERVICE = re.compile(r"^rack-(\d+)$")
SERVICES = ("metadata", "queues", "scaling", "metrics", "console")  # compose services named as their targets


def build(body: dict[str, Any], runner: Runner) -> list[Exec]:
    """The commands for a checked fault request (``chaos/catalog.py``) on the compose project
    (rack N is service rack-N)."""
    racks = runner.racks()
    f, duration = body["fault"], body["duration_s"]
    if f in ("pause", "kill", "isolate"):
        if body["target"] in SERVICES:
            names = runner.containers(body["target"])
        else:
            match = re.fullmatch(r"rack-0*(\d+)", body["target"])
            names = [racks[int(match.group(1))]] if match and int(match.group(1)) in racks else []
        if not names:
            raise NotOurs(
                f"--target {body['target']!r} is not a container of the lab; targets: {', '.join(SERVICES)}, "
                f"{', '.join(f'rack-{n}' for n in sorted(racks))}"
            )
        if f != "isolate":
            return pause(names[0], duration) if f == "pause" else kill(names[0])
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
        if runner.labels(container).get(PROJECT_LABEL) != project:
            raise NotOurs(f"{container} is not a container of the {project!r} compose project: refused")


def run(runner: Runner, commands: list[Exec], project: str = DEFAULT_PROJECT) -> None:
    """Check every target belongs to the lab, then run the commands."""
    check_ours(runner, (c.container for c in commands), project)
    for command in commands:
        runner.exec(command)


def held(runner: Runner, containers: Iterable[str]) -> list[tuple[str, int, str, float]]:
    """Faults held now: (container, pid of the holding shell, fault, ends at)."""
    rows = []
    for container in containers:
        for line in runner.exec(Exec(container, LIST, detach=False)).splitlines():
            pid, fault, ends_at = line.split()
            rows.append((container, int(pid), fault, float(ends_at)))
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
        wanted = [f"{PROJECT_LABEL}={self.project}"] + ([f"com.docker.compose.service={service}"] if service else [])
        return self.client.containers.list(filters={"label": wanted})

    def containers(self, service: str) -> list[str]:
        return sorted(c.name for c in self._ours(service))

    def racks(self) -> dict[int, str]:
        found = {}
        for c in self._ours():
            match = RACK_SERVICE.match(c.labels.get("com.docker.compose.service", ""))
            if match:
                found[int(match.group(1))] = c.name
        return found

    def ip(self, container: str) -> str:
        networks = self.client.containers.get(container).attrs["NetworkSettings"]["Networks"]
        return next(iter(networks.values()))["IPAddress"]
