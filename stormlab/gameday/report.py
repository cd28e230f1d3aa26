"""The post-game report: a PNG per series (fault windows shaded, operator moves marked), the
debrief's timeline per on-call role (pages, acks, moves, status posts beside the customers'
errors), and one HTML page with the timeline, the seed-vs-lab tables and the score cards."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from stormcore.settings import TIME_COMPRESSION
from stormlab.gameday.moves import ROLES
from stormlab.gameday.scoring import acted_as, records
from stormlab.plotting import pyplot

SERIES = (
    ("customer-errors", "customer error ratio (%)", lambda s, p: _pct(s.get("customer_error_ratio"))),
    ("disqualified", "nodes disqualified", lambda s, p: s.get("nodes_disqualified")),
    ("renewal-latency", "renewal p99 (s) against the allowance", lambda s, p: s.get("renewal_p99_s")),
    ("retries", "renewal retries per second", lambda s, p: _rate(s, p, "retry")),
    ("metadata-inflight", "metadata requests in flight", lambda s, p: s.get("metadata_inflight")),
    # the cascade: the services whose control planes live in the lab's tables
    ("cascade-scaling-api", "scaling API errors (%)", lambda s, p: _pct(s.get("scaling_api_error_ratio"))),
    ("cascade-scaling-backlog", "scaling activities waiting", lambda s, p: s.get("scaling_backlog")),
    ("cascade-metric-gaps", "datapoints without their group (%)", lambda s, p: _pct(s.get("metric_gap_ratio"))),
    ("cascade-metric-errors", "PutMetricData errors (%)", lambda s, p: _pct(s.get("metric_put_error_ratio"))),
    ("cascade-queue-errors", "queue send/receive errors (%)", lambda s, p: _pct(s.get("queue_error_ratio"))),
    ("cascade-login", "console login p99 (s)", lambda s, p: s.get("login_p99_s")),
)


def _secs(x: float | None) -> str:
    return "—" if x is None else f"{x:g} s"


def _pct(x: float | None) -> float | None:
    return None if x is None else 100 * x


def _rate(sample: dict, prev: dict | None, attempt: str) -> float | None:
    if prev is None or sample["t"] <= prev["t"]:
        return None
    now, before = (sample.get("renewal_attempts_total") or {}), (prev.get("renewal_attempts_total") or {})
    if attempt not in now or attempt not in before:
        return None
    return max(0.0, now[attempt] - before[attempt]) / (sample["t"] - prev["t"])


def fault_windows(journal: dict[str, Any]) -> list[tuple[float, float, str]]:
    end = journal["samples"][-1]["t"] if journal["samples"] else 0.0
    return [
        (r["at_s"], min(end, r["at_s"] + r["duration_s"]), r["fault"])
        for r in records(journal)
        if r["kind"] == "fault" and r.get("passed") and r.get("duration_s")
    ]


def draw(journal: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    samples = journal["samples"]
    ts = [s["t"] for s in samples]
    windows = fault_windows(journal)
    moves = journal["player_actions"]
    paths = []
    for name, label, value in SERIES:
        ys = [value(s, samples[i - 1] if i else None) for i, s in enumerate(samples)]
        if name.startswith("cascade-") and all(y is None for y in ys):
            continue  # that service does not run in this lab (the compose stack has none yet)
        fig, ax = plt.subplots(figsize=(11, 3.2))
        ax.plot(ts, [float("nan") if y is None else y for y in ys], lw=1.5, color="#2c3e50", label=label)
        if name == "renewal-latency" and samples:
            ax.axhline(samples[-1].get("allowance_s") or 0, color="#c0392b", ls="--", lw=1.2, label="allowance")
        if name == "customer-errors":
            ax.axhline(55, color="#7f8c8d", ls=":", lw=1, label="2015: about 55%")
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


MARKS = {  # what each lane shows, and how
    "page": ("v", "#c0392b", "page"),
    "ack": ("o", "#8e44ad", "ack"),
    "move": ("s", "#27ae60", "move"),
    "failed": ("X", "#c0392b", "failed move"),
    "post": ("*", "#2980b9", "status post"),
}


def role_events(journal: dict[str, Any]) -> list[tuple[float, str, str, str]]:
    """(t, lane, mark, label): every page, ack, move and post, in the lane of its role."""
    out = [(p["t"], p["role"], "page", p["alert"]) for p in journal.get("pages", []) if p["status"] == "firing"]
    for a in journal["player_actions"]:
        lane = acted_as(a) or "anyone"
        if a["action"] == "ack":
            out.append((a["t"], lane, "ack", str(a["args"].get("alert", ""))))
        elif a["action"] == "post-status":
            out.append((a["t"], lane, "post", str(a["args"].get("severity", ""))))
        elif a.get("fault"):
            out.append(
                (a["t"], lane, "move" if a["ok"] else "failed", a["action"] + (f" {a['args'].get('fix')}" if a["args"].get("fix") else ""))
            )
    return sorted(out)


def draw_roles(journal: dict[str, Any], out: Path) -> Path | None:
    """The debrief: customers' errors on top, one lane per role below with its pages, acks,
    moves and posts."""
    plt = pyplot()
    events = role_events(journal)
    if not events:
        return None
    lanes = [r for r in (*ROLES, "lab", "anyone") if any(e[1] == r for e in events)]
    samples = journal["samples"]
    fig, (top, low) = plt.subplots(2, 1, figsize=(11, 2.4 + 0.7 * len(lanes)), sharex=True, height_ratios=(1.2, 0.45 * len(lanes) + 0.4))
    errors = [_pct(s.get("customer_error_ratio")) for s in samples]
    top.plot([s["t"] for s in samples], [float("nan") if x is None else x for x in errors], color="#2c3e50", lw=1.3)
    top.set_ylabel("customer errors (%)", fontsize=8)
    top.grid(alpha=0.3)
    for start, stop, fault in fault_windows(journal):
        top.axvspan(start, stop, color="#f39c12" if fault == "blip" else "#f5b7b1", alpha=0.35, lw=0)
    seen: set[str] = set()
    count = dict.fromkeys(lanes, 0)
    for t, lane, mark, label in events:
        shape, color, name = MARKS[mark]
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


def write_html(journal: dict[str, Any], comparison: list[dict], score: dict, pngs: list[Path], out: Path) -> Path:
    e = html.escape
    rows = [
        f"<tr class={'ok' if r['passed'] else 'bad'}><td>{r['at_s']:.1f}</td><td>{e(r['name'])}</td>"
        f"<td>{e(r['kind'])}</td><td>{e(str(r.get('expect', r.get('fault') or r.get('action') or '')))}</td>"
        f"<td>{e(str(r.get('detail', '')))}</td><td>{'pass' if r['passed'] else 'FAIL'}</td></tr>"
        for r in records(journal)
    ]

    def said(message: str) -> str:  # a move's last line (an empty note says so)
        return (message.strip().splitlines() or ["(no message)"])[-1]

    moves = "".join(
        f"<li>{m['t']:.1f} s: <b>{e(m['action'])}</b> {e(str(m['args']))} — {e(said(m['message']))}</li>" for m in journal["player_actions"]
    )

    def compared(rows: list[dict]) -> str:
        head = f"<tr><th>what</th><th>20 September 2015</th><th>at the lab's pace (÷{TIME_COMPRESSION:g})</th><th>this run</th></tr>"
        return (
            f"<table>{head}"
            + "".join(
                f"<tr><td>{e(c['what'])}</td><td>{e(c['in_2015'])}</td><td>{e(c.get('at_lab_pace') or '')}</td><td>{e(c['lab'])}</td></tr>"
                for c in rows
            )
            + "</table>"
        )

    checked = journal.get("validity", {"valid": True, "invalid_reasons": []})
    validity = (
        "valid run (the host kept up)"
        if checked["valid"]
        else "<b>INVALID RUN</b>: the host, not the model, shaped it: " + "; ".join(e(reason) for reason in checked["invalid_reasons"])
    )
    scores = "".join(f"<tr><td>{e(k.replace('_', ' '))}</td><td>{e(str(v))}</td></tr>" for k, v in score.items())
    cards = journal.get("roles", {})
    figures = list(next(iter(cards.values()), {}))
    role_table = (
        "<table><tr><th>role</th>"
        + "".join(f"<th>{e(f.replace('_', ' '))}</th>" for f in figures)
        + "</tr>"
        + "".join(f"<tr><td>{e(r)}</td>" + "".join(f"<td>{e(str(c[f]))}</td>" for f in figures) + "</tr>" for r, c in cards.items())
        + "</table>"
        if cards
        else "<p>no role was paged and none moved</p>"
    )
    timeline = "".join(
        f"<tr><td>{t:.1f}</td><td>{e(lane)}</td><td>{e(MARKS[mark][2])}</td><td>{e(label)}</td></tr>"
        for t, lane, mark, label in role_events(journal)
    )
    posted = journal.get("status_page", {})
    posts = "".join(
        f"<li>{a['t']:.1f} s, {e(str(a.get('role') or 'a responder'))}: "
        f"<b>{e(str(a['args'].get('severity')))}</b> {e(str(a['args'].get('text')))}</li>"
        for a in journal["player_actions"]
        if a["action"] == "post-status" and a["ok"]
    )
    seed = "".join(
        f"<tr><td>{e(r['in_2015'])}</td><td>{e(r['what'])}</td><td>{r['after_blip_2015_min']} min</td><td>{r['at_lab_pace_s']:g} s</td>"
        f"<td>{_secs(r['lab_after_blip_s'])}</td></tr>"
        for r in journal.get("seed_timeline", [])
    )
    debrief = f"""<h2>The debrief: each role</h2>{role_table}
