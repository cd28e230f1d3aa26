"""The docker backend: the same faults on the compose project's (or a swarm stack's) containers.

Each fault is built, by a pure function, as the exact fault shells (``chaos/fault_shell.py``) to
run inside the target containers; the revert goes in with the fault, armed in the target's own
namespaces, so killing the chaos command (or its container) does not leave the fault behind.

Only containers carrying the lab's compose project label are touched; anything else is refused
before a command runs. Listing and halting go container by container: one that fails to answer
is reported and the others are still listed or halted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from chaos.fault_shell import HALT, LIST, Exec, Held, freeze, kill, latency, loss, parse_listing, partition
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


def listed(runner: Runner, containers: Iterable[str], failed: list[str] | None = None) -> list[Held]:
    """Every fault a listing finds in the containers: held, orphaned (reverted on the way) and
    recently ended, each with its count. A container that cannot be asked is named in ``failed``
    (when given; else the error goes up) and the others are still listed."""
    rows = []
    for container in containers:
        try:
            rows += parse_listing(container, runner.exec(Exec(container, LIST, detach=False)))
        except Exception as exc:  # the engine's own errors (gone, restarting, API down): one container's
            if failed is None:
                raise
            failed.append(f"{container}: {exc}")
    return rows


def held(runner: Runner, containers: Iterable[str]) -> list[Held]:
    """Faults held now (orphans found on the way are reverted and reported as such)."""
    return [h for h in listed(runner, containers) if h.state != "ended"]


def halt(runner: Runner, containers: Iterable[str]) -> tuple[int, list[str]]:
    """Ends every fault shell in the containers now: how many, and the containers that could not
    be asked (each named with its error; the others are halted all the same)."""
    halted, failed = 0, []
    for container in containers:
        try:
            said = runner.exec(Exec(container, HALT, detach=False)).strip()
            halted += int(said) if said.isdigit() else 0
        except Exception as exc:  # one container's failure must not leave the others' faults held
            failed.append(f"{container}: {exc}")
    return halted, failed


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
