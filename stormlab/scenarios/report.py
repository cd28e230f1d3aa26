"""The post-game report: a PNG per series (fault windows shaded, operator moves marked), the
debrief's timeline per on-call role (pages, acks, moves, status posts beside the customers'
errors), and one HTML page (``report_html``) with the timeline, the seed-vs-lab tables and the
score cards."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stormlab.artefacts.plotting import pyplot
from stormlab.engine.reading import Reading, headline, readings
from stormlab.responder.moves import ENDERS, EVENT_NAMES, ROLES, role_events
from stormlab.scenarios import report_html
from stormlab.scenarios.scoring import LAUNCHES, incident_of, records

SERIES = (
    ("customer-errors", "customer error ratio (%)", lambda s, p: _pct(s.customer_error_ratio)),
    ("disqualified", "nodes disqualified", lambda s, p: s.nodes_disqualified),
    ("renewal-latency", "renewal p99 (s) against the allowance", lambda s, p: s.renewal_p99_s),
    ("retries", "renewal retries per second", lambda s, p: _rate(s, p, "retry")),
    ("metadata-inflight", "metadata requests in flight", lambda s, p: s.metadata_inflight),
    # the cascade: the services whose control planes live in the lab's tables
    ("cascade-scaling-api", "scaling API errors (%)", lambda s, p: _pct(s.scaling_api_error_ratio)),
    ("cascade-scaling-backlog", "scaling activities waiting", lambda s, p: s.scaling_backlog),
    ("cascade-metric-gaps", "datapoints without their group (%)", lambda s, p: _pct(s.metric_gap_ratio)),
    ("cascade-metric-errors", "PutMetricData errors (%)", lambda s, p: _pct(s.metric_put_error_ratio)),
    ("cascade-queue-errors", "queue send/receive errors (%)", lambda s, p: _pct(s.queue_error_ratio)),
    ("cascade-login", "console login p99 (s)", lambda s, p: s.login_p99_s),
    # the lease manager (the aws-2025-10 profile)
    ("leases-launch-errors", "instance launches failing (%)", lambda s, p: _pct(s.launch_error_ratio)),
    ("leases-active", "droplets holding a lease", lambda s, p: s.leases_active),
    ("leases-work", "lease work timed out per second", lambda s, p: s.lease_timed_out_per_s),
)
OPTIONAL = ("cascade-", "leases-")  # series of services a lab may not run: drawn only when measured


def _pct(x: float | None) -> float | None:
    return None if x is None else 100 * x


def _rate(sample: Reading, prev: Reading | None, attempt: str) -> float | None:
    if prev is None or sample.t <= prev.t:
        return None
    now, before = sample.renewal_attempts_total, prev.renewal_attempts_total
    if attempt not in now or attempt not in before:
        return None
    return max(0.0, now[attempt] - before[attempt]) / (sample.t - prev.t)


def fault_windows(journal: dict[str, Any]) -> list[tuple[float, float, str]]:
    """Each fault's window: from its start to its lease's end, or to the move that ended it sooner
    (the endpoint repaired by hand, the partition restored)."""
    end = Reading.from_json(journal["samples"][-1]).t if journal["samples"] else 0.0
    enders = [(a["t"], ENDERS[a["action"]]) for a in journal["player_actions"] if a["ok"] and a["action"] in ENDERS]

    def until(r: dict[str, Any]) -> float:
        ended = [t for t, fault in enders if fault == r["fault"] and t >= r["at_s"]]
        return min([end, r["at_s"] + r["duration_s"], *ended])

    return [(r["at_s"], until(r), r["fault"]) for r in records(journal) if r["kind"] == "fault" and r.get("passed") and r.get("duration_s")]


def draw(journal: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    samples = readings(journal["samples"])
    ts = [s.t for s in samples]
    windows = fault_windows(journal)
    moves = journal["player_actions"]
    head = incident_of(journal).headline
    paths = []
    for name, label, value in SERIES:
        ys = [value(s, samples[i - 1] if i else None) for i, s in enumerate(samples)]
        if name.startswith(OPTIONAL) and all(y is None for y in ys):
            continue  # that service does not run in this lab (the compose stack has no cascade; 2015's, no lease manager)
        fig, ax = plt.subplots(figsize=(11, 3.2))
        ax.plot(ts, [float("nan") if y is None else y for y in ys], lw=1.5, color="#2c3e50", label=label)
        if name == "renewal-latency" and samples:
            ax.axhline(samples[-1].allowance_s or 0, color="#c0392b", ls="--", lw=1.2, label="allowance")
        if head is not None and name == head.series and head.then is not None:  # the account's level, its own words
            ax.axhline(head.then, color="#7f8c8d", ls=":", lw=1, label=head.then_words)
        palette = {"blip": "#f39c12", "gsi-growth": "#d5f5e3", "stuck-partition": "#d6eaf8"}
        for start, stop, fault in windows:
            ax.axvspan(start, stop, color=palette.get(fault, "#f5b7b1"), alpha=0.45 if fault == "blip" else 0.25, lw=0)
            ax.annotate(fault, (start, 1.0), xycoords=("data", "axes fraction"), fontsize=7, va="top", color="#7e5109")
        for i, move in enumerate(m for m in moves if m["action"] != "note"):
            color = "#27ae60" if move["ok"] else "#c0392b"
            ax.axvline(move["t"], color=color, lw=1, ls="-.")
            # moves come in quick succession: stagger their labels so they stay readable
            ax.annotate(
                move["action"] + ("" if move["ok"] else " (failed)"),
                (move["t"], 0.9 - 0.16 * (i % 5)),
                xycoords=("data", "axes fraction"),
                fontsize=7,
                color=color,
                ha="left",
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8},
            )
        ax.set_xlabel("seconds since the start of the scenario")
        ax.set_ylabel(label, fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=7)
        fig.tight_layout()
        path = out / f"{name}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


MARKS = {  # how each kind of event is drawn in its role's lane: marker, colour
    "page": ("v", "#c0392b"),
    "inject": ("D", "#e67e22"),
    "ack": ("o", "#8e44ad"),
    "move": ("s", "#27ae60"),
    "failed": ("X", "#c0392b"),
    "post": ("*", "#2980b9"),
}


def draw_roles(journal: dict[str, Any], out: Path) -> Path | None:
    """The debrief: customers' errors on top, one lane per role below with its pages, acks,
    moves and posts."""
    plt = pyplot()
    events = role_events(journal)
    if not events:
        return None
    lanes = [r for r in (*ROLES, "lab", "anyone") if any(e[1] == r for e in events)]
    samples = readings(journal["samples"])
    fig, (top, low) = plt.subplots(2, 1, figsize=(11, 2.4 + 0.7 * len(lanes)), sharex=True, height_ratios=(1.2, 0.45 * len(lanes) + 0.4))
    judged = headline(samples)
    errors = [_pct(s.probe(judged)) for s in samples]
    top.plot([s.t for s in samples], [float("nan") if x is None else x for x in errors], color="#2c3e50", lw=1.3)
    top.set_ylabel("launch errors (%)" if judged == LAUNCHES else "customer errors (%)", fontsize=8)
    top.grid(alpha=0.3)
    for start, stop, fault in fault_windows(journal):
        top.axvspan(start, stop, color="#f39c12" if fault == "blip" else "#f5b7b1", alpha=0.35, lw=0)
    for h in journal.get("holds", []):  # the game's clock stood still here (the lab ran on)
        top.axvline(h["at_s"], color="#7f8c8d", ls="--", lw=1)
        top.annotate(f"held {h['held_s']:g} s", (h["at_s"], 1), xycoords=("data", "axes fraction"), fontsize=6, color="#7f8c8d")
    seen: set[str] = set()
    count = dict.fromkeys(lanes, 0)
    for t, lane, mark, label in events:
        (shape, color), name = MARKS[mark], EVENT_NAMES[mark]
        y = lanes.index(lane)
        low.scatter([t], [y], marker=shape, color=color, s=46, zorder=3, label=None if name in seen else name)
        seen.add(name)
        # a lane's events come in quick succession: their labels take turns above and below
        rise = (7, -11, 15, -19)[count[lane] % 4]
        count[lane] += 1
        low.annotate(label, (t, y), xytext=(4, rise), textcoords="offset points", fontsize=6, color=color)
    low.set_yticks(range(len(lanes)), lanes, fontsize=8)
    low.set_ylim(-0.7, len(lanes) - 0.3)
    low.invert_yaxis()
    low.grid(alpha=0.3, axis="x")
    low.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    low.set_xlabel("seconds since the start of the scenario")
    fig.tight_layout()
    path = out / "roles.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write(journal: dict[str, Any], out: Path) -> Path:
    """The run directory: the scored journal, a PNG per series, the roles' timeline and the
    HTML page that shows them; returns the page's path."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "journal.json").write_text(json.dumps(journal, indent=1))
    pngs = draw(journal, out)
    roles = draw_roles(journal, out)
    path = out / "report.html"
    path.write_text(report_html.page(journal, pngs, roles))
    return path
