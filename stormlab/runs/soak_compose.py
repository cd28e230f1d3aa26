"""The fault soak on the compose stack (`stormlab soak --backend docker`).

The network and freeze faults are fault shells in the target containers, and the holders killed
are those shells (SIGKILL inside the container): the fault they held is an orphan until a listing
reverts it: `chaos list` (run every 25 leases, as a person would; those it reverts are counted),
`chaos halt`, or the chaos command's own look at its targets before it applies a fault there. A
tenth of the kill faults are kept (compose restarts the service), the rest become freezes. At the
end, after one last `list`: no fault file left in any container, each container's iptables rules
and netem qdiscs what they were, every container running and its service not stopped, the
metadata service restored, the host's own rules (Docker's aside) unchanged, and every fault shell
on traffic that ended dropped something, unless its container (or the metadata service's) was
frozen or restarting, or another lease cut it, while it held.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chaos import catalog, client, docker_cli
from chaos import cli as chaos_cli
from chaos import docker_backend as db
from chaos import fault_shell as fs
from chaos.catalog import ChaosError
from chaos.control import no_effect
from stormcore import roster
from stormcore.errors import LabError, UsageError
from stormlab.engine.compose import compose_token
from stormlab.runs.soak_leases import CUTS, NETWORK, RESTART_S, STILL, host_rules, metadata_restored, random_fault, unexplained

ENGINE_HOLDERS = ("metadata", "linkproxy", "supervisor")  # the faults an engine holds (in shells) or the metadata service does


def container_rules(runner: Any, container: str) -> list[str]:
    """What a fault may leave in a container: its iptables rules (each with its table) and any
    netem qdisc. Docker's own rules (its DNS, redone with new ports when a container restarts)
    aside; a table or chain a fault's rule brought into use stays listed, empty, after the rule
    is gone: that is not a rule left behind."""
    out = runner.exec(fs.Exec(container, ("sh", "-c", "iptables-save 2>&1; tc qdisc show 2>&1"), detach=False))
    table, found = "", []
    for line in out.splitlines():
        if line.startswith("*"):
            table = line[1:]
        elif (line.startswith("-A ") and not line.startswith("-A DOCKER")) or "netem" in line:  # Docker's DNS rules aside
            found.append(f"{table}: {line}" if line.startswith("-A ") else line)
    return sorted(found)


def service_stopped(runner: Any, container: str) -> bool:
    out = runner.exec(fs.Exec(container, ("sh", "-c", f'{fs.SERVICE_PID}; cut -d" " -f3 "/proc/$p/stat"'), detach=False))
    return out.strip() in ("T", "t")


def docker_host_rules() -> dict[str, list[str]]:
    """The host's rules without Docker's own (which change as containers restart) and without
    counters (which Docker's traffic moves)."""
    counters = re.compile(r"\[\d+:\d+\]|counter packets \d+ bytes \d+")
    return {
        k: [counters.sub("", line) for line in v.splitlines() if "docker" not in line.lower() and not line.lstrip().startswith(":")]
        for k, v in host_rules().items()
    }


def changed(before: list[str], after: list[str]) -> list[str]:
    """The rules that came or went (as a multiset: Docker may reorder its neighbours), marked + or -,
    at most 6."""
    came, went = Counter(after) - Counter(before), Counter(before) - Counter(after)
    return ([f"+ {line}" for line in came.elements()] + [f"- {line}" for line in went.elements()])[:6]


@dataclass
class ComposeSoak:
    """A soak of the compose stack: its containers and what they held before, what was asked."""

    runner: Any
    racks: int
    containers: list[str]
    token: str
    state: dict[str, Any]
    rules_before: dict[str, list[str]] = field(default_factory=dict)
    host_before: dict[str, list[str]] = field(default_factory=dict)
    meta_before: dict[str, Any] = field(default_factory=dict)
    applied_in: list[str] = field(default_factory=list)  # the containers the last lease's fault shells run in
    windows: list[tuple[str, list[str], float, float]] = field(default_factory=list)  # each lease: fault, containers, from, to
    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("requested", "applied", "refused", "services_killed", "holders_killed", "orphans_reverted_by_list"), 0
        )
    )

    @classmethod
    def of_running_stack(cls) -> ComposeSoak:
        runner = docker_cli.runner_for(None)
        racks = len(runner.racks())
        if not racks:
            raise LabError(f"no rack container of the compose project {docker_cli.project()!r} is running: `make up` first")
        os.environ.setdefault("STORMLAB_METADATA_URL", f"http://127.0.0.1:{os.environ.get('METADATA_PORT', '8700')}")
        stack = cls(runner, racks, docker_cli.lab_containers(runner), compose_token(), chaos_cli.lab_state(True))
        stack.rules_before = {c: container_rules(runner, c) for c in stack.containers}
        stack.host_before = docker_host_rules()
        stack.meta_before = client.call("GET", f"{stack.meta_url}/status", stack.token)
        return stack

    @property
    def meta_url(self) -> str:
        return str(self.state["components"]["metadata"]["url"])

    def draw(self, rng: random.Random) -> tuple[str, dict[str, Any]]:
        """A random lease the stack holds (the fixes and the deploy are the local lab's soak); most kills become freezes."""
        targets = [*(n for n in roster.NAMED_TARGETS if n in roster.ENGINE_SERVICES), *(f"rack-{r}" for r in range(self.racks))]
        name, args = random_fault(rng, self.racks, targets)
        while catalog.FAULTS[name].holder not in ENGINE_HOLDERS or name == "deploy":
            name, args = random_fault(rng, self.racks, targets)
        return ("freeze" if name == "kill" and rng.random() > 0.1 else name), args  # keep the stack mostly up

    def lease(self, name: str, args: dict[str, Any]) -> None:
        """Ask for one lease; a fault held in the containers leaves its containers in ``applied_in``."""
        self.counts["requested"] += 1
        self.applied_in = []
        try:
            if catalog.FAULTS[name].holder == "metadata":
                client.apply(self.state, name, args, self.token)
            else:
                body = catalog.request(name, args, self.racks).body
                containers = sorted({c.container for c in db.build(body, self.runner)})
                started = time.time()
                with contextlib.redirect_stdout(io.StringIO()):
                    docker_cli.apply(body, self.runner)
                ends = started + (RESTART_S if name == "kill" else float(body["duration_s"]))
                self.windows.append((name, containers, started, ends))
                if name != "kill":  # a killed service holds no shell: compose restarts it
                    self.applied_in = containers
            self.counts["applied"] += 1
            self.counts["services_killed"] += name == "kill"
        except (ChaosError, UsageError, LabError):  # refused (a second netem fault, a target restarting): nothing applied
            self.counts["refused"] += 1

    def kill_a_shell(self, rng: random.Random) -> None:
        """SIGKILL a shell of the lease just applied while it holds (listing every container takes
        longer than the shortest leases last)."""
        live = [h for h in db.held(self.runner, self.applied_in) if not h.orphan]
        if live:
            victim = rng.choice(live)
            self.runner.exec(fs.Exec(victim.container, ("kill", "-KILL", str(victim.pid)), detach=False))
            self.counts["holders_killed"] += 1

    def list_orphans(self) -> None:
        """`chaos list`, as a person would run it: orphans are reverted on the way."""
        self.counts["orphans_reverted_by_list"] += sum(h.orphan for h in db.held(self.runner, self.containers))

    def read_back(self, limit_s: float = 90.0) -> dict[str, Any]:
        """Once a killed service is back (compose's restart policy) and answers: what is left."""
        deadline = time.monotonic() + limit_s
        while True:
            try:
                meta = client.call("GET", f"{self.meta_url}/status", self.token)
                self.list_orphans()
                left = db.held(self.runner, self.containers)
                rules = {c: container_rules(self.runner, c) for c in self.containers}
                stopped_now = [c for c in self.containers if service_stopped(self.runner, c)]
                return {"meta": meta, "left": left, "rules": rules, "stopped": stopped_now}
            except Exception as exc:  # a container restarting: the Docker API or the service refuses for a moment
                if time.monotonic() > deadline:
                    raise LabError(f"the stack did not come back within {limit_s:.0f} s of the soak's end: {exc}") from None
                time.sleep(1.0)

    def effects(self) -> dict[str, Any]:
        """The fault shells on traffic that ended: those that dropped nothing, and those of them
        without a reason (their container, or the metadata service's, frozen or restarting, or
        another lease cutting it): findings."""
        listed = [h for h in db.listed(self.runner, self.containers) if h.state == "ended" and h.fault in NETWORK and h.effect is not None]
        ended = [h for h in listed if window_of(h, self.windows) is not None]  # this soak's own (a shell ends a record kept ten minutes)
        quiet = [h for h in ended if no_effect(h.effect)]
        meta = next(iter(self.runner.containers("metadata")), "metadata")
        found = quiet_unexplained(quiet, self.windows, meta)
        return {
            "network_shells_ended": len(ended),
            "network_shells_without_effect": len(quiet),
            "without_effect_unexplained": [f"{','.join(t)} from {a:.1f} to {b:.1f}" for t, a, b in found][:10],
        }

    def verdict(self) -> dict[str, Any]:
        after = self.read_back()
        running_now, host_now = set(docker_cli.lab_containers(self.runner)), docker_host_rules()
        result = self.effects() | {
            "fault_files_left": len(after["left"]),
            "containers_with_rules_changed": {
                c: diff for c in self.containers if (diff := changed(self.rules_before[c], after["rules"][c]))
            },
            "containers_not_running": sorted(c for c in self.containers if c not in running_now),
            "services_stopped": sorted(after["stopped"]),
            "metadata_restored": metadata_restored(after["meta"], self.meta_before),
            "host_rules_changed": {k: diff for k, v in host_now.items() if (diff := changed(self.host_before.get(k, []), v))},
        }
        nothing_left = not (result["fault_files_left"] or result["containers_with_rules_changed"] or result["host_rules_changed"])
        everything_up = not (result["containers_not_running"] or result["services_stopped"])
        result["ok"] = nothing_left and everything_up and result["metadata_restored"] and not result["without_effect_unexplained"]
        return result


