"""The game day's desk: the pages the on-call roles get, and the status page customers read.

Pages are Alertmanager's webhook bodies: on compose Alertmanager posts them to the desk the
runner serves (``POST /alertmanager``, routed per role by the ``role`` label); without Docker the
runner evaluates the same alerts itself (stormlab/gameday/alerts.py) and records the same bodies. Each
alert of a body becomes one line of ``pages.jsonl`` in the lab's state directory, where
`stormlab ops ack` finds what a role may acknowledge.

The status page is the posts `stormlab ops post-status` journals (ops-journal.jsonl), newest
first: ``GET /`` for people, ``GET /status.json`` for machines.

    POST /alertmanager   Alertmanager's webhook (the lab token as a Bearer token, when set)
    GET  /               the status page
    GET  /status.json    {"posts": [...], "pages": [...]}
"""

from __future__ import annotations

import hmac
import html
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiohttp import web

from chaos import journal
from stormcore.errors import LabError
from stormcore.web import BadRequest, json_error, json_errors, read_object

PAGES = "pages.jsonl"
DEFAULT_PORT = 8709


def pages_path(directory: Path) -> Path:
    return directory / PAGES


def record_webhook(directory: Path, body: dict[str, Any], via: str) -> list[dict[str, Any]]:
    """Alertmanager's webhook body as page records (one per alert); a body of the wrong shape
    raises ValueError and records nothing."""
    alerts = body.get("alerts")
    if not isinstance(alerts, list) or not all(isinstance(a, dict) and isinstance(a.get("labels"), dict) for a in alerts):
        raise ValueError("alerts must be a list of alerts with labels")
    now = time.time()
    out = []
    for alert in alerts:
        labels, notes = alert["labels"], alert.get("annotations") if isinstance(alert.get("annotations"), dict) else {}
        name = labels.get("alertname")
        if not isinstance(name, str) or not name:
            raise ValueError("every alert needs labels.alertname")
        out.append(
            {
                "at": now,
                "alert": name,
                "role": str(labels.get("role") or "lab"),
                "severity": str(labels.get("severity") or ""),
                "status": "resolved" if alert.get("status") == "resolved" else "firing",
                "summary": str(notes.get("summary") or ""),
                "labels": {str(k): str(v) for k, v in labels.items()},
                "via": via,
            }
        )
    path = pages_path(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.writelines(json.dumps(p) + "\n" for p in out)
    return out


def read_pages(directory: Path, since: float = 0.0) -> list[dict[str, Any]]:
    path = pages_path(directory)
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            page = json.loads(line)
        except ValueError:
            continue
        if isinstance(page, dict) and isinstance(page.get("at"), (int, float)) and page["at"] >= since:
            out.append(page)
    return out


def unacked(directory: Path, role: str | None, since: float = 0.0) -> list[dict[str, Any]]:
    """The pages firing for ``role`` (any role: None) that no ack of that role answered yet,
    oldest first. An ack answers the newest page of its alert before it."""
    acks = [e for e in journal.read_journal(directory, since) if e.get("action") == "ack" and e.get("ok")]
    out = []
    for page in read_pages(directory, since):
        if page["status"] != "firing" or (role is not None and page["role"] != role):
            continue
        answered = any(
            a["at"] >= page["at"] and a.get("role") == page["role"] and a.get("args", {}).get("alert") == page["alert"] for a in acks
        )
        if not answered:
            out.append(page)
    return out


def posts(directory: Path, since: float = 0.0) -> list[dict[str, Any]]:
    """The status page's posts, oldest first."""
    return [e for e in journal.read_journal(directory, since) if e.get("action") == "post-status" and e.get("ok")]


def status_page(directory: Path, since: float = 0.0, title: str = "stormlab status") -> str:
    e = html.escape
    rows = "".join(
        f"<article class={e(str(p['args'].get('severity', '')))}><h3>{e(str(p['args'].get('severity', '')))} · "
        f"{time.strftime('%H:%M:%S', time.localtime(p['at']))}</h3><p>{e(str(p['args'].get('text', '')))}</p>"
        f"<small>posted by {e(str(p.get('role') or 'a responder'))}</small></article>"
        for p in reversed(posts(directory, since))
    )
    return f"""<!doctype html><meta charset=utf-8><meta http-equiv=refresh content=5><title>{e(title)}</title>
<style>body{{font-family:sans-serif;max-width:800px;margin:2em auto}}article{{border-left:6px solid #95a5a6;padding:0 1em;margin:1em 0}}
.degraded{{border-color:#f1c40f}}.partial-outage{{border-color:#e67e22}}.major-outage{{border-color:#c0392b}}.resolved{{border-color:#27ae60}}</style>
<h1>{e(title)}</h1>{rows or "<p>All systems operational (nothing posted).</p>"}"""


def app(directory: Path, token: str, since: float, title: str, on_page: Callable[[dict[str, Any]], None] | None = None) -> web.Application:
    expected = f"Bearer {token}".encode()

    async def alertmanager(request: web.Request) -> web.Response:
        if token and not hmac.compare_digest(request.headers.get("Authorization", "").encode(), expected):
            return json_error(401, "unauthorized", "the desk takes pages with the lab token as a Bearer token")
        body = await read_object(request)
        try:
            recorded = record_webhook(directory, body, via="alertmanager")
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        if on_page is not None:
            for page in recorded:
                on_page(page)
        return web.json_response({"recorded": len(recorded)})

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=status_page(directory, since, title), content_type="text/html")

    async def status(request: web.Request) -> web.Response:
        return web.json_response({"posts": posts(directory, since), "pages": read_pages(directory, since)})

    desk = web.Application(middlewares=[json_errors])
    desk.router.add_post("/alertmanager", alertmanager)
    desk.router.add_get("/", page)
    desk.router.add_get("/status.json", status)
    return desk


@asynccontextmanager
async def serving(
    directory: Path, host: str, port: int, token: str, since: float, title: str, on_page: Callable[[dict[str, Any]], None] | None = None
) -> AsyncIterator[str]:
    """The desk on ``host:port`` while the block runs (``on_page`` hears each page it takes); yields its URL."""
    runner = web.AppRunner(app(directory, token, since, title, on_page), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise LabError(f"the desk cannot listen on {host}:{port}: {exc.strerror} (--desk-port picks another)") from None
    bound = runner.addresses[0][1] if runner.addresses else port
    try:
        yield f"http://{host}:{bound}"
    finally:
        await runner.cleanup()
