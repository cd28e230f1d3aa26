"""What both soaks share: the random leases they ask for, the checks that nothing was left on the
host and that the metadata service is back as it was, and which faults on traffic did nothing
without a reason."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from typing import Any

from chaos import catalog

NETWORK = ("blip", "partition", "latency", "loss", "isolate")  # the faults on traffic: each says what it did
CUTS = ("blip", "partition")  # drop a rack's traffic: another fault on the same rack then has none to act on
STILL = ("freeze", "kill")  # a process held still sends nothing for a fault on its traffic to act on
RESTART_S = 10.0  # how long after a kill a process may take to send again (the supervisor's or compose's restart)
PEER = "metadata"  # the other end of every rack link


def random_fault(rng: random.Random, racks: int, processes: list[str]) -> tuple[str, dict[str, Any]]:
    """One fault of the catalog with random arguments (plain values, as a person types them). A
    fault on traffic lasts at least a second and a loss loses at least half, so that one which
    did nothing (no probe crossed its links) is a finding, not chance."""
    duration = f"{rng.uniform(0.2, 2.0):.2f}s"
    services = [s for s in catalog.SERVICES if s in processes] or list(catalog.SERVICES)  # the lab's own (an engine runs 2015's)
    some = ",".join(str(r) for r in sorted(rng.sample(range(racks), rng.randint(1, min(3, racks))))) + ","
    choices: list[tuple[str, dict[str, Any]]] = [
        ("blip", {"racks": some}),
        ("partition", {"racks": some, "direction": rng.choice(["both", "to-metadata", "from-metadata"])}),
        ("latency", {"racks": some, "delay": f"{rng.randint(10, 300)}ms", "jitter": "5ms"}),
        ("loss", {"racks": some, "probability": round(rng.uniform(0.5, 0.9), 2)}),
        ("isolate", {"target": rng.choice(services)}),  # every rack: a service talks only to its tables' racks
        ("freeze", {"target": rng.choice(processes)}),
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
    if name in NETWORK:
        duration = f"{rng.uniform(1.0, 2.0):.2f}s"
    return name, {**args, "duration": duration}


Window = tuple[str, float, float]  # a target, and from when to when


def unexplained(quiet: list[tuple[list[str], float, float]], still: list[Window], peer: str = PEER) -> list[tuple[list[str], float, float]]:
    """The faults on traffic that did nothing (their targets, start, end) without a reason: a
    lease is explained when every one of its targets, or ``peer`` (the metadata service at the
    other end), was held still (frozen, or killed and restarting) at some time while it held."""

    def held_still(target: str, start: float, end: float) -> bool:
        return any(who == target and a <= end and b >= start for who, a, b in still)

    return [
        (targets, start, end)
        for targets, start, end in quiet
        if not (all(held_still(t, start, end) for t in targets) or held_still(peer, start, end))
    ]


def host_rules() -> dict[str, str]:
    """The host's packet-filter rules, without their counters: what a lab may change only while a
    lease holds (the links' cuts, where the kernel carries them) and must leave as it found."""
    out = {}
    for name, argv in (("iptables", ["iptables-save"]), ("nftables", ["nft", "list", "ruleset"])):
        if shutil.which(argv[0]):
            done = subprocess.run(argv, capture_output=True, text=True)
            lines = (line for line in done.stdout.splitlines() if not line.startswith("#"))  # no timestamps
            out[name] = "\n".join(uncounted(line) for line in lines)
    return out


def uncounted(line: str) -> str:
    """A rule without its counters: iptables' ``[packets:bytes]``, nft's ``counter packets P bytes B``."""
    return NFT_COUNTER.sub("counter", IPTABLES_COUNTER.sub("[]", line))


IPTABLES_COUNTER = re.compile(r"\[\d+:\d+\]")
NFT_COUNTER = re.compile(r"counter packets \d+ bytes \d+")


def metadata_restored(meta: dict[str, Any], before: dict[str, Any]) -> bool:
    """The metadata service's /status as before the soak: not paused, its cores and memberships back."""
    return not meta["paused"] and meta["cores"] == before["cores"] and meta["membership_sizes"] == before["membership_sizes"]
