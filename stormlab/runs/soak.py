"""The fault soak: many random fault leases, with their holders SIGKILLed at random points, and
then proof that every one of them is gone.

    stormlab soak --leases 1000 [--seed 1] [--holder-kills 0.01]     (against the running lab)
    stormlab soak --backend docker --leases 1000                       (against the compose stack)

Each lease is one of the catalog's faults with random arguments and a 0.2-2 s duration, asked
through the same client `stormlab chaos` uses; now and then (``--holder-kills``, a chance per
lease) the link proxy or the metadata service is SIGKILLed by its pid and restarted by the
supervisor, with whatever it held. At the end, once the longest lease is over, it checks:
every holder's book is empty; every component runs and none is stopped (SIGSTOP); the metadata
service is not paused and has its cores, memberships and tables back; the host's iptables and
nftables rules are what they were; and every lease that was applied ended, by its lease or by
its holder's restart (the fault event log). Prints the figures as JSON; exit 1 if any check fails.

On compose (``--backend docker``; STORMLAB_COMPOSE_PROJECT, and STORMLAB_METADATA_URL and
STORMLAB_TOKEN when not the defaults) the network and pause faults are fault shells in the
target containers, and the holders killed are those shells (SIGKILL inside the container): the
fault they held is an orphan until a listing reverts it: `chaos list` (run every 25 leases, as a
person would; those it reverts are counted), `chaos halt`, or the chaos command's own look at
its targets before it applies a fault there. A tenth of the kill faults are kept (compose
restarts the service), the rest become pauses. At the end, after one last `list`: no fault file
left in any container, each container's iptables rules and netem qdiscs what they were, every
container running and its service not stopped, the metadata service restored, the host's own
rules (Docker's aside) unchanged.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos import catalog, client, docker_cli
from chaos import cli as chaos_cli
from chaos import docker_backend as db
from chaos.catalog import ChaosError
from stormcore import roster
from stormcore.auth import ensure_token
from stormcore.errors import LabError, UsageError
from stormcore.labstate import backend, running, state_dir
from stormlab.engine.compose import compose_token

# holders the supervisor restarts and that hold faults for the whole lab (the services hold only their fixes; killing the
# supervisor would end the lab)
KILLABLE = tuple(p.name for p in roster.ROSTER if p.holds_faults and p.kind != roster.DEPENDENT)


def random_fault(rng: random.Random, racks: int, processes: list[str]) -> tuple[str, dict[str, Any]]:
    """One fault of the catalog with random arguments (plain values, as a person types them)."""
    duration = f"{rng.uniform(0.2, 2.0):.2f}s"
    some = ",".join(str(r) for r in sorted(rng.sample(range(racks), rng.randint(1, min(3, racks))))) + ","
    choices: list[tuple[str, dict[str, Any]]] = [
        ("blip", {"racks": some}),
        ("partition", {"racks": some, "direction": rng.choice(["both", "to-metadata", "from-metadata"])}),
        ("latency", {"racks": some, "delay": f"{rng.randint(10, 300)}ms", "jitter": "5ms"}),
        ("loss", {"racks": some, "probability": round(rng.uniform(0.05, 0.5), 2)}),
        ("isolate", {"target": rng.choice(catalog.SERVICES), "racks": some}),
        ("pause", {"target": rng.choice(processes)}),
        ("kill", {"target": rng.choice(processes)}),
        ("pause-metadata", {}),
        ("capacity", {"cores": rng.choice([20, 60, 80]), "break_glass": "on"}),
        ("gsi-growth", {"tables": "catalog", "factor": 2}),
        ("stuck-partition", {"tables": "metric-groups"}),
        # the responders' moves that live in other holders: a live deploy (the supervisor), the fixes (each service)
        ("deploy", {"retry_policy": rng.choice(catalog.POLICIES), "allowance": f"{rng.choice([1, 2, 4])}s", "staged": 2, "every": "0.1s"}),
        ("stale-cache", {}),
        ("scale-workers", {"workers": rng.choice([2, 4, 8])}),
        ("prune-activities", {}),
        ("write-through", {}),
        ("short-timeout", {}),
    ]
    name, args = rng.choice(choices)
    return name, {**args, "duration": duration}


def host_rules() -> dict[str, str]:
    """The host's packet-filter rules (the local backend must never touch them)."""
    out = {}
    for name, argv in (("iptables", ["iptables-save"]), ("nftables", ["nft", "list", "ruleset"])):
        if shutil.which(argv[0]):
            done = subprocess.run(argv, capture_output=True, text=True)
            out[name] = "\n".join(line for line in done.stdout.splitlines() if not line.startswith("#"))  # no timestamps
    return out


