"""The game day's desk: the pages the on-call roles get, the journal of their moves, and the
status page customers read.

Pages are Alertmanager's webhook bodies: on compose Alertmanager posts them to the desk the runner
serves (``POST /alertmanager``, routed per role by the ``role`` label); without Docker the runner
evaluates the same alerts itself (stormlab/responder/alerts.py) and records the same bodies. Each
alert of a body becomes one page.

While a game lasts the desk is the one writer of the game's record: a ``Desk`` keeps the pages it
took and the moves it journaled in memory (and appends them to ``pages.jsonl`` and
``ops-journal.jsonl`` for the record), answers "what waits for my ack" and the status page from
memory, and the game is scored from them: a line another process appends to those files changes
nothing. Outside a game the same questions are answered from the files (``unacked``, ``posts``).
Its web side is ``stormlab/responder/desk_web.py``.
"""

from __future__ import annotations

import html
import logging
import time
from pathlib import Path
from typing import Any

from chaos import journal
from chaos.journal import Journal
from stormcore import jsonlog
from stormcore.auth import whose

ANSWERS = ("ack", "post", "note")  # what an inject expects back: its ack, a status post, a note
TEAM = "team"  # an inject to every role of the team
LIVE_MAX_MESSAGE = 1000  # characters of an inject typed live

PAGES = "pages.jsonl"
DEFAULT_PORT = 8709
log = logging.getLogger(__name__)


def pages_path(directory: Path) -> Path:
    return directory / PAGES


def parse_webhook(body: dict[str, Any], via: str, at: float, mono: float) -> list[dict[str, Any]]:
    """Alertmanager's webhook body as page records (one per alert); a body of the wrong shape
    raises ValueError and records nothing."""
    alerts = body.get("alerts")
    if not isinstance(alerts, list) or not all(isinstance(a, dict) and isinstance(a.get("labels"), dict) for a in alerts):
        raise ValueError("alerts must be a list of alerts with labels")
    out = []
    for alert in alerts:
        labels, notes = alert["labels"], alert.get("annotations", {})
        name = labels.get("alertname")
        if not isinstance(name, str) or not name:
            raise ValueError("every alert needs labels.alertname")
        if not isinstance(notes, dict) or alert.get("status", "firing") not in ("firing", "resolved"):
            raise ValueError("an alert's annotations are an object and its status firing or resolved, as Alertmanager sends them")
        out.append(
            {
                "at": at,
                "mono": mono,
                "alert": name,
                "role": str(labels.get("role") or "lab"),
                "severity": str(labels.get("severity") or ""),
                "status": "resolved" if alert.get("status") == "resolved" else "firing",
                "summary": str(notes.get("summary") or ""),
                "labels": {str(k): str(v) for k, v in labels.items()},
                "via": via,
            }
        )
    return out


def record_webhook(directory: Path, body: dict[str, Any], via: str) -> list[dict[str, Any]]:
    """A webhook body's pages into the pages file (outside a game's desk)."""
    out = parse_webhook(body, via, time.time(), time.monotonic())
    jsonlog.append(pages_path(directory), out)
    return out


def read_pages(directory: Path, since: float = 0.0) -> list[dict[str, Any]]:
    return [p for p in jsonlog.read(pages_path(directory)) if isinstance(p.get("at"), (int, float)) and p["at"] >= since]


def _before(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether ``a`` came no later than ``b``: by the monotonic clock where both have it."""
    return a["mono"] <= b["mono"] if "mono" in a and "mono" in b else a["at"] <= b["at"]


def unanswered(pages: list[dict[str, Any]], entries: list[dict[str, Any]], role: str | None) -> list[dict[str, Any]]:
    """The pages firing for ``role`` (any role: None) that no ack answered yet, oldest first. An
    ack answers its role's pages of its alert paged before it (an ack with no role, outside a
    game, answers any role's)."""
    acks = [e for e in entries if e.get("action") == "ack" and e.get("ok")]
    out = []
    for page in pages:
        if page.get("status") != "firing" or (role is not None and page.get("role") != role):
            continue
        answered = any(
            _before(page, a) and a.get("role") in (None, page.get("role")) and a.get("args", {}).get("alert") == page.get("alert")
            for a in acks
        )
        if not answered:
            out.append(page)
    return out


def unacked(directory: Path, role: str | None, since: float = 0.0) -> list[dict[str, Any]]:
    """The unanswered pages, from the files (outside a game's desk)."""
    return unanswered(read_pages(directory, since), journal.read_journal(directory, since), role)


def posts_in(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The status page's posts, oldest first."""
    return [e for e in entries if e.get("action") == "post-status" and e.get("ok")]


def posts(directory: Path, since: float = 0.0) -> list[dict[str, Any]]:
    return posts_in(journal.read_journal(directory, since))


class Desk:
    """The record of one game: the pages it took, the moves it journaled, the roles' tokens."""

    def __init__(self, directory: Path, title: str, roles: dict[str, str] | None = None, team: str = "") -> None:
        self.directory, self.title, self.team = directory, title, team
        self.journal = Journal(directory, remember=True)
        self.pages: list[dict[str, Any]] = []
        self.roles = dict(roles or {})  # role -> its token

    def page(self, body: dict[str, Any], via: str) -> list[dict[str, Any]]:
        """Takes a webhook body's pages (ValueError: the wrong shape, nothing taken)."""
        taken = parse_webhook(body, via, self.journal.wall(), self.journal.mono())
        self.pages += taken
        try:
            jsonlog.append(pages_path(self.directory), taken)
        except OSError as exc:  # the desk holds them: the game goes on
            log.error("pages not written to %s (kept in memory): %s", self.directory, exc)
        return taken

    def unacked(self, role: str | None) -> list[dict[str, Any]]:
        return unanswered(self.pages, self.journal.kept, role)

    def posts(self) -> list[dict[str, Any]]:
        return posts_in(self.journal.kept)

    def role_of(self, authorization: str) -> str | None:
        """The role whose token a ``Bearer`` header carries, or None."""
        return whose(authorization, self.roles)

    def status_page(self) -> str:
        return status_page(self.posts(), self.title)


def status_page(posted: list[dict[str, Any]], title: str = "stormlab status") -> str:
    e = html.escape
    rows = "".join(
        f"<article class={e(str(p['args'].get('severity', '')))}><h3>{e(str(p['args'].get('severity', '')))} · "
        f"{time.strftime('%H:%M:%S', time.localtime(p['at']))}</h3><p>{e(str(p['args'].get('text', '')))}</p>"
        f"<small>posted by {e(str(p.get('role') or 'a responder'))}</small></article>"
        for p in reversed(posted)
    )
    return f"""<!doctype html><meta charset=utf-8><meta http-equiv=refresh content=5><title>{e(title)}</title>
<style>body{{font-family:sans-serif;max-width:800px;margin:2em auto}}article{{border-left:6px solid #95a5a6;padding:0 1em;margin:1em 0}}
.degraded{{border-color:#f1c40f}}.partial-outage{{border-color:#e67e22}}.major-outage{{border-color:#c0392b}}.resolved{{border-color:#27ae60}}</style>
<h1>{e(title)}</h1>{rows or "<p>All systems operational (nothing posted).</p>"}"""
