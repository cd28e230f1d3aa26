"""What both soaks share: the random leases they ask for, and the checks that nothing was left
on the host and that the metadata service is back as it was."""

from __future__ import annotations

import random
import shutil
import subprocess
from typing import Any

from chaos import catalog


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
    return name, {**args, "duration": duration}


def host_rules() -> dict[str, str]:
    """The host's packet-filter rules (the local backend must never touch them)."""
    out = {}
    for name, argv in (("iptables", ["iptables-save"]), ("nftables", ["nft", "list", "ruleset"])):
        if shutil.which(argv[0]):
            done = subprocess.run(argv, capture_output=True, text=True)
            out[name] = "\n".join(line for line in done.stdout.splitlines() if not line.startswith("#"))  # no timestamps
    return out


def metadata_restored(meta: dict[str, Any], before: dict[str, Any]) -> bool:
    """The metadata service's /status as before the soak: not paused, its cores and memberships back."""
    return not meta["paused"] and meta["cores"] == before["cores"] and meta["membership_sizes"] == before["membership_sizes"]