def events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


SWITCHES = {  # what a deploy or a fix changes, as each holder's /status shows it
    "queues": ("fix_stale_cache",),
    "scaling": ("workers", "fix_prune_activities"),
    "metrics": ("fix_write_through",),
    "console": ("fix_short_timeout", "lookup_timeout_s"),
}


def switches(state: dict[str, Any], token: str) -> dict[str, dict[str, Any]]:
    """Each rack's allowance and each service's fixes now."""
    out = {}
    for name, comp in state["components"].items():
        keys = ("allowance_s",) if name.startswith("rack-") else SWITCHES.get(name, ())
        if keys:
            status = client.call("GET", f"{comp['url']}/status", token)
            out[name] = {k: status.get(k) for k in keys}
    return out


def metadata_restored(meta: dict[str, Any], before: dict[str, Any]) -> bool:
    """The metadata service's /status as before the soak: not paused, its cores and memberships back."""
    return not meta["paused"] and meta["cores"] == before["cores"] and meta["membership_sizes"] == before["membership_sizes"]


def stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def soak(leases: int, seed: int, holder_kills: float, echo: Callable[[str], None] = print) -> dict[str, Any]:
    state = running()
    if not state:
        raise LabError("no lab is up: start one with `stormlab up`")
    directory, token = state_dir(), ensure_token(state_dir())
    rng = random.Random(seed)
    comps = state["components"]
    processes = sorted(n for n in comps if catalog.TARGET_NAME.match(n))
    racks = int(state["settings"]["STORMLAB_RACKS"])
    rules_before, meta_before = host_rules(), client.call("GET", f"{comps['metadata']['url']}/status", token)
    switches_before = switches(state, token)
    log = directory / "chaos-events.jsonl"
    first_event = len(events(log))
    counts = {"requested": 0, "applied": 0, "refused": 0, "holders_killed": 0}
    kills: list[tuple[float, str]] = []
    longest = 0.0
    for i in range(leases):
        name, args = random_fault(rng, racks, processes)
        counts["requested"] += 1
        try:
            lease, req = client.apply(state, name, args, token)
            counts["applied"] += 1
            longest = max(longest, float(req.body["duration_s"]))
        except (ChaosError, UsageError, LabError):  # refused (already paused), or its holder restarting: nothing applied
            counts["refused"] += 1
        if rng.random() < holder_kills:
            victim = rng.choice(KILLABLE)
            pid = (running() or state)["components"][victim]["pid"]
            try:
                os.kill(pid, signal.SIGKILL)
                counts["holders_killed"] += 1
                kills.append((time.time(), victim))
            except ProcessLookupError:
                pass
        time.sleep(rng.uniform(0.0, 0.15))
        if (i + 1) % 100 == 0:
            applied, refused, killed = counts["applied"], counts["refused"], counts["holders_killed"]
            echo(f"soak: {i + 1}/{leases} leases ({applied} applied, {refused} refused, {killed} holders killed)")
    time.sleep(longest + 3.0)  # every lease is over, and every killed process restarted
    return counts | verify(state, token, directory, log, first_event, kills, rules_before, meta_before, switches_before)


