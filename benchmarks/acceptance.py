"""Runs the acceptance matrix of the 2015 profile with `stormlab demo --json` and prints a table.

    .venv/bin/python benchmarks/acceptance.py [--repeat 3] [--baseline 15m] [--only NAME ...]

Each case is a full demo (1,000 nodes, a 5 s blip of 3 of 10 racks, 240 s watched after it),
run one after another; the whole matrix takes about 50 minutes with a 15-minute baseline.
Results go to reports/acceptance-*.json and the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from stormcore import incidents

FIRST = incidents.FIRST.name  # the lab's default profile: the flagship demo
CASES = {
    FIRST: [],
    "gsi-growth off": ["--gsi-growth", "off"],
    "allowance 2s": ["--allowance", "2s"],
    "full-jitter": ["--retry-policy", "full-jitter"],
    "abandoned-work continue": ["--abandoned-work", "continue"],
}
COLUMNS = (
    "baseline_error_ratio",
    "peak_error_ratio",
    "plateau_error_ratio",
    "post_blip_error_ratio",
    "onset_s",
    "storm_holds",
    "recovery_s",
    "disqualified_outside_blip",
    "loop_lag_p99_s",
    "loop_lag_worst_10s_p99_s",
    "valid",  # the validity check (INVALID runs: their reasons are in the JSON kept in reports/)
)


def fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=3, help=f"runs of the {FIRST} case (default 3)")
    p.add_argument("--baseline", default="15m", help="baseline watched before the first run's blip (default 15m)")
    p.add_argument("--watch", default="240s", help="watched after each blip (default 240s)")
    p.add_argument("--only", nargs="*", choices=list(CASES), help="run only these cases")
    args = p.parse_args()
    runs = [(FIRST, CASES[FIRST] + ["--seed", str(2015 + i)]) for i in range(args.repeat)]
    runs += [(name, flags) for name, flags in CASES.items() if name != FIRST]
    if args.only:
        runs = [r for r in runs if r[0] in args.only]
    results = []
    for i, (name, flags) in enumerate(runs):
        settle = args.baseline if i == 0 else "30s"
        cmd = [sys.executable, "-m", "stormlab.cli", "demo", "--json", "--settle", settle, "--watch", args.watch, *flags]
        print(f"[{i + 1}/{len(runs)}] {name}: {' '.join(cmd[3:])}", file=sys.stderr, flush=True)
        started = time.monotonic()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            print(f"  failed with exit code {proc.returncode}", file=sys.stderr)
            results.append({"case": name, "error": proc.returncode})
            continue
        summary = json.loads(proc.stdout)
        summary["case"], summary["settle"], summary["wall_s"] = name, settle, round(time.monotonic() - started)
        results.append(summary)
        print("  " + ", ".join(f"{c}={fmt(summary.get(c))}" for c in COLUMNS), file=sys.stderr, flush=True)
    out = Path("reports") / f"acceptance-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print("| case | " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * (len(COLUMNS) + 1))
    for r in results:
        print(f"| {r['case']} | " + " | ".join(fmt(r.get(c)) for c in COLUMNS) + " |")
    print(f"\nfull results: {out}")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