LeaseWindow = tuple[str, list[str], float, float]  # a fault, its containers, from when to when (the host's clock)
SHELL_CLOCK_S = 1.0  # a fault shell's ended record says its time in whole seconds (date +%s)


def window_of(shell: fs.Held, windows: list[LeaseWindow]) -> float | None:
    """When this soak asked for the lease an ended shell held (the latest of its fault on its container
    that began before it ended); None: not one of this soak's (an earlier command's, whose ended record
    is still kept)."""
    starts = [a for fault, containers, a, _ in windows if fault == shell.fault and shell.container in containers]
    return max((a for a in starts if a <= shell.at + SHELL_CLOCK_S), default=None)


def quiet_unexplained(quiet: list[fs.Held], windows: list[LeaseWindow], meta: str) -> list[tuple[list[str], float, float]]:
    """The shells that did nothing without a reason: their container, or the metadata service's,
    held still (frozen, restarting) while they held, or another lease cutting it."""
    still = [(c, a, b) for fault, containers, a, b in windows if fault in STILL for c in containers]
    found = []
    for shell in quiet:
        start = window_of(shell, windows)
        if start is None:
            continue
        cuts = [(c, a, b) for fault, containers, a, b in windows if fault in CUTS and a != start for c in containers]
        found += unexplained([([shell.container], start, max(start, shell.at))], still + cuts, peer=meta)
    return found


def docker_soak(leases: int, seed: int, holder_kills: float, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """``leases`` random leases on the compose stack, fault shells killed at random, then the proof."""
    stack, rng = ComposeSoak.of_running_stack(), random.Random(seed)
    for i in range(leases):
        stack.lease(*stack.draw(rng))
        if rng.random() < holder_kills:
            stack.kill_a_shell(rng)
        if (i + 1) % 25 == 0:
            stack.list_orphans()
            c = stack.counts
            echo(
                f"soak: {i + 1}/{leases} leases ({c['applied']} applied, {c['refused']} refused, {c['holders_killed']} fault shells killed)"
            )
        time.sleep(rng.uniform(0.0, 0.15))
    time.sleep(5.0)  # every lease is over (at most 2 s), a killed service restarting
    return stack.counts | stack.verdict()
