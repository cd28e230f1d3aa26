"""The fault soak: many random fault leases, with their holders SIGKILLed at random points, and
then proof that every one of them is gone.

    stormlab soak --leases 1000 [--seed 1] [--holder-kills 0.01]     (against the running lab)
    stormlab soak --backend docker --leases 1000                       (against the compose stack)

Each lease is one of the catalog's faults with random arguments and a 0.2-2 s duration (a fault
on traffic 1-2 s), asked through the same client `stormlab chaos` uses; now and then
(``--holder-kills``, a chance per lease) the link proxy or the metadata service is SIGKILLed by
its pid and restarted by the supervisor, with whatever it held: half the time between leases,
half while a lease is being applied (a deploy's: one of the racks it pushes to). At the end, once
the longest lease is over, it checks:
every holder's book is empty; every component runs and none is stopped (SIGSTOP); the metadata
service is not paused and has its cores, memberships and tables back; the host's iptables and
nftables rules are what they were; and every lease that was applied ended, by its lease or by
its holder's restart (the fault event log); and every fault on traffic dropped or held back
something, unless all its targets (or the metadata service) were frozen or restarting while it
held, or another lease cut the same racks. Prints the figures as JSON; exit 1 if any check fails.

On compose (``--backend docker``; STORMLAB_COMPOSE_PROJECT, and STORMLAB_METADATA_URL and
STORMLAB_TOKEN when not the defaults) the network and freeze faults are fault shells in the
target containers, and the holders killed are those shells (SIGKILL inside the container): the
fault they held is an orphan until a listing reverts it: `chaos list` (run every 25 leases, as a
person would; those it reverts are counted), `chaos halt`, or the chaos command's own look at
its targets before it applies a fault there. A tenth of the kill faults are kept (compose
restarts the service), the rest become freezes. At the end, after one last `list`: no fault file
left in any container, each container's iptables rules and netem qdiscs what they were, every
container running and its service not stopped, the metadata service restored, the host's own
rules (Docker's aside) unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos import catalog, client
from chaos.catalog import ChaosError
from chaos.client import ServerFailed
from chaos.flags import add_backend
from stormcore import jsonlog, roster
from stormcore.auth import ensure_token
from stormcore.errors import LabError, UsageError
from stormcore.labstate import backend, running, state_dir
from stormlab.runs import soak_compose
from stormlab.runs.soak_compose import docker_soak
from stormlab.runs.soak_leases import CUTS, NETWORK, RESTART_S, STILL, host_rules, metadata_restored, random_fault, unexplained

# holders the supervisor restarts and that hold faults for the whole lab (the services hold only their fixes; killing the
# supervisor would end the lab)
KILLABLE = tuple(p.name for p in roster.ROSTER if p.holds_faults and p.kind != roster.DEPENDENT)


def events(path: Path, since: float = 0.0) -> list[dict[str, Any]]:
    """The fault event log's entries (its rotated generations too) from ``since`` (epoch seconds)."""
    return [e for e in jsonlog.read(path) if isinstance(e.get("at"), (int, float)) and e["at"] >= since]


