"""The ways out of the lease manager's collapse (aws-2025-10), each measured live and in the model.

    .venv/bin/python -m stormlab.incidents.aws_2025_10.moves [--speed 4] [--only PLAN ...] [--model-only]

Each plan is the operators' moves at profile seconds after the repair, once the collapse has
settled: the account's order (throttle, then restart the hosts two at a time), restarts alone,
and a throttle alone. A plan runs on a lab of its own (the demo's story: the endpoint empty, the
repair, the moves) and in the reference model on the same timeline; the table gives when every
lease was back, counted from the first move, and the launch errors over the last minute.
Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from stormcore.incidents.aws_2025_10 import NAME
from stormcore.settings import LabSettings, profile
from stormlab.incidents.aws_2025_10 import model
from stormlab.incidents.aws_2025_10.demo import Move, measure

SETTLE_S, OUTAGE_S = 20.0, 90.0  # a lease lives 60 s: 90 s of an empty record lapses every one
FIRST_MOVE_S = 150.0  # after the repair: the collapse has settled (the early leases lapsed)
AFTER_S = 400.0  # watched after the first move
THROTTLE = 10.0  # a host's new work a second: half the 20 leases a second it can establish
HOLD_S = 600.0  # the moves' leases: longer than the watch


def _restarts(at: float) -> list[Move]:
    """Selective restarts, as AWS's engineers did: two hosts, then the other two 10 s later."""
    return [Move(at + 10 * (h // 2), "restart-host", {"host": h, "duration": 1.0}) for h in range(4)]


PLANS: dict[str, list[Move]] = {
    "throttle, then restarts (the account's order)": [
        Move(FIRST_MOVE_S, "throttle-work", {"rate": THROTTLE, "duration": HOLD_S}),
        *_restarts(FIRST_MOVE_S + 10),
    ],
    "restarts alone": _restarts(FIRST_MOVE_S + 10),
    "throttle alone": [Move(FIRST_MOVE_S, "throttle-work", {"rate": THROTTLE, "duration": HOLD_S})],
}


def model_moves(plan: list[Move], repair_s: float) -> list[model.Move]:
    out = []
    for m in plan:
        at = repair_s + m.after_s
        if m.fault == "throttle-work":
            out.append(model.Move(at, throttle=float(m.values["rate"])))
        elif m.fault == "restart-host":
            out.append(model.Move(at, restart=(int(m.values["host"]),)))
        elif m.fault == "queue-limit":
            out.append(model.Move(at, queue_limit=int(m.values["limit"])))
    return out


def in_model(settings: LabSettings, plan: list[Move], after_s: float = AFTER_S) -> dict[str, Any]:
    """The plan in the reference model, on the live story's timeline (profile seconds)."""
    repair = SETTLE_S + OUTAGE_S
    timeline = [model.Move(SETTLE_S, endpoint=False), model.Move(repair, endpoint=True), *model_moves(plan, repair)]
    end = repair + FIRST_MOVE_S + after_s
    run = model.simulate(settings, timeline, end, window_s=5.0)
    back = run.recovered_at(repair + FIRST_MOVE_S)
    return {
        "recovered_s_after_first_move": None if back is None else round(back - repair - FIRST_MOVE_S, 1),
        "launch_errors_last_minute": round(run.error_ratio(end - 60, end), 4),
        "collapsed_before_moves": run.error_ratio(repair + FIRST_MOVE_S - 40, repair + FIRST_MOVE_S) > 0.9,
        "launch_errors_before_moves": round(run.error_ratio(repair + FIRST_MOVE_S - 60, repair + FIRST_MOVE_S), 4),
    }


def live(settings: LabSettings, plan: list[Move], base_port: int, out: Any, after_s: float = AFTER_S) -> dict[str, Any]:
    """The plan on a lab of its own at ``settings``' speed."""
    result, story = measure(settings, base_port, SETTLE_S, OUTAGE_S, FIRST_MOVE_S + after_s, plan, out)
    repair = result["repair_s"]
    end = story.samples[-1].t
    last = [s.launch_error_ratio for s in story.samples if s.t >= end - 60 and s.launch_error_ratio is not None]
    before = [s.launch_error_ratio for s in story.samples if repair + FIRST_MOVE_S - 20 <= s.t < repair + FIRST_MOVE_S]
    minute = [
        s.launch_error_ratio
        for s in story.samples
        if repair + FIRST_MOVE_S - 60 <= s.t < repair + FIRST_MOVE_S and s.launch_error_ratio is not None
    ]
    back = next((s.t for s in story.samples if s.t >= repair + FIRST_MOVE_S and (s.leases_active or 0) >= 0.99 * result["droplets"]), None)
    return {
        "recovered_s_after_first_move": None if back is None else round(back - repair - FIRST_MOVE_S, 1),
        "launch_errors_last_minute": round(sum(last) / len(last), 4) if last else None,
        "collapsed_before_moves": bool(before) and min(x for x in before if x is not None) > 0.9,
        "launch_errors_before_moves": round(sum(minute) / len(minute), 4) if minute else None,
        "valid": result["valid"],
        "invalid_reasons": result["invalid_reasons"],
    }


def table(rows: dict[str, dict[str, Any]]) -> str:
    def back(r: dict[str, Any] | None) -> str:
        if r is None:
            return "-"
        s = r["recovered_s_after_first_move"]
        return "never (collapsed again)" if s is None else f"{s:g}s"

    def err(r: dict[str, Any] | None) -> str:
        return "-" if r is None or r["launch_errors_last_minute"] is None else f"{100 * r['launch_errors_last_minute']:.1f}%"

    lines = [
        "| plan | every lease back, after the first move: live | model | launch errors, last minute: live | model | live run |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in rows.items():
        lv, md = r.get("live"), r["model"]
        valid = "-" if lv is None else ("valid" if lv["valid"] else "INVALID")
        lines.append(f"| {name} | {back(lv)} | {back(md)} | {err(lv)} | {err(md)} | {valid} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m stormlab.incidents.aws_2025_10.moves", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--speed", type=float, default=4.0, help="the live labs' speed (default 4: ~2.5 minutes a plan)")
    ap.add_argument("--only", nargs="*", choices=list(PLANS), help="these plans only (default: every one)")
    ap.add_argument("--model-only", action="store_true", help="the model's figures alone (seconds, no lab)")
    ap.add_argument("--base-port", type=int, default=0, help="the live labs' base port (default 0: free ports)")
    ap.add_argument("--out", type=Path, default=Path("reports"), help="where the JSON of the figures goes (default reports/)")
    args = ap.parse_args(argv)
    base = profile(NAME)
    rows: dict[str, dict[str, Any]] = {}
    for name in args.only or PLANS:
        plan = PLANS[name]
        rows[name] = {"model": in_model(base, plan)}
        if not args.model_only:
            print(f"== {name}: a lab at speed {args.speed:g} …", file=sys.stderr, flush=True)
            rows[name]["live"] = live(base.sped_up(args.speed), plan, args.base_port, sys.stderr)
    print(table(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"lease-moves-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"speed": args.speed, "plans": rows}, indent=1))
    print(f"figures: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
