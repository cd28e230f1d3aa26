"""The join page a facilitator projects for a class, and the seat pages its codes open.

The projected screen shows no secret: each role of each team is a claim code (its link as text and
as a QR code, so a phone's camera will do), good for the first browser that takes the seat
(stormlab/rooms/seats.py). The page is opened with the join token, which shows it and can do
nothing else (``room console`` prints it), and it clears the token from the address bar before
anything is drawn."""

from __future__ import annotations

import html

import segno

from stormlab.responder.moves import ROLES
from stormlab.rooms.seats import Shown


def qr_svg(text: str) -> str:
    """``text`` as a QR code, an inline SVG (error correction M: legible off a projector)."""
    return segno.make(text, error="m").svg_inline(scale=3, border=2)


def links_html(shown: list[Shown], base: str, games: dict[str, bool]) -> str:
    """Each team's seats: a free one's claim link as text and QR code, a taken one marked taken;
    a team without a game says so."""
    e = html.escape
    parts = []
    for team, on in games.items():
        if not on:
            parts.append(f"<section><h2>{e(team)}</h2><p>no game on in this team's lab yet: `stormlab room play` first</p></section>")
            continue
        cards = "".join(card(seat, base) for seat in shown if seat.team == team)
        parts.append(f"<section><h2>{e(team)}</h2><div class='roles'>{cards}</div></section>")
    return "".join(parts)


def card(seat: Shown, base: str) -> str:
    """One seat: its claim link as a QR code and as text, or that it is taken."""
    e = html.escape
    oncall = f"<b>{e(seat.role)}</b>: {e(ROLES.get(seat.role, ''))}"
    if seat.code is None:
        return f"<figure class='taken'><p>taken</p><figcaption>{oncall}</figcaption></figure>"
    link = f"{base}/seat/{seat.code}"
    return f"<figure>{qr_svg(link)}<figcaption>{oncall}<br><code>{e(link)}</code></figcaption></figure>"


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>stormlab room: join</title>
<style>body{font:15px system-ui,sans-serif;margin:1.5em} .roles{display:flex;flex-wrap:wrap;gap:1.5em}
figure{margin:0;width:16em} figcaption{word-break:break-all;font-size:12px} #said{color:#a00}
.taken p{font-size:20px;color:#777;margin:2em 0}</style></head><body>
<h1>Join your team's game</h1>
<p>Each player opens one link (or scans its code) and takes that seat: the first browser to take it is the seat's.
The facilitator can release a seat from the room's console.</p>
<p id="said"></p><div id="teams"></div>
<script>
// The token is kept for this tab and taken out of the address bar before anything is drawn.
const given = new URLSearchParams(location.hash.slice(1)).get("token");
if (given) sessionStorage.setItem("stormlab-join", given);
if (location.hash) history.replaceState(null, "", location.pathname);
const token = sessionStorage.getItem("stormlab-join") || "";
async function load() {
  const r = await fetch("/join/links", {headers: {"Authorization": "Bearer " + token}});
  if (r.status === 200) { document.getElementById("teams").innerHTML = await r.text(); document.getElementById("said").textContent = ""; }
  else document.getElementById("said").textContent = "open this page with the join token `stormlab room console` printed: /join#token=…";
}
load();
setInterval(load, 5000);
</script></body></html>"""


def seat_page(team: str, role: str, code: str, said: str = "") -> str:
    """What a player sees on opening a claim link: whose seat it is, and a button to take it (a
    plain GET takes nothing: a link preview or a scanner's look does not claim the seat)."""
    e = html.escape
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>stormlab: take your seat</title>
<style>body{{font:17px system-ui,sans-serif;margin:1.5em}} button{{font-size:20px;padding:.4em 1em}}</style></head><body>
<h1>{e(team)}: {e(role)}</h1><p>{e(ROLES.get(role, ""))}</p>
<form method="post" action="/seat/{e(code)}"><button type="submit">take this seat</button></form>
<p>{e(said)}</p></body></html>"""


def refused_page(title: str, said: str) -> str:
    e = html.escape
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>stormlab: {e(title)}</title>
<style>body{{font:17px system-ui,sans-serif;margin:1.5em}}</style></head><body><h1>{e(title)}</h1><p>{e(said)}</p></body></html>"""