def paired(log: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Each start event with its end (None: it never had one), in the log's order. A holder that
    restarts numbers its leases from 1 again: an end belongs to the newest start of its number."""
    pairs: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    open_at: dict[tuple[str, int], int] = {}
    for e in log:
        key = (e["component"], e["id"])
        if e["event"] == "start":
            open_at[key] = len(pairs)
            pairs.append((e, None))
        elif key in open_at:
            i = open_at.pop(key)
            pairs[i] = (pairs[i][0], e)
    return pairs


COUNTS = ("requested", "applied", "refused", "server_errors", "holders_killed", "kills_during_apply")
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
        keys = ("deployed",) if name.startswith("rack-") else SWITCHES.get(name, ())
        if keys:
            status = client.call("GET", f"{comp['url']}/status", token)
            out[name] = {k: status.get(k) for k in keys}
            if "deployed" in out[name]:  # every deployable setting and what is held; not the push count
                out[name]["deployed"] = {k: v for k, v in (out[name]["deployed"] or {}).items() if k != "generation"}
    return out


def changed(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each process whose switches differ: what they were and what they are."""
    return {n: {"before": before.get(n), "now": after.get(n)} for n in sorted(set(before) | set(after)) if before.get(n) != after.get(n)}


def stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


@dataclass
class LocalSoak:
    """A soak of the running local lab: what it was before, what was asked, what was killed."""

    state: dict[str, Any]
    token: str
    directory: Path
    rules_before: dict[str, str] = field(default_factory=dict)
    meta_before: dict[str, Any] = field(default_factory=dict)
    switches_before: dict[str, dict[str, Any]] = field(default_factory=dict)
    started_at: float = 0.0
    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("requested", "applied", "refused", "server_errors", "holders_killed", "kills_during_apply"), 0
        )
    )
    server_errors: list[str] = field(default_factory=list)
    kills: list[tuple[float, str]] = field(default_factory=list)
    longest_s: float = 0.0

    @classmethod
    def of_running_lab(cls) -> LocalSoak:
        state = running()
        if not state:
            raise LabError("no lab is up: start one with `stormlab up`")
        directory = state_dir()
        soak = cls(state, ensure_token(directory), directory)
        soak.rules_before, soak.switches_before = host_rules(), switches(state, soak.token)
        soak.meta_before = client.call("GET", f"{state['components']['metadata']['url']}/status", soak.token)
        soak.started_at = time.time()
        return soak

    @property
    def log(self) -> Path:
        return self.directory / "chaos-events.jsonl"

    def lease(self, name: str, args: dict[str, Any]) -> None:
        """Ask for one lease as `stormlab chaos` would; a refusal (already paused, a holder restarting) applies nothing."""
        self.counts["requested"] += 1
        try:
            _, req = client.apply(self.state, name, args, self.token)
            self.counts["applied"] += 1
            self.longest_s = max(self.longest_s, float(req.body["duration_s"]))
        except ServerFailed as exc:  # a 5xx is a bug, not a refusal: it may have changed something
            self.counts["server_errors"] += 1
            self.server_errors.append(f"{name} {args}: {exc}")
        except (ChaosError, UsageError, LabError):
            self.counts["refused"] += 1

    def kill_a_holder(self, rng: random.Random) -> None:
        self.kill(rng.choice(KILLABLE))

    def kill(self, victim: str) -> None:
        """SIGKILL a lab process by its pid (the supervisor restarts it)."""
        pid = (running() or self.state)["components"][victim]["pid"]
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        self.counts["holders_killed"] += 1
        self.kills.append((time.time(), victim))

    def lease_with_a_kill(self, name: str, args: dict[str, Any], rng: random.Random) -> None:
        """Ask for a lease while its holder is killed (a deploy: while one of the racks it is pushed to
        is): the answer must still be an answer (a refusal, or a lease that ends), never a 500."""
        holder = catalog.FAULTS[name].holder
        racks = sorted(n for n in self.state["components"] if n.startswith("rack-"))
        victim = holder if holder in KILLABLE else rng.choice(racks)
        killer = threading.Timer(rng.uniform(0.0, 0.05), self.kill, (victim,))
        killer.start()
        try:
            self.lease(name, args)
        finally:
            killer.join()
        self.counts["kills_during_apply"] += 1

    def read_back(self, limit_s: float = 90.0) -> tuple[dict[str, Any], dict[str, list], dict[str, Any], dict[str, Any]]:
        """Once the restarted holders answer again (a holder killed often waits out its backoff):
        the lab's state, every holder's book, the supervisor's and the metadata service's status."""
        deadline = time.monotonic() + limit_s
        while True:
            now = running() or self.state
            try:
                books = {who: client.call("GET", f"{url}/faults", self.token)["faults"] for who, url in client.holders(now).items()}
                sup = client.call("GET", f"{now['supervisor_url']}/status", self.token)
                meta = client.call("GET", f"{now['components']['metadata']['url']}/status", self.token)
                return now, books, sup, meta
            except (LabError, TimeoutError):
                if time.monotonic() > deadline:
                    raise LabError(f"a holder did not come back within {limit_s:.0f} s of the soak's end") from None
                time.sleep(0.5)

    def leases_left_open(self) -> dict[str, int]:
        """From the fault event log: leases ended by their lease, by a restart of their holder, or never."""
        pairs = paired(events(self.log, self.started_at))
        started = [start for start, _ in pairs]
        open_leases = [start for start, end in pairs if end is None]
        # a lease without an end event is over if its holder was killed after it started: by the soak,
        # or by a kill fault on it (the cascade's services hold their fixes)
        killed = self.kills + [(e["at"], e["target"]) for e in started if e["fault"] == "kill"]
        by_restart = [e for e in open_leases if any(who == e["component"] and at >= e["at"] for at, who in killed)]
        return {
            "ended_by_their_lease": len(started) - len(open_leases),
            "ended_by_a_holder_restart": len(by_restart),
            "never_ended": len(open_leases) - len(by_restart),
        }

    def effects(self) -> dict[str, Any]:
        """The faults on traffic that ended: how many did nothing, and how many of those without a
        reason (their targets all frozen or restarting, or the metadata service): findings."""
        pairs = paired(events(self.log, self.started_at))
        ended = [(start, end) for start, end in pairs if end is not None and start["fault"] in NETWORK]
        still = [
            (e["target"], e["at"], e["at"] + (e["duration_s"] if e["fault"] == "freeze" else RESTART_S))
            for e, _ in pairs
            if e["fault"] in STILL
        ] + [(who, at, at + RESTART_S) for at, who in self.kills]
        # another lease cutting the same rack dropped the traffic first: there was nothing left to lose or delay
        cuts = [(rack, s["at"], e["at"], s["id"]) for s, e in ended if s["fault"] in CUTS for rack in s["target"].split(",")]
        quiet = [(s["target"].split(","), s["at"], e["at"], s["id"]) for s, e in ended if e.get("no_effect")]
        found = [
            (targets, a, b)
            for targets, a, b, lease in quiet
            if unexplained([(targets, a, b)], still + [(rack, x, y) for rack, x, y, other in cuts if other != lease])
        ]
        return {
            "network_leases_ended": len(ended),
            "network_leases_without_effect": len(quiet),
            "without_effect_unexplained": [f"{','.join(t)} from {a:.1f} to {b:.1f}" for t, a, b in found][:10],
        }

    def verdict(self) -> dict[str, Any]:
        now, books, sup, meta = self.read_back()
        comps, after = sup["components"], switches(now, self.token)
        result = (
            self.leases_left_open()
            | self.effects()
            | {
                "still_held": sum(len(book) for book in books.values()),
                "processes_missing": sorted(n for n, c in comps.items() if not c["running"] or c["held_down"]),
                "processes_stopped": sorted(n for n, c in comps.items() if c["paused"] or stopped(c["pid"])),
                "metadata_restored": metadata_restored(meta, self.meta_before),
                "switches_restored": after == self.switches_before,
                "switches_changed": changed(self.switches_before, after),
                "server_error_examples": self.server_errors[:10],
            }
        )
        rules_now = host_rules()
        result["host_rules_unchanged"] = rules_now == self.rules_before
        before = {k: v.splitlines() for k, v in self.rules_before.items()}
        result["host_rules_changed"] = {  # what came or went, so a run that fails says where to look
            k: diff for k, v in rules_now.items() if (diff := soak_compose.changed(before.get(k, []), v.splitlines()))
        }
        clean = not (
            result["never_ended"]
            or result["still_held"]
            or result["processes_missing"]
            or result["processes_stopped"]
            or self.server_errors
            or result["without_effect_unexplained"]
        )
        result["ok"] = clean and result["metadata_restored"] and result["switches_restored"] and result["host_rules_unchanged"]
        return result


