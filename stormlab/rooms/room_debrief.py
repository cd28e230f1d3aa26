"""The room's debrief: every team's game beside the others' and beside the incident's account.

`room end` (and `stormlab room debrief`) writes ``room/debrief.html`` and ``room/debrief.png``
from each team's newest scored journal (``room/games/TEAM/*/journal.json``): one chart with every
team's customers' error and its moves on the lab, a table of the account's moments (2015's time
after the blip, and as a share of its blip to recovery) beside each team's, and each team's score.
``seed_table`` and ``page`` only compute; ``newest_journals``, ``draw`` and ``write`` read and write."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from stormlab.artefacts.plotting import pyplot
from stormlab.engine.reading import headline, readings
from stormlab.responder.moves import is_move
from stormlab.scenarios.scoring import told

PAGE, CHART = "debrief.html", "debrief.png"
COLOURS = ("#c0392b", "#2980b9", "#27ae60", "#8e44ad", "#e67e22", "#16a085", "#7f8c8d", "#d35400")
SCORED = (  # the score's lines, in the order the room reads them: (label, how it reads from a journal)
    ("outcome", lambda j: j["outcome"]),
    ("recovered", lambda j: "yes" if j["score"].get("recovered") else "no"),
    ("customer error-minutes", lambda j: f"{j['score'].get('customer_error_minutes', 0):.2f}"),
    (LAUNCHES := "launch error-minutes", lambda j: f"{j['score'].get('launch_error_minutes', 0):.2f}"),  # the lease manager's games
    ("time to detect", lambda j: seconds(j["score"].get("time_to_detect_s"))),
    ("time to mitigate", lambda j: seconds(j["score"].get("time_to_mitigate_s"))),
    ("moves (failed)", lambda j: f"{j['score'].get('actions_taken', 0)} ({j['score'].get('failed_actions', 0)})"),
    ("injects answered", lambda j: f"{j['score'].get('injects_answered', 0)} of {j['score'].get('injects_fired', 0)}"),
    ("status posts", lambda j: str((j.get("status_page") or {}).get("posts", 0))),
    ("held", lambda j: ", ".join(f"{h['held_s']:g} s at {h['at_s']:g} s" for h in j.get("holds", [])) or "never"),
    ("valid", lambda j: "yes" if j.get("validity", {}).get("valid", True) else "NO: " + "; ".join(j["validity"]["invalid_reasons"])),
)


def newest_journals(games: Path, since: float = 0.0) -> dict[str, dict[str, Any]]:
    """Each team's newest scored journal under ``games`` (room/games/TEAM/RUN/journal.json), by
    team, written after ``since`` (epoch seconds: the room's game began; an earlier game's is not
    this one's). A journal that cannot be read is left out."""
    out = {}
    for team_dir in sorted(p for p in games.glob("*") if p.is_dir()):
        for run in sorted(team_dir.glob("*/journal.json"), reverse=True):
            try:
                if run.stat().st_mtime < since:
                    break
                out[team_dir.name] = json.loads(run.read_text())
                break
            except (OSError, ValueError):
                continue
    return out


def seed_table(journals: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The account's moments, each with 2015's time after the blip and every team's (seconds after
    its blip, and the share of its own blip to recovery: the order and the spans compare without a
    pace)."""
    teams = list(journals)
    first: list[dict[str, Any]] = next((j["seed_timeline"] for j in journals.values() if j.get("seed_timeline")), [])
    rows = []
    for i, moment in enumerate(first):
        row = {"in_2015": moment["in_2015"], "what": moment["what"], "min_2015": moment["after_blip_2015_min"]}
        row["share_2015"] = moment["fraction_2015"]
        row["teams"] = {}
        for team in teams:
            mine = journals[team].get("seed_timeline") or []
            at = mine[i] if i < len(mine) and mine[i]["what"] == moment["what"] else {}
            row["teams"][team] = (at.get("lab_after_blip_s"), at.get("fraction_lab"))
        rows.append(row)
    return rows


def draw(journals: dict[str, dict[str, Any]], out: Path) -> Path:
    """Every team's customers' error on one chart, its moves on the lab marked on its curve."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(11, 4))
    for (team, journal), colour in zip(journals.items(), COLOURS * 4, strict=False):
        samples = readings(journal["samples"])
        ts = [s.t for s in samples]
        judged = headline(samples)
        errors = [100 * (s.probe(judged) or 0.0) for s in samples]
        ax.plot(ts, errors, color=colour, lw=1.3, label=team)
        made = [a for a in journal["player_actions"] if is_move(a) and a.get("ok")]
        for n, move in enumerate(made):
            at = min(range(len(ts)), key=lambda k: abs(ts[k] - move["t"]), default=None)
            if at is not None:
                rise = (5, -11, 15, -21)[n % 4]  # moves in quick succession: their labels take turns above and below
                ax.scatter([move["t"]], [errors[at]], color=colour, marker="s", s=30, zorder=3)
                ax.annotate(move["action"], (move["t"], errors[at]), xytext=(3, rise), textcoords="offset points", fontsize=6, color=colour)
        for h in journal.get("holds", []):
            ax.axvline(h["at_s"], color="#7f8c8d", ls="--", lw=1)
    ax.set_xlabel("seconds of the game (held time left out)")
    ax.set_ylabel("customers failing (%), launches in the lease manager's games")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path = out / CHART
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def page(journals: dict[str, dict[str, Any]], chart: str = CHART) -> str:
    e = html.escape
    teams = list(journals)
    head = "".join(f"<th>{e(t)}</th>" for t in teams)
    seed = "".join(
        f"<tr><td>{e(r['in_2015'])}</td><td>{e(r['what'])}</td><td>{r['min_2015']} min ({r['share_2015']:.2f})</td>"
        + "".join(f"<td>{_moment(*r['teams'][t])}</td>" for t in teams)
        + "</tr>"
        for r in seed_table(journals)
    )
    launches = any("launch_error_minutes" in j["score"] for j in journals.values())
    score = "".join(
        f"<tr><td>{e(label)}</td>" + "".join(f"<td>{e(read(journals[t]))}</td>" for t in teams) + "</tr>"
        for label, read in SCORED
        if label != LAUNCHES or launches
    )
    title = next(iter(journals.values()))["title"] if journals else "no game"
    account = told(next(iter(journals.values()), {}))
    year, trigger = account["date"].split()[-1], e(account["trigger"])
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>stormlab room: debrief</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em;max-width:1200px}} td,th{{border:1px solid #ccc;padding:.3em .6em}}
table{{border-collapse:collapse;margin:.5em 0}} small{{color:#555}}</style></head><body>
<h1>The room's debrief: {e(title)}</h1>
<p>{len(teams)} team(s), one storm each (one profile, one seed). Each team's customers' error, and its moves on the lab:</p>
<img src="{e(chart)}" alt="every team's customers' error" width="990">
<h2>The teams beside each other</h2>
<table><tr><th></th>{head}</tr>{score}</table>
<h2>Beside the {year} account</h2>
<p><small>Each moment after the {trigger}: {year}'s in minutes, each team's in seconds; in brackets the share of its own {trigger} to
recovery ({e(account["span"])} in {year}), so the order and the spans compare whatever the pace. — : not reached in that game.</small></p>
<table><tr><th>{year}</th><th>what happened</th><th>after the {trigger}, {year}</th>{head}</tr>{seed}</table>
</body></html>"""


def write(home: Path, since: float = 0.0) -> Path | None:
    """The debrief of the room at ``home`` (room/), from its game's journals (written after ``since``);
    None if none was scored."""
    journals = newest_journals(home / "games", since)
    if not journals:
        return None
    draw(journals, home)
    path = home / PAGE
    path.write_text(page(journals))
    return path


def _moment(after: float | None, share: float | None) -> str:
    if after is None:
        return "—"
    return f"{after:g} s" + ("" if share is None else f" ({share:.2f})")


def seconds(value: float | None) -> str:
    """A time the score may not have (n/a), in seconds."""
    return "n/a" if value is None else f"{value:g} s"
