"""`stormlab chaos --backend docker …`: network and process faults on the compose project's
containers (metadata faults still go to the metadata service's API, see chaos/cli.py)."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

from chaos import docker_backend as db
from chaos import fault_shell as fs
from chaos.catalog import ChaosError
from chaos.control import no_effect
from chaos.fault_lease import describe_effect
from stormcore.auth import grafana_auth
from stormcore.errors import LabError


class NotApplied(LabError):
    """The fault's shell started but its rules did not go in (exit code 1)."""


def project() -> str:
    return os.environ.get("STORMLAB_COMPOSE_PROJECT", db.DEFAULT_PROJECT)


def runner_for(runner: db.Runner | None) -> db.Runner:
    if runner is not None:
        return runner
    try:
        return db.SdkRunner(project())
    except ImportError:
        raise ChaosError("the docker backend needs the Docker SDK: pip install 'stormlab[docker]'") from None
    except Exception as exc:  # the SDK raises DockerException subclasses when no engine answers
        raise ChaosError(f"no Docker engine answered: {exc}") from None


def lab_containers(runner: db.Runner) -> list[str]:
    """Every container that can hold a fault: the services and the racks."""
    return [c for service in db.SERVICES for c in runner.containers(service)] + [name for _, name in sorted(runner.racks().items())]


def apply(body: dict, runner: db.Runner, dry_run: bool = False, wait: bool = False) -> int:
    """Build the commands for a checked request, run them, confirm."""
    try:
        commands = db.build(body, runner)
        if dry_run:
            for c in commands:
                print(f"docker exec {'-d ' if c.detach else ''}--user root {c.container} {shlex.join(c.argv)}")
            return 0
        db.check_ours(runner, (c.container for c in commands), project())
    except db.NotOurs as exc:
        raise ChaosError(str(exc)) from None
    targets = sorted({c.container for c in commands})
    fault, duration = body["fault"], body["duration_s"]
    before = {(h.container, h.pid) for h in db.held(runner, targets)} if fault != "kill" else set()
    db.run(runner, commands, project())
    if fault != "kill":
        confirm(runner, targets, fault, before)
    annotate(fault, targets, duration)
    print(f"{fault} on {', '.join(targets)} for {duration:g}s: it reverts by itself")
    if wait:
        time.sleep(duration)
    return 0


def confirm(runner: db.Runner, targets: list[str], fault: str, before: set[tuple[str, int]], within_s: float = 3.0) -> None:
    """A fault shell writes its file only once its rules are in: wait until every target has a
    new one for this fault (a fault already held there does not count: a second netem fault on a
    rack fails to apply, and must be reported so)."""
    deadline = time.monotonic() + within_s
    while True:
        holding = {
            h.container for h in db.held(runner, targets) if h.fault == fault and not h.orphan and (h.container, h.pid) not in before
        }
        missing = [t for t in targets if t not in holding]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise NotApplied(f"{fault} did not apply in {', '.join(missing)} (iptables, tc, the kernel's netem or NET_ADMIN missing?)")
        time.sleep(0.1)


@dataclass
class Listing:
    """What an engine holds, for `chaos list`: its faults in force (lines), those that ended lately
    having done nothing (lines), and every fault shell found (records, for ``--json``)."""

    active: list[str]
    quiet: list[str]
    shells: list[dict[str, Any]]


def listing(runner: db.Runner, failed: list[str]) -> Listing:
    """The fault shells in the lab's containers (each held one with its time left and what it did
    so far, each orphan reverted by this listing, each that ended lately having done nothing); a
    container that does not answer goes in ``failed`` and the others are listed."""
    found = db.listed(runner, lab_containers(runner), failed)
    return listing_of(found, time.time())


def listing_of(found: list[fs.Held], now: float) -> Listing:
    return Listing(active_rows(found, now), quiet_rows(found, now), [shell_record(h) for h in found])


def shell_record(h: fs.Held) -> dict[str, Any]:
    return {
        "container": h.container,
        "pid": h.pid,
        "fault": h.fault,
        "state": h.state,
        "at": h.at,
        "effect": h.effect,
        "no_effect": no_effect(h.effect),
    }


def active_rows(found: list[fs.Held], now: float) -> list[str]:
    """The shells holding a fault (with what they did so far) and the orphans reverted just now."""
    rows = []
    for h in found:
        if h.state == "held":
            so_far = "" if h.effect is None else f" ({describe_effect(h.effect)} so far)"
            rows.append(f"{h.container} (pid {h.pid}) {h.fault}: {max(0.0, h.at - now):.0f}s left{so_far}")
        elif h.state == "orphan":
            did = "" if h.effect is None else f"; {describe_effect(h.effect)}"
            rows.append(f"{h.container} (pid {h.pid}) {h.fault}: its holder was gone: reverted now{did}")
    return rows


def quiet_rows(found: list[fs.Held], now: float) -> list[str]:
    """The shells that ended lately having dropped nothing: a fault that did not take effect."""
    return [
        f"{h.container} (pid {h.pid}) {h.fault} ended {max(0.0, now - h.at):.0f}s ago: {describe_effect(h.effect)}"
        for h in found
        if h.state == "ended" and no_effect(h.effect)
    ]


def halt(runner: db.Runner) -> tuple[int, list[str]]:
    """Every fault shell in the lab's containers ended now; the containers that did not answer."""
    return db.halt(runner, lab_containers(runner))


def annotate(fault: str, targets: list[str], duration_s: float) -> None:
    """A Grafana region annotation over the fault, when Grafana is configured (best effort)."""
    url = os.environ.get("STORMLAB_GRAFANA_URL", "").rstrip("/")
    auth = grafana_auth()
    if not url or not auth:
        return
    now_ms = int(time.time() * 1000)
    body = {
        "time": now_ms,
        "timeEnd": now_ms + int(duration_s * 1000),
        "tags": ["stormlab", "chaos", fault],
        "text": f"{fault} on {', '.join(targets)} for {duration_s:g}s",
    }
    req = urllib.request.Request(
        f"{url}/api/annotations",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": auth},
    )
    try:
        with urllib.request.urlopen(req, timeout=2):
            pass
    except OSError as exc:
        print(f"stormlab: grafana annotation not written ({exc})", file=sys.stderr)
