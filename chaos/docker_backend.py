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
# "fault ends-at-epoch-seconds", the second the command that counts what the fault has done so
# far (packets its rules dropped, or its netem qdisc held back; ":" where nothing is counted),
# then its undo commands (newest first). When it ends it writes ``ENDED_FILE + its pid``: "fault
# ended-at count", kept ten minutes for `chaos list`, which reports a fault that did nothing.
# /dev/shm is a tmpfs that a container restart empties, so a file never outlives the container's
# processes.
FAULT_FILE = "/dev/shm/stormlab-fault."
ENDED_KEPT_S = 600


def ended_prefix(prefix: str) -> str:
    return prefix.rsplit("fault.", 1)[0] + "ended."


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


_COUNT = 'n="$(sed -n 2p "$f" | sh 2>/dev/null)"; '
_REAP = 'else tail -n +3 "$f" | sh; rm -f "$f"; '


def _ended(prefix: str) -> str:
    """The ended records: listed while young, removed once ``ENDED_KEPT_S`` old (or malformed)."""
    return (
        f'for f in {ended_prefix(prefix)}*; do [ -f "$f" ] && [ -O "$f" ] || continue; p="${{f##*.}}"; set -- $(cat "$f"); '
        'case "$p:${2:-}" in *[!0-9:]*|:*|*:) rm -f "$f"; continue;; esac; '
        f'if [ $(( $(date +%s) - $2 )) -gt {ENDED_KEPT_S} ]; then rm -f "$f"; else echo "$p $1 $2 ended ${{3:--}}"; fi; done; '
    )


def list_command(prefix: str = FAULT_FILE) -> tuple[str, ...]:
    """Faults in a container, one line each: "pid fault time state count". State: held (time is
    when it ends), orphan (its holder was gone and it has just been reverted), ended (time is when
    it ended); count: what it did (packets), or "-" where not counted."""
    return (
        "sh",
        "-c",
        _each(prefix)
        + _COUNT
        + 'echo "$p $first held ${n:--}"; '
        + _REAP
        + 'echo "$p $first orphan ${n:--}"; fi; done; '
        + _ended(prefix)
        + "true",
    )


def halt_command(prefix: str = FAULT_FILE) -> tuple[str, ...]:
    """Ends them now: TERM to each live holding shell runs its revert; orphans are reverted here."""
    return ("sh", "-c", "n=0; " + _each(prefix) + 'kill -TERM "$p" && n=$((n+1)); ' + _REAP + "n=$((n+1)); fi; done; echo $n")


LIST, HALT = list_command(), halt_command()

Step = tuple[str, "str | None"]  # a command, and what undoes it (None: nothing to undo)
PID = "{pid}"  # in a count command: the holding shell's pid (its rules carry it as their comment)


