"""The cascade with and without the fixes AWS announced: one game day per case, same seed, same blip.

    .venv/bin/python benchmarks/cascade_fixes.py [--seed 2015] [--only CASE ...]

Runs `stormlab scenario run … --autopilot` one after another (about 6 minutes each, 35 in all):
the 2015 scenario with no fix, with each fix alone (`--set`), and the variant with every fix
(scenarios/dynamodb-2015-cascade-fixed.yaml). Each run's figures come from the samples of its
journal (the services' own /status, once a second), over the same windows:

- held back: from pausing the metadata service to the customers' recovery (the pause and the
  staged readmission, when every node refuses);
- storm: from the blip to the recovery.

Prints the README's table and writes every figure (and each run's outcome: a run with a fix fails
the 2015 scenario's expectation that its service fails, by design) to reports/cascade-fixes-*.json. Nothing else
may run on the machine meanwhile: the storm shares the cores with nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from stormcore import incidents
from stormlab.scenarios.scoring import moments

ROOT = Path(__file__).resolve().parents[1]

FLAGSHIP = f"scenarios/{incidents.FIRST.scenarios[0]}"
CASES: dict[str, tuple[str, list[str]]] = {
    "no fix (2015)": (FLAGSHIP, []),
    "stale cache (queues)": (FLAGSHIP, ["fix_stale_cache=on"]),
    "short timeout (console)": (FLAGSHIP, ["fix_short_timeout=on"]),
    "4 workers + pruning (scaling)": (FLAGSHIP, ["scaling_workers=4", "fix_prune_activities=on"]),
    "write-through, smaller refresh set (metrics)": (FLAGSHIP, ["fix_write_through=on"]),
    "every fix": ("scenarios/dynamodb-2015-cascade-fixed.yaml", []),
}
PAUSE, RECOVERY, BLIP = "pause requests to the metadata service", "recovery", "the blip"


def window(samples: list[dict[str, Any]], start: float, end: float) -> list[dict[str, Any]]:
    return [s for s in samples if start <= s["t"] <= end]


def delta_ratio(samples: list[dict[str, Any]], part: str, whole: str) -> tuple[float | None, int]:
    """``part``/``whole`` over a window, from the running totals at its two ends."""
    have = [s for s in samples if s.get(part) is not None and s.get(whole) is not None]
    if len(have) < 2:
        return None, 0
    parts, wholes = have[-1][part] - have[0][part], have[-1][whole] - have[0][whole]
    return (parts / wholes if wholes else None), int(parts)


def figures(journal: dict[str, Any]) -> dict[str, Any]:
    """What the README's table shows, from one run's journal."""
    when, samples = moments(journal), journal["samples"]
    blip = next(p for p in journal["schedule"] if p["name"] == BLIP)
    pause, recovered = when.get(PAUSE), when.get(RECOVERY)
    out: dict[str, Any] = {"outcome": journal["outcome"], "blip": f"racks {blip['args']['racks']} at {blip['at_s']:.1f} s"}
    if pause is None or recovered is None:
        return out | {"error": "the run did not pause and recover: no windows to measure"}
    held = window(samples, pause, recovered)
    storm = window(samples, blip["at_s"], recovered)
    after = [s for s in samples if s["t"] >= recovered]
    queue_ratio, queue_failures = delta_ratio(held, "queue_failures_total", "queue_requests_total")
    put_ratio, _ = delta_ratio(held, "metric_put_failures_total", "metric_puts_total")
    gap_ratio, gaps = delta_ratio(storm, "metric_gaps_total", "metric_puts_total")
    logins = [s["login_p99_s"] for s in held if s.get("login_p99_s") is not None]
    backlog = [s.get("scaling_backlog") or 0 for s in after]
    drained = next((s["t"] for s in after if (s.get("scaling_backlog") or 0) < 2), None)
    return out | {
        "pause_s": round(pause, 1),
        "recovered_s": round(recovered, 1),
        "queue_error_ratio_held_back": queue_ratio,
        "queue_failures_held_back": queue_failures,
        "login_p99_worst_held_back_s": max(logins, default=None),
        "put_error_ratio_held_back": put_ratio,
        "gap_ratio_storm": gap_ratio,
        "gaps_storm": gaps,
        "backlog_at_recovery": backlog[0] if backlog else None,
        "drain_s": None if drained is None else round(drained - recovered, 1),
    }


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def seconds(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f} s"


def table(results: dict[str, dict[str, Any]]) -> str:
    rows = [
        "| case | queue errors, held back | login p99 (worst 10 s), held back | PutMetricData errors, held back "
        "| datapoints without group, storm | backlog at recovery | drain |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for case, r in results.items():
        if "error" in r:
            rows.append(f"| {case} | {r['error']} | | | | | |")
            continue
        rows.append(
            f"| {case} | {pct(r['queue_error_ratio_held_back'])} ({r['queue_failures_held_back']} calls) "
            f"| {seconds(r['login_p99_worst_held_back_s'])} | {pct(r['put_error_ratio_held_back'])} "
            f"| {pct(r['gap_ratio_storm'])} ({r['gaps_storm']}) | {r['backlog_at_recovery']} "
            f"| {seconds(r['drain_s'], 1) if r['drain_s'] is not None else 'not by the end'} |"
        )
    return "\n".join(rows)


def run(case: str, scenario: str, sets: list[str], seed: int, out: Path) -> dict[str, Any]:
    directory = out / case.split(" (")[0].replace(" ", "-").replace(",", "")
    argv = [str(Path(sys.executable).with_name("stormlab")), "scenario", "run", scenario, "--autopilot", "--seed", str(seed)]
    argv += ["--out", str(directory), "--base-port", "0"] + [a for s in sets for a in ("--set", s)]
    print(f"== {case}: {' '.join(argv[1:])}", flush=True)
    started = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    journals = sorted(directory.glob("*/journal.json"))
    if not journals:
        sys.stderr.write(done.stdout[-2000:] + done.stderr[-2000:])
        return {"outcome": f"no journal (exit {done.returncode})", "error": "the run wrote no journal"}
    result = figures(json.loads(journals[-1].read_text())) | {"wall_s": round(time.monotonic() - started), "journal": str(journals[-1])}
    print(f"   {result['outcome']} in {result['wall_s']} s; {result.get('blip')}", flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=2015)
    parser.add_argument("--only", nargs="+", choices=list(CASES), help="run these cases only")
    args = parser.parse_args()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = ROOT / "reports" / f"cascade-fixes-{stamp}"
    results = {case: run(case, *CASES[case], args.seed, out) for case in (args.only or CASES)}
    (ROOT / "reports" / f"cascade-fixes-{stamp}.json").write_text(json.dumps({"seed": args.seed, "results": results}, indent=1))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
