"""The docker backend: the same faults on the compose project's (or a swarm stack's) containers.

Each fault is built, by a pure function, as the exact fault shells (``chaos/fault_shell.py``) to
run inside the target containers; the revert goes in with the fault, armed in the target's own
namespaces, so killing the chaos command (or its container) does not leave the fault behind.
On a swarm of several nodes, the chaos tool asks the manager where each task runs and acts
through that node's engine (``SdkRunner``).

Only containers carrying the lab's compose project label are touched; anything else is refused
before a command runs. Listing and halting go container by container: one that fails to answer
is reported and the others are still listed or halted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from chaos.fault_shell import HALT, LIST, Exec, Held, ask_holder, freeze, kill, latency, loss, parse_answer, parse_listing, partition
from stormcore import roster
from stormcore.documents import is_decimal

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
    if is_decimal(number) and int(number) >= 1:
        return int(number) - 1
    return None


def project_of(labels: dict[str, str]) -> str | None:
    """The compose project, or the swarm stack, a container belongs to."""
    return labels.get(PROJECT_LABEL) or labels.get(STACK_LABEL)


SERVICES = roster.NAMED_TARGETS  # compose services named as their targets (the racks: one scaled service)
CELLS = ("metadata", "metadata-cell")  # every cell's metadata service: cell 0's, then the others' (none without cells)
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
        meta_ips = [runner.ip(c) for service in CELLS for c in runner.containers(service)]
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
            halted += int(said) if is_decimal(said) else 0
        except Exception as exc:  # one container's failure must not leave the others' faults held
            failed.append(f"{container}: {exc}")
    return halted, failed


def asked(runner: Runner, services: Iterable[str], method: str, failed: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """Each container of each fault-holding service asked, inside it, ``method`` /faults (GET: its
    leases; DELETE: every lease ended, reverted), all at once: (container, its service's answer)
    each. A container that cannot be asked, or whose service does not answer (frozen: the asking
    command gives up after 10 s), is named in ``failed``; the others are asked meanwhile."""
    containers = [container for service in services for container in runner.containers(service)]

    def ask(container: str) -> tuple[str, dict[str, Any] | str]:
        try:
            return container, parse_answer(container, runner.exec(Exec(container, ask_holder(method), detach=False)))
        except LookupError as exc:
            return container, str(exc)
        except Exception as exc:  # the engine's own errors (gone, restarting, API down): one container's
            return container, f"{container}: {exc}"

    at_once = max(1, min(len(containers), 8)) if getattr(runner, "exec_at_once", True) else 1
    with ThreadPoolExecutor(max_workers=at_once) as pool:
        said = list(pool.map(ask, containers))
    failed += [answer for _, answer in said if isinstance(answer, str)]
    return [(container, answer) for container, answer in said if isinstance(answer, dict)]


ENGINE_LABEL = "stormlab.engine"  # a swarm node's label: where its Docker engine answers (tcp://host:2375)


class EngineUnknown(NotOurs):
    """A target's task runs on a swarm node whose engine this tool cannot reach (exit 2)."""


def engine_of(node: dict[str, Any]) -> str | None:
    """Where a swarm node's engine answers, from its ``stormlab.engine`` label (docker/swarm-engines.sh
    sets it on the engines it makes; on a cluster of your own: ``docker node update --label-add
    stormlab.engine=tcp://HOST:2375 NODE``)."""
    return ((node.get("Spec") or {}).get("Labels") or {}).get(ENGINE_LABEL) or None


def no_engine(node: dict[str, Any]) -> str:
    name = (node.get("Description") or {}).get("Hostname") or node.get("ID", "?")
    return (
        f"a task of the lab runs on swarm node {name}, whose engine this tool cannot reach: label the node with its "
        f"engine's address (docker node update --label-add {ENGINE_LABEL}=tcp://HOST:2375 {name}) or run chaos there"
    )


def running_on(tasks: Iterable[dict[str, Any]]) -> list[tuple[str, str]]:
    """The (node, container) of each task that runs now: the ones a fault can go into."""
    placed = []
    for task in tasks:
        status = task.get("Status") or {}
        container = (status.get("ContainerStatus") or {}).get("ContainerID")
        if status.get("State") == "running" and task.get("DesiredState") == "running" and container and task.get("NodeID"):
            placed.append((task["NodeID"], container))
    return placed


def address(networks: dict[str, dict[str, Any]], project: str) -> str:
    """A container's address on the lab's network (``<project>_default``), else on its first."""
    chosen = networks.get(f"{project}_default") or next(iter(networks.values()))
    return chosen["IPAddress"]


class SdkRunner:
    """The Docker SDK behind the Runner interface (imported only when the docker backend is used).

    On a compose project, and on a swarm node that is not a manager, the lab's containers are the
    ones this engine runs. On a swarm manager they are the stack's running tasks on every node:
    each container is asked, and its faults run, through the engine of the node that runs it
    (named by the node's ``stormlab.engine`` label; the manager's own through this client)."""

    def __init__(
        self,
        project: str = DEFAULT_PROJECT,
        client_factory: Callable | None = None,
        engine_factory: Callable[[str], Any] | None = None,
    ) -> None:
        if docker is None and client_factory is None:
            raise ImportError("the docker backend needs the Docker SDK: pip install 'stormlab[docker]'")
        self.project = project
        self.client = client_factory() if client_factory else docker.from_env()  # type: ignore[attr-defined]
        self._connect = engine_factory or (lambda url: docker.DockerClient(base_url=url))  # type: ignore[attr-defined]
        self._engines: dict[str, Any] = {}  # swarm node id -> the client of its engine
        self._where: dict[str, Any] = {}  # container name -> the client of the engine that runs it
        self._node: dict[str, Any] | None = None  # this engine's swarm state, asked once

    def _engine_of(self, container: str) -> Any:
        return self._where.get(container, self.client)

    def labels(self, container: str) -> dict[str, str]:
        try:
            return self._engine_of(container).containers.get(container).labels or {}
        except NOT_FOUND:  # not a container at all
            return {}

    def exec(self, command: Exec) -> str:
        # As root: the services run unprivileged, the fault needs the container's NET_ADMIN.
        found = self._engine_of(command.container).containers.get(command.container)
        result = found.exec_run(list(command.argv), detach=command.detach, user="root")
        return "" if command.detach else result.output.decode(errors="replace")

    def _ours(self, service: str | None = None) -> list:
        """The project's running containers (of one service): compose's, else a swarm stack's."""
        compose = [f"{PROJECT_LABEL}={self.project}"] + ([f"com.docker.compose.service={service}"] if service else [])
        found = self.client.containers.list(filters={"label": compose})
        if not found and self._manager():
            found = self._tasks(service)
        elif not found:
            stack = [f"{STACK_LABEL}={self.project}"] + ([f"com.docker.swarm.service.name={self.project}_{service}"] if service else [])
            found = self.client.containers.list(filters={"label": stack})
        return found

    def _swarm(self) -> dict[str, Any]:
        if self._node is None:
            self._node = self.client.info().get("Swarm") or {}
        return self._node

    def _manager(self) -> bool:
        return bool(self._swarm().get("ControlAvailable"))

    def _tasks(self, service: str | None) -> list:
        """The stack's running tasks' containers, each asked through its node's engine."""
        found = []
        for s in self.client.services.list(filters={"label": f"{STACK_LABEL}={self.project}"}):
            if service is not None and s.name != f"{self.project}_{service}":
                continue
            for node, container in running_on(s.tasks(filters={"desired-state": "running"})):
                engine = self._engine(node)
                try:
                    c = engine.containers.get(container)
                except NOT_FOUND:  # ended between the listing and the asking
                    continue
                self._where[c.name] = engine
                found.append(c)
        return found

    def _engine(self, node: str) -> Any:
        if node not in self._engines:
            if node == self._swarm().get("NodeID"):
                self._engines[node] = self.client
            else:
                attrs = self.client.nodes.get(node).attrs
                url = engine_of(attrs)
                if url is None:
                    raise EngineUnknown(no_engine(attrs))
                self._engines[node] = self._connect(url)
        return self._engines[node]

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
        return address(self._engine_of(container).containers.get(container).attrs["NetworkSettings"]["Networks"], self.project)