def _dq(command: str) -> str:
    """``command`` inside double quotes: its ``$p`` expands when written, nothing else does."""
    return '"' + command.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`") + '"'


def _with_pid(template: str) -> str:
    """A shell word that is ``template`` with its pid placeholder as the writing shell's pid."""
    head, _, tail = template.partition(PID)
    return shlex.quote(head) + ('"$$"' + shlex.quote(tail) if _ else "")


def _armed(fault: str, steps: list[Step], duration_s: float, prefix: str = FAULT_FILE, count: str = ":") -> tuple[str, ...]:
    """One shell that applies the steps, writes its fault file, waits out the lease, and reverts;
    TERM or INT (`chaos halt`) reverts at once. A step that fails undoes the steps before it and
    the shell exits 1 without a file: nothing applied, nothing reverted that was not its own.
    ``count`` prints what the fault has done so far (its pid placeholder: this shell's pid); it
    is read once more as the fault ends, into the ended record."""
    parts: list[str] = ["f=" + prefix + "$$", "e=" + ended_prefix(prefix) + "$$"]
    undone: list[str] = []
    for apply, undo in steps:
        parts.append(f"if ! {apply}; then {'; '.join([*undone, 'exit 1'])}; fi")
        if undo is not None:
            undone.insert(0, undo)
    ends = f"$(( $(date +%s) + {max(1, round(duration_s))} ))"
    record_end = f'n="$(count 2>/dev/null)"; printf \'%s\\n\' "{fault} $(date +%s) ${{n:--}}" > $e'
    parts += [
        f"count() {{ {count.replace(PID, '$$')}; }}",
        f"undo() {{ {'; '.join([record_end, *undone, 'rm -f $f'])}; }}",
        "trap 'kill $! 2>/dev/null; undo; exit 0' TERM INT",
        f"printf '%s\\n' \"{fault} {ends}\" {_with_pid(count)} {' '.join(_dq(u) for u in undone)} > $f",
        f"sleep {duration_s:g} & wait $!",
        "undo",
    ]
    return ("sh", "-c", "; ".join(parts))


def _drop_rules(peer_ips: list[str], direction: str) -> list[list[str]]:
    rules = []
    for ip in peer_ips:
        if direction in ("both", "out"):
            rules.append(["OUTPUT", "-d", ip])
        if direction in ("both", "in"):
            rules.append(["INPUT", "-s", ip])
    return rules


# Each rule carries its shell's pid as a comment, so the shell's own rules are counted and removed,
# never another lease's that drops the same address.
TAGGED = "-m comment --comment stormlab-$$ -j DROP"
COUNT_DROPPED = 'iptables -w -L -v -x -n | awk -v c="/* stormlab-' + PID + " */\" 'index($0, c) {s += $1} END {print s + 0}'"


def partition(container: str, peer_ips: list[str], duration_s: float, direction: str = "both", fault: str = "partition") -> list[Exec]:
    """Cut ``container`` off from ``peer_ips``: both ways, or only ``out`` / ``in``; counts the
    packets its rules drop."""
    if direction not in ("both", "out", "in"):
        raise ValueError("direction must be both, out or in")
    if not peer_ips:
        raise ValueError("no peers to cut off")
    steps: list[Step] = [
        (f"{shlex.join(['iptables', '-w', '-I', *r])} {TAGGED}", f"{shlex.join(['iptables', '-w', '-D', *r])} {TAGGED}")
        for r in _drop_rules(peer_ips, direction)
    ]
    return [Exec(container, _armed(fault, steps, duration_s, count=COUNT_DROPPED))]


def _netem(container: str, fault: str, spec: list[str], duration_s: float, device: str, count: str) -> list[Exec]:
    add = shlex.join(["tc", "qdisc", "add", "dev", device, "root", "netem", *spec])
    undo = shlex.join(["tc", "qdisc", "del", "dev", device, "root", "netem"])
    return [Exec(container, _armed(fault, [(add, undo)], duration_s, count=count))]


def _qdisc_count(device: str, field: str) -> str:
    """The netem qdisc's packets (``$4`` of its "Sent … bytes N pkt (dropped D, …)" line) or drops (``$7``)."""
    return f"tc -s qdisc show dev {shlex.quote(device)} | awk '/netem/ {{on = 1}} on && /Sent/ {{print {field} + 0; exit}}'"


def latency(container: str, delay_ms: float, jitter_ms: float, duration_s: float, device: str = "eth0") -> list[Exec]:
    """Hold back every packet ``container`` sends; counts the packets it held back."""
    spec = ["delay", f"{delay_ms:g}ms"] + ([f"{jitter_ms:g}ms"] if jitter_ms else [])
    return _netem(container, "latency", spec, duration_s, device, _qdisc_count(device, "$4"))


def loss(container: str, probability: float, duration_s: float, device: str = "eth0") -> list[Exec]:
    """Drop a share of the packets ``container`` sends; counts the packets it dropped."""
    return _netem(container, "loss", ["loss", f"{100 * probability:g}%"], duration_s, device, _qdisc_count(device, "$7"))


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


COUNTED = {"latency": "delayed_packets"}  # what each fault's count is; the others drop packets
NOT_COUNTED = ("freeze",)


@dataclass(frozen=True)
class Held:
    container: str
    pid: int  # of the shell holding it
    fault: str
    at: float  # when it ends (held, orphan) or ended (ended)
    state: str  # held; orphan: its holder was gone, reverted just now by the listing; ended: by its lease or a halt
    acted: int | None = None  # packets it dropped or held back (None: not counted)

    @property
    def orphan(self) -> bool:
        return self.state == "orphan"

    @property
    def ends_at(self) -> float:
        return self.at

    @property
    def effect(self) -> dict[str, int] | None:
        if self.fault in NOT_COUNTED or self.acted is None:
            return None
        return {COUNTED.get(self.fault, "dropped_packets"): self.acted}


def listed(runner: Runner, containers: Iterable[str]) -> list[Held]:
    """Every fault a listing finds in the containers: held, orphaned (reverted on the way) and
    recently ended, each with its count."""
    rows = []
    for container in containers:
        for line in runner.exec(Exec(container, LIST, detach=False)).splitlines():
            parts = line.split()
            if len(parts) == 5 and parts[0].isdigit() and parts[3] in ("held", "orphan", "ended"):
                pid, fault, at, state, count = parts
                try:
                    rows.append(Held(container, int(pid), fault, float(at), state, int(count) if count.isdigit() else None))
                except ValueError:  # a line that is not a fault's: skipped, the others still count
                    continue
    return rows


def held(runner: Runner, containers: Iterable[str]) -> list[Held]:
    """Faults held now (orphans found on the way are reverted and reported as such)."""
    return [h for h in listed(runner, containers) if h.state != "ended"]


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