def verify(
    state: dict[str, Any],
    token: str,
    directory: Path,
    log: Path,
    first_event: int,
    kills: list[tuple[float, str]],
    rules_before: dict[str, str],
    meta_before: dict[str, Any],
    switches_before: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    deadline = time.monotonic() + 90
    while True:  # the restarted holders answer again (a holder killed often waits out its backoff)
        now = running() or state
        try:
            books = {who: client.call("GET", f"{url}/faults", token)["faults"] for who, url in client.holders(now).items()}
            sup = client.call("GET", f"{now['supervisor_url']}/status", token)
            meta = client.call("GET", f"{now['components']['metadata']['url']}/status", token)
            break
        except (LabError, TimeoutError):
            if time.monotonic() > deadline:
                raise LabError("a holder did not come back within 90 s of the soak's end") from None
            time.sleep(0.5)
    comps = sup["components"]
    ours = events(log)[first_event:]
    started = [e for e in ours if e["event"] == "start"]
    ended = {(e["component"], e["id"]) for e in ours if e["event"] == "end"}
    open_leases = [e for e in started if (e["component"], e["id"]) not in ended]
    # a lease without an end event is over if its holder was killed after it started: by the soak,
    # or by a kill fault on it (the cascade's services hold their fixes)
    killed = kills + [(e["at"], e["target"]) for e in started if e["fault"] == "kill"]
    by_restart = [e for e in open_leases if any(who == e["component"] and at >= e["at"] for at, who in killed)]
    result = {
        "ended_by_their_lease": len(started) - len(open_leases),
        "ended_by_a_holder_restart": len(by_restart),
        "never_ended": len(open_leases) - len(by_restart),
        "still_held": sum(len(book) for book in books.values()),
        "processes_missing": sorted(n for n, c in comps.items() if not c["running"] or c["held_down"]),
        "processes_stopped": sorted(n for n, c in comps.items() if c["paused"] or stopped(c["pid"])),
        "metadata_restored": metadata_restored(meta, meta_before),
        "switches_restored": switches(now, token) == switches_before,
        "host_rules_unchanged": host_rules() == rules_before,
    }
    result["ok"] = (
        result["never_ended"] == 0
        and result["still_held"] == 0
        and not result["processes_missing"]
        and not result["processes_stopped"]
        and result["metadata_restored"]
        and result["switches_restored"]
        and result["host_rules_unchanged"]
    )
    return result


# -- on compose -----------------------------------------------------------------------------------


def container_rules(runner: Any, container: str) -> list[str]:
    """What a fault may leave in a container: its iptables rules (each with its table) and any
    netem qdisc. Docker's own rules (its DNS, redone with new ports when a container restarts)
    aside; a table or chain a fault's rule brought into use stays listed, empty, after the rule
    is gone: that is not a rule left behind."""
    out = runner.exec(db.Exec(container, ("sh", "-c", "iptables-save 2>&1; tc qdisc show 2>&1"), detach=False))
    table, found = "", []
    for line in out.splitlines():
        if line.startswith("*"):
            table = line[1:]
        elif (line.startswith("-A ") and not line.startswith("-A DOCKER")) or "netem" in line:  # Docker's DNS rules aside
            found.append(f"{table}: {line}" if line.startswith("-A ") else line)
    return sorted(found)


def service_stopped(runner: Any, container: str) -> bool:
    out = runner.exec(db.Exec(container, ("sh", "-c", f'{db.SERVICE_PID}; cut -d" " -f3 "/proc/$p/stat"'), detach=False))
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


def docker_soak(leases: int, seed: int, holder_kills: float, echo: Callable[[str], None] = print) -> dict[str, Any]:
    runner = docker_cli.runner_for(None)
    racks = len(runner.racks())
    if not racks:
        raise LabError(f"no rack container of the compose project {docker_cli.project()!r} is running: `make up` first")
    containers = docker_cli.lab_containers(runner)
    os.environ.setdefault("STORMLAB_METADATA_URL", f"http://127.0.0.1:{os.environ.get('METADATA_PORT', '8700')}")
    token = compose_token()
    state = chaos_cli.lab_state(True)
    meta_url = state["components"]["metadata"]["url"]
    rng = random.Random(seed)
    targets = [*roster.NAMED_TARGETS, *(f"rack-{r}" for r in range(racks))]
    rules_before = {c: container_rules(runner, c) for c in containers}
    host_before, meta_before = docker_host_rules(), client.call("GET", f"{meta_url}/status", token)
    counts = {"requested": 0, "applied": 0, "refused": 0, "services_killed": 0, "holders_killed": 0, "orphans_reverted_by_list": 0}
    for i in range(leases):
        name, args = random_fault(rng, racks, targets)
        while catalog.FAULTS[name].holder not in ("metadata", "linkproxy", "supervisor") or name == "deploy":
            name, args = random_fault(rng, racks, targets)  # the fixes and the deploy: the local lab's soak
        if name == "kill" and rng.random() > 0.1:  # keep the stack mostly up: most kills become pauses
            name = "pause"
        counts["requested"] += 1
        try:
            if catalog.FAULTS[name].holder == "metadata":
                client.apply(state, name, args, token)
            else:
                req = catalog.request(name, args, racks)
                with contextlib.redirect_stdout(io.StringIO()):
                    docker_cli.apply(req.body, runner)
            counts["applied"] += 1
            counts["services_killed"] += name == "kill"
        except (ChaosError, UsageError, LabError):  # refused (a second netem fault, a target restarting): nothing applied
            counts["refused"] += 1
        if rng.random() < holder_kills:
            live = [h for h in db.held(runner, containers) if not h.orphan]
            if live:
                victim = rng.choice(live)
                runner.exec(db.Exec(victim.container, ("kill", "-KILL", str(victim.pid)), detach=False))
                counts["holders_killed"] += 1
        if (i + 1) % 25 == 0:  # `chaos list`, as a person would run it: orphans are reverted on the way
            counts["orphans_reverted_by_list"] += sum(h.orphan for h in db.held(runner, containers))
            applied, refused, killed = counts["applied"], counts["refused"], counts["holders_killed"]
            echo(f"soak: {i + 1}/{leases} leases ({applied} applied, {refused} refused, {killed} fault shells killed)")
        time.sleep(rng.uniform(0.0, 0.15))
    time.sleep(5.0)  # every lease is over (at most 2 s), a killed service restarting
    deadline = time.monotonic() + 90
    while True:  # a killed service is back (compose's restart policy) and answers
        try:
            meta = client.call("GET", f"{meta_url}/status", token)
            counts["orphans_reverted_by_list"] += sum(h.orphan for h in db.held(runner, containers))
            left = db.held(runner, containers)
            rules = {c: container_rules(runner, c) for c in containers}
            stopped_now = [c for c in containers if service_stopped(runner, c)]
            break
        except Exception as exc:  # a container restarting: the Docker API or the service refuses for a moment
            if time.monotonic() > deadline:
                raise LabError(f"the stack did not come back within 90 s of the soak's end: {exc}") from None
            time.sleep(1.0)
    running_now, host_now = set(docker_cli.lab_containers(runner)), docker_host_rules()
    result = {
        "fault_files_left": len(left),
        "containers_with_rules_changed": {c: diff for c in containers if (diff := changed(rules_before[c], rules[c]))},
        "containers_not_running": sorted(c for c in containers if c not in running_now),
        "services_stopped": sorted(stopped_now),
        "metadata_restored": metadata_restored(meta, meta_before),
        "host_rules_changed": {k: diff for k, v in host_now.items() if (diff := changed(host_before.get(k, []), v))},
    }
    result["ok"] = (
        result["fault_files_left"] == 0
        and not result["containers_with_rules_changed"]
        and not result["containers_not_running"]
        and not result["services_stopped"]
        and result["metadata_restored"]
        and not result["host_rules_changed"]
    )
    return counts | result


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--leases", type=int, default=1000, help="how many fault leases to ask for (default 1000)")
    p.add_argument("--seed", type=int, default=1, help="seed for the faults, their arguments and the holder kills")
    p.add_argument("--holder-kills", type=float, default=0.01, help="chance per lease of SIGKILLing a holder (default 0.01)")
    p.add_argument(
        "--backend",
        choices=("local", "docker"),
        help="the local lab, or the compose stack (default: STORMLAB_BACKEND, else detected: the compose stack if "
        "STORMLAB_COMPOSE_PROJECT is set, else the local lab)",
    )


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.leases <= 100_000 or not 0 <= args.holder_kills <= 1:
        raise UsageError("--leases must be 1-100000 and --holder-kills 0-1")
    run_soak = docker_soak if backend(args.backend, ("local", "docker")) == "docker" else soak
    result = run_soak(args.leases, args.seed, args.holder_kills, echo=lambda line: print(line, flush=True))
    print(json.dumps(result, indent=1))
    return 0 if result["ok"] else 1


if __name__ == "__main__":  # also `stormlab soak`
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    raise SystemExit(run(parser.parse_args()))
