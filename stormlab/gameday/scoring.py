"""What a game day measured: moments, the seed-vs-lab table, the players' score. Pure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaos import catalog
from common.settings import TIME_COMPRESSION
from stormlab.gameday.scenario import CASCADE_PROBES, Scenario
from stormlab.story import Sample, host_fields, host_figures, invalid_reasons


def records(journal: dict[str, Any]) -> list[dict[str, Any]]:
    """Every step's record, the autopilot's moves in place after their operator step."""
    return [r for s in journal["steps"] for r in (s, *s.get("autopilot", []))]


def moments(journal: dict[str, Any]) -> dict[str, float]:
    """When each step happened: a fault or action when it was taken, an expectation when it
    was met, the operator phase when the lab recovered."""
    out = {}
    for r in records(journal):
        if r["kind"] == "expect" and r.get("passed"):
            out[r["name"]] = r["at_s"] + r["met_after_s"]
        elif r["kind"] == "operator":
            if r.get("recovered_after_s") is not None:
                out[r["name"]] = r["started_s"] + r["recovered_after_s"]
        elif r["kind"] in ("fault", "action", "wait"):
            out[r["name"]] = r["at_s"]
    return out


def compare(scenario: Scenario, journal: dict[str, Any]) -> list[dict[str, Any]]:
    """The seed's numbers beside the lab's; a span of 2015 time also at the lab's pace (the
    profile's compression and the run's speed), and whether the row is about the cascade."""
    when = moments(journal)
    by_name = {r["name"]: r for r in records(journal)}
    rows = []
    for c in scenario.compare:
        kind, _, ref = c.measure.partition(":")
        if kind == "mean":
            mean = by_name.get(ref, {}).get("mean")
            probe = by_name.get(ref, {}).get("expect", "").split()[0] if mean is not None else ""
            lab = (
                None
                if mean is None
                else f"{100 * mean:.1f}%"
                if probe.endswith("ratio")
                else f"{mean:.3g}" + (" s" if probe.endswith("_s") else "")
            )
        else:
            a, b = ref.split("..")
            lab = f"{when[b] - when[a]:.0f} s" if a in when and b in when else None
        paced = None if c.span_2015_s is None else f"{c.span_2015_s / TIME_COMPRESSION / journal.get('speed', 1.0):.0f} s"
        checks = [scenario.step(s).check for s in c.steps()]
        cascade = any(check is not None and check.probe in CASCADE_PROBES for check in checks)
        rows.append({"what": c.what, "in_2015": c.in_2015, "at_lab_pace": paced, "lab": lab or "not measured", "cascade": cascade})
    return rows


def error_minutes(samples: list[dict[str, Any]]) -> float:
    """Customer error-minutes: the error ratio integrated over the run (lab minutes)."""
    total = 0.0
    for a, b in zip(samples, samples[1:], strict=False):
        ea, eb = a.get("customer_error_ratio"), b.get("customer_error_ratio")
        if ea is not None and eb is not None:
            total += (ea + eb) / 2 * (b["t"] - a["t"])
    return total / 60


def score(scenario: Scenario, journal: dict[str, Any]) -> dict[str, Any]:
    when = moments(journal)
    onset = when.get(scenario.onset_step) if scenario.onset_step else None
    operator = next((r for r in journal["steps"] if r["kind"] == "operator"), None)
    players = journal["player_actions"]
    detect = next((a["t"] for a in players if onset is not None and a["t"] >= onset and a["action"] == "status"), None)
    recovered = when.get(operator["name"]) if operator else None
    in_phase = [a for a in players if operator and a["t"] >= operator["started_s"] and a.get("fault") in catalog.MOVES]
    return {
        "onset_s": None if onset is None else round(onset, 1),
        "time_to_detect_s": None if detect is None else round(detect - onset, 1),
        "time_to_mitigate_s": None if recovered is None or onset is None else round(recovered - onset, 1),
        "customer_error_minutes": round(error_minutes(journal["samples"]), 3),
        "actions_taken": len(in_phase),
        "failed_actions": sum(1 for a in in_phase if not a["ok"]),
        "recovered": recovered is not None,
    }


def append_leaderboard(path: Path, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """Add a run; returns the board, best first (recovered, then fewest error-minutes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(entry) + "\n")
    board = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(board, key=lambda e: (not e["recovered"], e["customer_error_minutes"]))


def validity(journal: dict[str, Any], period_s: float) -> dict[str, Any]:
    """The demo's validity check on a game day's samples (wall-clock seconds; ``period_s``: the
    run's renewal period). The herd is the 3 periods after the first blip; the whole-run lag p99
    is not in a game day's samples, so its 10 s windows are judged."""
    raw = journal["samples"]
    if not raw:
        return {"valid": True, "invalid_reasons": []}
    samples = [Sample(r["t"], 0, 0, 0, 0, None, None, r.get("loop_lag_p99_s") or 0.0, **host_fields(r)) for r in raw]
    allowance = max((r.get("allowance_s") or 0.0 for r in raw), default=0.0)
    blip = next((r["at_s"] for r in records(journal) if r.get("fault") == "blip"), None)
    reasons = invalid_reasons(samples, 0.0, blip, allowance, period_s) if allowance else []
    return {"valid": not reasons, "invalid_reasons": reasons, **host_figures(samples, 0.0)}