def soak(leases: int, seed: int, holder_kills: float, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """``leases`` random leases on the running local lab, holders killed at random, then the proof."""
    lab, rng = LocalSoak.of_running_lab(), random.Random(seed)
    processes = sorted(n for n in lab.state["components"] if catalog.TARGET_NAME.match(n))
    racks = int(lab.state["settings"]["STORMLAB_RACKS"])
    for i in range(leases):
        name, args = random_fault(rng, racks, processes)
        if rng.random() < holder_kills / 2:  # half the kills while a lease is being applied
            lab.lease_with_a_kill(name, args, rng)
        else:
            lab.lease(name, args)
        if rng.random() < holder_kills / 2:  # the other half between leases
            lab.kill_a_holder(rng)
        time.sleep(rng.uniform(0.0, 0.15))
        if (i + 1) % 100 == 0:
            c = lab.counts
            echo(f"soak: {i + 1}/{leases} leases ({c['applied']} applied, {c['refused']} refused, {c['holders_killed']} holders killed)")
    time.sleep(lab.longest_s + 3.0)  # every lease is over, and every killed process restarted
    return lab.counts | lab.verdict()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--leases", type=int, default=1000, help="how many fault leases to ask for (default 1000)")
    p.add_argument("--seed", type=int, default=1, help="seed for the faults, their arguments and the holder kills")
    p.add_argument("--holder-kills", type=float, default=0.01, help="chance per lease of SIGKILLing a holder (default 0.01)")
    add_backend(p, ("local", "docker"))
    p.add_argument("--json", action="store_true", help="only the result's JSON document on stdout (progress on stderr)")


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.leases <= 100_000 or not 0 <= args.holder_kills <= 1:
        raise UsageError("--leases must be 1-100000 and --holder-kills 0-1")
    run_soak = docker_soak if backend(args.backend, ("local", "docker")) == "docker" else soak
    progress = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the one document
    result = run_soak(args.leases, args.seed, args.holder_kills, echo=lambda line: print(line, file=progress, flush=True))
    print(json.dumps(result, indent=1))
    return 0 if result["ok"] else 1


if __name__ == "__main__":  # also `stormlab soak`
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    raise SystemExit(run(parser.parse_args()))
