"""The facilitator's console of a training room (`stormlab room console`): every team side by side.

    GET  /            the page: each team's customers' error over the last minutes (one curve a
                      team), nodes serving, validity; it refreshes itself every 2 s
    GET  /room.json   {"room": the card, "teams": each team's last reading, "history": each
                      team's [seconds since the console started, customers' error] pairs}
    POST /halt        end every fault lease in every team's lab (the facilitator's token as a
                      Bearer token: `room up` writes it to room/facilitator)

Reading needs no token; a control does: a missing or wrong token is a 401 and nothing changes.
"""

from __future__ import annotations

import asyncio
import hmac
import html
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from aiohttp import web

from stormcore.web import json_error, json_errors

log = logging.getLogger(__name__)
HISTORY = 150  # readings kept per team (5 minutes at one every 2 s)
EVERY_S = 2.0
Read = Callable[[], Coroutine[Any, Any, dict[str, dict[str, Any] | None]]]


class Console:
    """The room as the facilitator sees it: the last reading of each team and each one's curve."""

    def __init__(self, card: dict[str, Any], read: Read, halt: Callable[[], dict[str, tuple[int, list[str]]]], token: str) -> None:
        self.card, self.read, self.halt, self.token = card, read, halt, token
        self.started = time.monotonic()
        self.last: dict[str, dict[str, Any] | None] = {team: None for team in card["teams"]}
        self.history: dict[str, deque[tuple[float, float]]] = {team: deque(maxlen=HISTORY) for team in card["teams"]}

    async def sample(self) -> None:
        self.last = await self.read()
        at = round(time.monotonic() - self.started, 1)
        for team, snap in self.last.items():
            if snap and snap.get("customer_error_ratio") is not None:
                self.history[team].append((at, snap["customer_error_ratio"]))

    def document(self) -> dict[str, Any]:
        return {"room": self.card, "teams": self.last, "history": {t: list(h) for t, h in self.history.items()}}

    def page(self) -> str:
        e = html.escape
        rows = []
        for team, snap in self.last.items():
            if snap is None:
                rows.append(f"<tr><td>{e(team)}</td><td colspan='4'>not up</td></tr>")
                continue
            error = snap.get("customer_error_ratio")
            valid = "valid" if not snap.get("invalid") else "INVALID: " + "; ".join(snap["invalid"])
            rows.append(
                f"<tr><td>{e(team)}</td><td>{snap['nodes_serving']}/{snap['nodes_total']}</td>"
                f"<td>{'n/a' if error is None else f'{error:.1%}'}</td><td>{e(valid)}</td>"
                f"<td>{curve(list(self.history[team]))}</td></tr>"
            )
        sizing = self.card["sizing"]
        return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="2"><title>stormlab room</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em}} td,th{{border:1px solid #ccc;padding:.3em .6em}}
table{{border-collapse:collapse}}</style></head><body>
<h1>Training room: {sizing["teams"]} teams</h1>
<p>Each team's lab: {sizing["nodes"]:,} nodes at speed {sizing["speed"]:g}, one profile, one seed. Customers' error is the last 10 s;
the curve the last {HISTORY * EVERY_S / 60:g} minutes (0 to 100%).</p>
<table><tr><th>team</th><th>nodes serving</th><th>customers failing</th><th>validity</th><th>customers' error</th></tr>
{"".join(rows)}</table></body></html>"""


def curve(points: list[tuple[float, float]], width: int = 300, height: int = 40) -> str:
    """A team's error over time as a small SVG line (0 at the bottom, 100% at the top)."""
    if len(points) < 2:
        return ""
    t0, t1 = points[0][0], points[-1][0]
    span = max(t1 - t0, 1e-9)
    xy = " ".join(f"{(t - t0) / span * width:.1f},{height - min(1.0, max(0.0, v)) * height:.1f}" for t, v in points)
    return (
        f"<svg width='{width}' height='{height}' viewBox='0 0 {width} {height}'>"
        f"<polyline fill='none' stroke='#c0392b' stroke-width='1.5' points='{xy}'/></svg>"
    )


def app(console: Console) -> web.Application:
    expected = f"Bearer {console.token}".encode()

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=console.page(), content_type="text/html")

    async def document(request: web.Request) -> web.Response:
        return web.json_response(console.document())

    async def halt(request: web.Request) -> web.Response:
        if not hmac.compare_digest(request.headers.get("Authorization", "").encode(), expected):
            return json_error(401, "unauthorized", "the room's controls take the facilitator's token (room/facilitator) as a Bearer token")
        done = await asyncio.to_thread(console.halt)
        return web.json_response(
            {"halted": {team: count for team, (count, _) in done.items()}, "unanswered": {t: f for t, (_, f) in done.items() if f}}
        )

    async def sampling(served: web.Application) -> AsyncIterator[None]:
        async def loop() -> None:
            while True:
                try:
                    await console.sample()
                except Exception:  # a lab going down mid-read: the next reading says so; the console goes on
                    log.exception("reading the room failed")
                await asyncio.sleep(EVERY_S)

        task = asyncio.create_task(loop())
        yield
        task.cancel()

    served = web.Application(middlewares=[json_errors])
    served.router.add_get("/", page)
    served.router.add_get("/room.json", document)
    served.router.add_post("/halt", halt)
    served.cleanup_ctx.append(sampling)
    return served
