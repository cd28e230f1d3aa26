"""What the runner tells the room when a game day ends: the outcome, the account beside the lab, the
score, each role's card, the status page and where the report is (pure: text from a scored
journal)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stormlab.scenarios import scoring


def text(journal: dict[str, Any], standing: tuple[Path, int, int] | None, team: str, page: Path, journal_path: Path) -> str:
    """The closing lines; ``standing``: the leaderboard's file, this run's rank and the board's size."""
    lines = [f"\n{journal['title']}: {journal['outcome'].upper()}", *_validity(journal["validity"])]
    lines += [f"  FINDING: {finding}" for finding in journal.get("findings", [])]
    lines += _compared(journal["comparison"], year(journal))
    lines.append("  score: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in journal["score"].items()))
    for role, card in journal["roles"].items():
        lines.append(f"  {role:<9} " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in card.items()))
    lines.append(_status_page(journal["status_page"]))
    lines += [_inject(i) for i in journal.get("injects", [])]
    lines += [f"  held by the facilitator at {h['at_s']:g} s of the game for {h['held_s']:g} s" for h in journal.get("holds", [])]
    if standing:
        path, rank, size = standing
        lines.append(f"  leaderboard ({path}): #{rank} of {size}" + (f" for team {team}" if team else ""))
    lines += [f"  did not hold: {name}" for name in missed(journal)]
    lines.append(f"  report: {page}\n  journal: {journal_path}")
    return "\n".join(lines)


def missed(journal: dict[str, Any]) -> list[str]:
    """Each step, watch or move that did not hold, with why: last among the closing lines, so the
    tail of a log (CI's) says why a run failed. An operator phase that recovered but missed a watch
    is named by the watch alone."""
    return [
        f"{r['name']} ({r['kind']}): {r.get('detail') or 'failed'}"
        for r in scoring.records(journal)
        if r.get("passed") is False and not (r["kind"] == "operator" and r.get("recovered_after_s") is not None)
    ]


def _validity(checked: dict[str, Any]) -> list[str]:
    if checked["valid"]:
        return []
    return [
        "  INVALID RUN: the host, not the model, shaped it; its figures are not the storm's",
        *(f"    because {reason}" for reason in checked["invalid_reasons"]),
    ]


def year(journal: dict[str, Any]) -> str:
    """The account's year, as a column of figures is labelled (2015 for journals written before accounts)."""
    return scoring.told(journal)["date"].split()[-1]


def _compared(comparison: list[dict[str, Any]], then_label: str = "2015") -> list[str]:
    """The account beside the lab, one line per moment, in aligned columns."""
    then = [c["in_2015"] + (f" (at this run's pace: {c['at_lab_pace']})" if c.get("at_lab_pace") else "") for c in comparison]
    what, width = max((len(c["what"]) for c in comparison), default=0), max(map(len, then), default=0)
    return [
        f"  {c['what']:<{what}}  {then_label}: {in_2015:<{width}}  here: {c['lab']}" for c, in_2015 in zip(comparison, then, strict=True)
    ]


def _inject(i: dict[str, Any]) -> str:
    verdict = (
        f"answered after {i['answer_s']:g} s"
        if i["answered"]
        else f"answered late, after {i['answer_s']:g} s"
        if i["answer_s"] is not None
        else "not answered"
    )
    return f"  inject {i['name']!r} to {i['to']} at {i['fired_s']:g} s (expected: {i['answer']} within {i['within_s']:g} s): {verdict}"


def _status_page(posted: dict[str, Any]) -> str:
    return (
        f"  status page: {posted['posts']} post(s), first {posted['time_to_post_s']} s after the onset, "
        f"impacted tables named: {', '.join(posted['tables_named']) or 'none'} "
        f"(impacted: {', '.join(posted['impacted_tables'][:5]) or 'none'})"
    )