<p>Time to detect: the role's first page after the onset to its first move; time to ack: that page to its ack.</p>
{'<p><img src="roles.png" alt="roles"></p>' if (out / "roles.png").exists() else ""}
<table><tr><th>s</th><th>role</th><th>what</th><th></th></tr>{timeline}</table>
<h2>The status page</h2><p>{posted.get("posts", 0)} post(s); the first {posted.get("time_to_post_s")} s after the onset;
tables whose customers failed: {e(", ".join(posted.get("impacted_tables", [])[:8]) or "none")};
named in the posts: <b>{e(", ".join(posted.get("tables_named", [])) or "none")}</b>
(AWS: "a low overall error rate can hide high error rates for a few customers").</p><ul>{posts or "<li>nothing posted</li>"}</ul>
<h2>The seed's timeline beside the lab's</h2><table><tr><th>20 September 2015</th><th>what</th><th>after the blip</th>
<th>at the lab's pace</th><th>this run, after the blip</th></tr>{seed}</table>"""
    images = "".join(f'<p><img src="{p.name}" alt="{p.stem}"></p>' for p in pngs if not p.stem.startswith("cascade-"))
    cascade = "".join(f'<p><img src="{p.name}" alt="{p.stem}"></p>' for p in pngs if p.stem.startswith("cascade-"))
    page = f"""<!doctype html><meta charset=utf-8><title>{e(journal["title"])}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}td,th{{padding:2px 8px;text-align:left}}
tr.bad{{background:#fadbd8}}img{{max-width:100%}}</style>
<h1>{e(journal["title"])}</h1>
<p>Outcome: <b>{e(journal["outcome"])}</b> · speed {journal["speed"]:g}× · seed {journal.get("seed")} ·
{"autopilot" if journal["autopilot"] else "players"} · {validity}</p>
<h2>2015 beside the lab</h2>{compared([c for c in comparison if not c.get("cascade")])}
<h2>Score</h2><table>{scores}</table>
{debrief}
<h2>Timeline</h2><table><tr><th>s</th><th>step</th><th>kind</th><th>what</th><th>measured</th><th></th></tr>{"".join(rows)}</table>
<h2>Operator moves</h2><ul>{moves or "<li>none</li>"}</ul>
<h2>What happened</h2><p>Shaded: fault windows (orange: the blip). Dash-dot lines: operator moves (red: failed).</p>{images}
<h2>The cascade</h2><p>The services whose control planes live in the lab's tables, from their own metrics: scaling's
table is on the big-membership nodes (the storm reaches it first; its backlog drains after), metrics enriches
datapoints from it (gaps), queues and the console's lookup live on ordinary nodes (they fail once the fleet is
held back). Their times beside 2015's (the lab's profile runs about {TIME_COMPRESSION:g} times faster than 2015):</p>
{compared([c for c in comparison if c.get("cascade")])}{cascade or "<p>not running in this lab</p>"}
"""
    path = out / "report.html"
    path.write_text(page)
    return path
