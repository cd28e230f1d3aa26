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

import shlex
from dataclasses import dataclass
from typing import Callable, Protocol

PROJECT_LABEL = "com.docker.compose.project"
DEFAULT_PROJECT = "stormlab"


class NotOurs(PermissionError):
    """The target is not a container of the lab: refused, nothing changed (exit 2)."""


@dataclass(frozen=True)
class Exec:
    container: str
    argv: tuple[str, ...]
    detach: bool = True


def _armed(apply: list[str], revert: list[str], duration_s: float) -> tuple[str, ...]:
    """One shell that applies, waits out the lease, and reverts (the revert also runs on TERM)."""
    undo = "; ".join(revert)
    script = f"trap '{undo}' TERM INT; {' && '.join(apply)}; sleep {duration_s:g}; {undo}"
    return ("sh", "-c", script)


def _drop_rules(peer_ips: list[str], direction: str) -> list[list[str]]:
    rules = []
    for ip in peer_ips:
        if direction in ("both", "out"):
            rules.append(["OUTPUT", "-d", ip, "-j", "DROP"])
        if direction in ("both", "in"):
            rules.append(["INPUT", "-s", ip, "-j", "DROP"])
    return rules


def partition(container: str, peer_ips: list[str], duration_s: float, direction: str = "both") -> list[Exec]:
    """Cut ``container`` off from ``peer_ips``: both ways, or only ``out`` / ``in``."""
    if direction not in ("both", "out", "in"):
        raise ValueError("direction must be both, out or in")
    if not peer_ips:
        raise ValueError("no peers to cut off")
    rules = _drop_rules(peer_ips, direction)
    apply = [shlex.join(["iptables", "-I", *r]) for r in rules]
    revert = [shlex.join(["iptables", "-D", *r]) for r in rules]
    return [Exec(container, _armed(apply, revert, duration_s))]


def latency(container: str, delay_ms: float, jitter_ms: float, duration_s: float, device: str = "eth0") -> list[Exec]:
    spec = ["delay", f"{delay_ms:g}ms"] + ([f"{jitter_ms:g}ms"] if jitter_ms else [])
    apply = [shlex.join(["tc", "qdisc", "add", "dev", device, "root", "netem", *spec])]
    revert = [shlex.join(["tc", "qdisc", "del", "dev", device, "root", "netem"])]
    return [Exec(container, _armed(apply, revert, duration_s))]


def loss(container: str, probability: float, duration_s: float, device: str = "eth0") -> list[Exec]:
    apply = [shlex.join(["tc", "qdisc", "add", "dev", device, "root", "netem", "loss", f"{100 * probability:g}%"])]
    revert = [shlex.join(["tc", "qdisc", "del", "dev", device, "root", "netem"])]
    return [Exec(container, _armed(apply, revert, duration_s))]


def pause(container: str, duration_s: float) -> list[Exec]:
    """SIGSTOP the container's main process; the shell doing it stays awake to SIGCONT it."""
    return [Exec(container, _armed(["kill -STOP 1"], ["kill -CONT 1"], duration_s))]


def kill(container: str) -> list[Exec]:
    """SIGKILL the main process; compose's restart policy brings the container back."""
    return [Exec(container, ("sh", "-c", "kill -KILL 1"))]


class Runner(Protocol):
    def labels(self, container: str) -> dict[str, str]: ...

    def exec(self, command: Exec) -> None: ...

    def containers(self, service: str) -> list[str]: ...

    def ip(self, container: str) -> str: ...


def build(args, runner: Runner) -> list[Exec]:
    """The commands for a `stormlab chaos` request on the compose project (racks in container order)."""
    racks = runner.containers("rack")
    f = args.fault
    if f in ("pause", "kill"):
        service, _, number = args.target.partition("-")
        names = runner.containers("metadata") if args.target == "metadata" else racks
        index = 0 if args.target == "metadata" else int(number)
        if service not in ("metadata", "rack") or index >= len(names):
            raise NotOurs(f"--target {args.target!r} is not a container of the lab")
        return pause(names[index], args.duration_s) if f == "pause" else kill(names[index])
    chosen = [racks[r] for r in args.rack_list]
    if f in ("blip", "partition"):
        meta_ips = [runner.ip(c) for c in runner.containers("metadata")]
        direction = {"both": "both", "to-metadata": "out", "from-metadata": "in"}[getattr(args, "direction", "both")]
        return [cmd for c in chosen for cmd in partition(c, meta_ips, args.duration_s, direction)]
    if f == "latency":
        return [cmd for c in chosen for cmd in latency(c, args.delay_ms, args.jitter_ms, args.duration_s)]
    if f == "loss":
        return [cmd for c in chosen for cmd in loss(c, args.probability, args.duration_s)]
    raise ValueError(f"{f} is not a docker fault")


def run(runner: Runner, commands: list[Exec], project: str = DEFAULT_PROJECT) -> None:
    """Check every target belongs to the lab, then run the commands."""
    for container in {c.container for c in commands}:
        if runner.labels(container).get(PROJECT_LABEL) != project:
            raise NotOurs(f"{container} is not a container of the {project!r} compose project: refused")
    for command in commands:
        runner.exec(command)


class SdkRunner:
    """The Docker SDK behind the Runner interface (imported only when the docker backend is used)."""

    def __init__(self, project: str = DEFAULT_PROJECT, client_factory: Callable | None = None) -> None:
        import docker  # noqa: PLC0415 - optional dependency of the docker backend

        self.project = project
        self.client = (client_factory or docker.from_env)()

    def labels(self, container: str) -> dict[str, str]:
        import docker.errors  # noqa: PLC0415

        try:
            return self.client.containers.get(container).labels or {}
        except docker.errors.NotFound:
            return {}

    def exec(self, command: Exec) -> None:
        self.client.containers.get(command.container).exec_run(list(command.argv), detach=command.detach)

    def containers(self, service: str) -> list[str]:
        found = self.client.containers.list(filters={"label": [f"{PROJECT_LABEL}={self.project}",
                                                               f"com.docker.compose.service={service}"]})
        return sorted(c.name for c in found)

    def ip(self, container: str) -> str:
        networks = self.client.containers.get(container).attrs["NetworkSettings"]["Networks"]
        return next(iter(networks.values()))["IPAddress"]
