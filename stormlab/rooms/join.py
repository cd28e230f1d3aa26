"""The join page a facilitator projects for a class: each team's role links as text and as a QR
code, so each player opens their own console from their own machine (a phone's camera will do).

The page holds every role's token: it is served only with the facilitator's token (the console's
``/join``, its links fetched with her token), and it says so on the screen."""

from __future__ import annotations

import html

import segno

from stormlab.responder.moves import ROLES


def qr_svg(text: str) -> str:
    """``text`` as a QR code, an inline SVG (error correction M: legible off a projector)."""
    return segno.make(text, error="m").svg_inline(scale=3, border=2)


def links_html(links: dict[str, dict[str, str]]) -> str:
    """Each team's roles: the link as text, and its QR code; a team without a game says so."""
    e = html.escape
    parts = []
    for team, roles in links.items():
        if not roles:
            parts.append(f"<section><h2>{e(team)}</h2><p>no game on in this team's lab yet: `stormlab room play` first</p></section>")
            continue
        cards = "".join(card(role, link) for role, link in roles.items())
        parts.append(f"<section><h2>{e(team)}</h2><div class='roles'>{cards}</div></section>")
    return "".join(parts)


def card(role: str, link: str) -> str:
    """One role's link, as its QR code and as text."""
    e = html.escape
    oncall = ROLES.get(role, "")
    return f"<figure>{qr_svg(link)}<figcaption><b>{e(role)}</b>: {e(oncall)}<br><code>{e(link)}</code></figcaption></figure>"


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>stormlab room: join</title>
<style>body{font:15px system-ui,sans-serif;margin:1.5em} .roles{display:flex;flex-wrap:wrap;gap:1.5em}
figure{margin:0;width:16em} figcaption{word-break:break-all;font-size:12px} #said{color:#a00}</style></head><body>
<h1>Join your team's game</h1>
<p>Each role opens its own link (or scans its code). The links hold the roles' tokens: show this page to the class only.</p>
<p id="said"></p><div id="teams"></div>
<script>
const token = new URLSearchParams(location.hash.slice(1)).get("token") || "";
async function load() {
  const r = await fetch("/join/links", {headers: {"Authorization": "Bearer " + token}});
  if (r.status === 200) { document.getElementById("teams").innerHTML = await r.text(); document.getElementById("said").textContent = ""; }
  else document.getElementById("said").textContent = "open this page with the facilitator's token: /join#token=… (room/facilitator)";
}
load();
setInterval(load, 10000);
</script></body></html>"""
