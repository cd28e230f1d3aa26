"""The post-game report's HTML page, section by section, from a scored journal (pure: text in,
text out; ``report.write`` puts it on disk beside the PNGs it shows)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from chaos.fault_lease import describe_effect
from stormlab.responder.moves import EVENT_NAMES, role_events
from stormlab.scenarios.scoring import records, told

e = html.escape
STYLE = """body{font-family:sans-serif;max-width:1100px;margin:2em auto}td,th{padding:2px 8px;text-align:left}
tr.bad{background:#fadbd8}img{max-width:100%}"""


def page(journal: dict[str, Any], pngs: list[Path], roles_png: Path | None) -> str:
    """The whole page: outcome, 2015 beside the lab, score, the debrief, the timeline, the moves,
    the series and the cascade."""
    comparison = journal["comparison"]
    return f"""<!doctype html><meta charset=utf-8><title>{e(journal["title"])}</title>
<style>{STYLE}</style>
<h1>{e(journal["title"])}</h1>
<p>Outcome: <b>{e(journal["outcome"])}</b> · speed {journal["speed"]:g}× · seed {journal.get("seed")} ·
{"autopilot" if journal["autopilot"] else "players"} · {validity(journal)}</p>
{findings(journal)}
<h2>{e(told(journal)["date"])} beside the lab</h2>{compared([c for c in comparison if not c.get("cascade")], told(journal)["date"])}
<h2>Score</h2><table>{pairs(journal["score"])}</table>
{debrief(journal, roles_png)}
<h2>Timeline</h2><table><tr><th>s</th><th>step</th><th>kind</th><th>what</th><th>measured</th><th></th></tr>{steps(journal)}</table>
<h2>Operator moves</h2><ul>{moves(journal) or "<li>none</li>"}</ul>
<h2>What happened</h2><p>Shaded: fault windows (orange: the blip). Dash-dot lines: operator moves (red: failed).</p>
{images(p for p in pngs if not p.stem.startswith("cascade-"))}
{cascade(journal, [p for p in pngs if p.stem.startswith("cascade-")])}
"""


def findings(journal: dict[str, Any]) -> str:
    found = journal.get("findings", [])
    return f"<h2>Findings</h2><ul>{''.join(f'<li><b>{e(f)}</b></li>' for f in found)}</ul>" if found else ""


def validity(journal: dict[str, Any]) -> str:
    checked = journal.get("validity", {"valid": True, "invalid_reasons": []})
    if checked["valid"]:
        return "valid run (the host kept up)"
    return "<b>INVALID RUN</b>: the host, not the model, shaped it: " + "; ".join(e(reason) for reason in checked["invalid_reasons"])


def compared(rows: list[dict[str, Any]], date: str = "20 September 2015") -> str:
    head = f"<tr><th>what</th><th>{e(date)}</th><th>at this run's pace (derived)</th><th>this run</th></tr>"
    body = "".join(
        f"<tr><td>{e(c['what'])}</td><td>{e(c['in_2015'])}</td><td>{e(c.get('at_lab_pace') or '')}</td><td>{e(c['lab'])}</td></tr>"
        for c in rows
    )
    return f"<table>{head}{body}</table>"


def pairs(figures: dict[str, Any]) -> str:
    return "".join(f"<tr><td>{e(k.replace('_', ' '))}</td><td>{e(str(v))}</td></tr>" for k, v in figures.items())


def role_cards(cards: dict[str, dict[str, Any]]) -> str:
    if not cards:
        return "<p>no role was paged and none moved</p>"
    figures = list(next(iter(cards.values())))
    head = "<tr><th>role</th>" + "".join(f"<th>{e(f.replace('_', ' '))}</th>" for f in figures) + "</tr>"
    body = "".join(f"<tr><td>{e(r)}</td>" + "".join(f"<td>{e(str(c[f]))}</td>" for f in figures) + "</tr>" for r, c in cards.items())
    return f"<table>{head}{body}</table>"


def debrief(journal: dict[str, Any], roles_png: Path | None) -> str:
    """Each role's card and lane, the status page, and the seed's timeline beside the lab's."""
    timeline = "".join(
        f"<tr><td>{t:.1f}</td><td>{e(lane)}</td><td>{e(EVENT_NAMES[mark])}</td><td>{e(label)}</td></tr>"
        for t, lane, mark, label in role_events(journal)
    )
    picture = f'<p><img src="{roles_png.name}" alt="roles"></p>' if roles_png else ""
    a = told(journal)
    t = e(a["trigger"])
    return f"""<h2>The debrief: each role</h2>{role_cards(journal.get("roles", {}))}
<p>Time to detect: the role's first page after the onset to its first move; time to ack: that page to its ack.</p>
{picture}
<table><tr><th>s</th><th>role</th><th>what</th><th></th></tr>{timeline}</table>
{status_page(journal)}
<h2>The account's timeline beside the lab's</h2>
<p>Each moment as a fraction of its own {t} to recovery ({e(a["span"])} in the account), so the order and
the spans compare without assuming a pace; the account's moment at this run's pace is derived from the two
spans ({pace_words(journal)}).</p>
<table><tr><th>{e(a["date"])}</th><th>what</th><th>after the {t}</th><th>of {t}→recovered</th>
<th>at this run's pace</th><th>this run, after the {t}</th><th>of {t}→recovered</th></tr>{seed_rows(journal)}</table>"""


def status_page(journal: dict[str, Any]) -> str:
    posted = journal.get("status_page", {})
    posts = "".join(
        f"<li>{a['t']:.1f} s, {e(str(a.get('role') or 'a responder'))}: "
        f"<b>{e(str(a['args'].get('severity')))}</b> {e(str(a['args'].get('text')))}</li>"
        for a in journal["player_actions"]
        if a["action"] == "post-status" and a["ok"]
    )
    return f"""<h2>The status page</h2><p>{posted.get("posts", 0)} post(s); the first {posted.get("time_to_post_s")} s after the onset;
tables whose customers failed: {e(", ".join(posted.get("impacted_tables", [])[:8]) or "none")};
named in the posts: <b>{e(", ".join(posted.get("tables_named", [])) or "none")}</b>
(AWS: "a low overall error rate can hide high error rates for a few customers").</p><ul>{posts or "<li>nothing posted</li>"}</ul>"""


def seed_rows(journal: dict[str, Any]) -> str:
    def secs(x: float | None) -> str:
        return "—" if x is None else f"{x:g} s"

    def share(x: float | None) -> str:
        return "—" if x is None else f"{x:.2f}"

    return "".join(
        f"<tr><td>{e(r['in_2015'])}</td><td>{e(r['what'])}</td><td>{r['after_blip_2015_min']} min</td><td>{share(r['fraction_2015'])}</td>"
        f"<td>{secs(r['at_run_pace_s'])}</td><td>{secs(r['lab_after_blip_s'])}</td><td>{share(r['fraction_lab'])}</td></tr>"
        for r in journal.get("seed_timeline", [])
    )


def pace_words(journal: dict[str, Any]) -> str:
    pace = journal.get("pace")
    return "this run did not recover: no pace" if pace is None else f"this run played it {pace:.0f} times faster than the account"


def steps(journal: dict[str, Any]) -> str:
    return "".join(
        f"<tr class={'ok' if r['passed'] else 'bad'}><td>{r['at_s']:.1f}</td><td>{e(r['name'])}</td>"
        f"<td>{e(r['kind'])}</td><td>{e(str(r.get('expect', r.get('fault') or r.get('action') or '')))}</td>"
        f"<td>{e(measured(r))}</td><td>{'pass' if r['passed'] else 'FAIL'}</td></tr>"
        for r in records(journal)
    )


def measured(record: dict[str, Any]) -> str:
    """A step's detail, and for a fault on traffic what its lease did."""
    detail = str(record.get("detail", ""))
    effect = record.get("effect")
    return detail if effect is None or "NO EFFECT" in detail else f"{detail} · {describe_effect(effect)}"


def moves(journal: dict[str, Any]) -> str:
    def said(message: str) -> str:  # a move's last line (an empty note says so)
        return (message.strip().splitlines() or ["(no message)"])[-1]

    return "".join(
        f"<li>{m['t']:.1f} s: <b>{e(m['action'])}</b> {e(str(m['args']))} — {e(said(m['message']))}</li>" for m in journal["player_actions"]
    )


def images(pngs: Any) -> str:
    return "".join(f'<p><img src="{p.name}" alt="{p.stem}"></p>' for p in pngs)


def cascade(journal: dict[str, Any], pngs: list[Path]) -> str:
    return f"""<h2>The cascade</h2><p>The services whose control planes live in the lab's tables, from their own metrics: every
table is spread over the whole fleet, so in the storm the calls whose rows sit on disqualified nodes fail: scaling's
API for some of its groups (its backlog drains after), metrics' enrichment of those groups (gaps), the console's
lookup for some users (they wait it out); the queues serve such rows from their cache while their other refreshes
succeed. Once the fleet is held back, every table fails. Their times beside 2015's, at this run's pace
({pace_words(journal)}, derived from its blip to recovery):</p>
{compared([c for c in journal["comparison"] if c.get("cascade")])}{images(pngs) or "<p>not running in this lab</p>"}"""
