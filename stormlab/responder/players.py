"""The players' console: a page per team role, served by the game's desk (``GET /play``).

A player opens it with the role's token in the address's fragment (``/play#token=…``: the fragment
never leaves the browser, so the token is in no server's log); the page sends it as a Bearer token.
It shows the role's pages (each with its ack), its moves as forms (each form one ``POST /moves``,
the same move ``stormlab ops --as ROLE`` makes, with the same refusals and the same journal), the
status page's editor, the team's timeline and the links to the status page. Which forms a role
gets is :func:`moves_for` (pure): its own moves and everyone's, their fields from the fault
catalog's arguments.
"""

from __future__ import annotations

from typing import Any

from chaos import catalog
from stormlab.responder.moves import ACTIONS, EVERYONE, SEVERITIES, owner_of

SHOWN_EVERYONE = ("post-status", "note")  # everyone's moves with a form (ack is on each page; status is the page itself)


CELL = {"name": "cell", "kind": "integer", "help": "a cell's number, in a lab of cells (empty: the whole lab)"}


def fields(action: str, fix: str | None = None) -> list[dict[str, Any]]:
    """A move's form fields: each argument it takes, with the catalog's help, kind and choices."""
    spec = ACTIONS[action]
    fault = catalog.FAULTS.get(fix or spec.fault or "")
    args = {a.name: a for a in fault.args} if fault else {}
    out = []
    for key in spec.keys:
        if key == "fix":
            continue
        if key == "cell":
            out.append(CELL)
            continue
        arg = args.get(key) or args.get(f"{key}_s")
        assert arg is not None, f"the catalog has every argument of {action}'s lease ({key})"
        field: dict[str, Any] = {"name": key, "kind": arg.kind, "help": arg.help}
        if arg.choices:
            field["choices"] = ([] if arg.required else [""]) + [str(c) for c in arg.choices]
        out.append(field)
    return out


def moves_for(role: str) -> list[dict[str, Any]]:
    """The forms the ``role``'s console shows: each move of its service (an ``enable`` per fix it
    owns), then the status post and the note everyone makes."""
    out: list[dict[str, Any]] = []
    for name, spec in ACTIONS.items():
        if name in EVERYONE:
            continue
        for fix in spec.fixes or (None,):
            args = {"fix": fix} if fix else {}
            if owner_of(spec, args) == role:
                title = f"{name} {fix}" if fix else name
                out.append({"action": name, "fix": fix, "title": title, "help": spec.help, "fields": fields(name, fix)})
    out.append(
        {
            "action": "post-status",
            "fix": None,
            "title": "post to the status page",
            "help": ACTIONS["post-status"].help,
            "fields": [
                {"name": "severity", "kind": "text", "help": "how bad, as customers read it", "choices": list(SEVERITIES)},
                {"name": "text", "kind": "long-text", "help": "what customers are told: which tables, what fails"},
            ],
        }
    )
    out.append(
        {
            "action": "note",
            "fix": None,
            "title": "note",
            "help": ACTIONS["note"].help,
            "fields": [{"name": "text", "kind": "text", "help": ""}],
        }
    )
    return out


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>stormlab: on-call</title>
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;max-width:1100px}
h1{font-size:1.3em} section{border:1px solid #ccc;border-radius:4px;padding:.5em 1em;margin:.8em 0}
.page{background:#fdecea;border-left:5px solid #c0392b;padding:.4em .8em;margin:.4em 0}
form{display:inline-block;vertical-align:top;border:1px solid #ddd;padding:.5em;margin:.3em;min-width:220px}
label{display:block;margin:.2em 0} small{color:#666} #said.ok{color:#1e7e34} #said.refused{color:#c0392b}
table{border-collapse:collapse} td{border-bottom:1px solid #eee;padding:.15em .5em}
</style></head><body>
<h1 id="who">on-call</h1>
<p id="said" role="status"></p>
<p id="held" class="page" hidden>ON HOLD: the facilitator has stopped the game's clock. Moves on the lab wait until it goes on;
acks, notes and status posts do not. The lab runs on.</p>
<section><h2>Your pages</h2><div id="pages"><p>none</p></div></section>
<section><h2>Your monitoring</h2><p id="mon-mode"><small>loading</small></p><table id="monitoring"></table></section>
<section><h2>The team's timeline</h2><table id="timeline"></table></section>
<section><h2>Your moves</h2><div id="moves"></div></section>
<section><h2>Links</h2><a href="/">the status page</a> · <a href="/game.json">the game, as JSON</a>
<p id="dashboards"></p></section>
<script>
const token = new URLSearchParams(location.hash.slice(1)).get("token") || "";
const auth = {"Authorization": "Bearer " + token};
let me = null;
function say(text, ok) { const s = document.getElementById("said"); s.textContent = text; s.className = ok ? "ok" : "refused"; }
async function move(action, args) {
  const r = await fetch("/moves", {method: "POST", headers: {...auth, "Content-Type": "application/json"},
                                   body: JSON.stringify({action: action, args: args, as: me.role})});
  const body = await r.json();
  if (r.status === 200) say((body.ok ? "done: " : "failed: ") + body.message, body.ok);
  else say("refused (" + r.status + "): " + body.message, false);
  await refresh();
}
function field(f) {
  const id = "f-" + Math.random().toString(36).slice(2);
  let input;
  if (f.choices) {
    input = "<select name='" + f.name + "'>" + f.choices.map(c => "<option>" + c + "</option>").join("") + "</select>";
  } else if (f.kind === "flag") {
    input = "<input type='checkbox' name='" + f.name + "'>";
  } else if (f.kind === "long-text") {
    input = "<textarea name='" + f.name + "' rows='3' cols='30'></textarea>";
  } else {
    input = "<input name='" + f.name + "' size='10'>";
  }
  return "<label>" + f.name + " " + input + " <small>" + (f.help || "") + "</small></label>";
}
function forms(moves) {
  const box = document.getElementById("moves");
  box.innerHTML = "";
  for (const m of moves) {
    const form = document.createElement("form");
    form.dataset.move = m.title;
    form.innerHTML = "<b>" + m.title + "</b><br><small>" + m.help + "</small>" + m.fields.map(field).join("") +
                     "<button type='submit'>" + m.title + "</button>";
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const args = m.fix ? {fix: m.fix} : {};
      for (const el of form.elements) {
        if (!el.name) continue;
        const kind = (m.fields.find(f => f.name === el.name) || {}).kind;
        if (el.type === "checkbox") { if (el.checked) args[el.name] = true; }
        else if (el.value.trim() === "") continue;
        else if (kind === "integer" || kind === "number") args[el.name] = Number(el.value.trim());
        else args[el.name] = el.value.trim();
      }
      await move(m.action, args);
    });
    box.appendChild(form);
  }
}
function cell(text) { const td = document.createElement("td"); td.textContent = text; return td; }
function spark(points, unit) {  // a probe's series, broken where a reading is missing (a gap)
  const w = 240, h = 32;
  if (points.length < 2) return "";
  const t0 = points[0][0], span = Math.max(points[points.length - 1][0] - t0, 1e-9);
  const top = unit === "ratio" ? 1 : Math.max(1, ...points.filter(p => p[1] !== null).map(p => p[1]));
  const runs = [[]];
  for (const [t, v] of points) {
    if (v === null) { runs.push([]); continue; }
    runs[runs.length - 1].push(((t - t0) / span * w).toFixed(1) + "," + (h - Math.min(1, v / top) * h).toFixed(1));
  }
  return "<svg width='" + w + "' height='" + h + "'>" + runs.filter(r => r.length).map(
    r => "<polyline fill='none' stroke='#2c3e50' stroke-width='1.3' points='" + r.join(" ") + "'/>").join("") + "</svg>";
}
function shown(v, unit) { return v === null ? "no data" : unit === "ratio" ? (100 * v).toFixed(1) + "%" : String(Math.round(v)); }
async function monitoring() {
  const r = await fetch("/monitoring.json", {headers: auth});
  if (r.status !== 200) return;
  const m = await r.json();
  document.getElementById("mon-mode").innerHTML = m.mode === "shared-fate"
    ? "<b>Read from the lab's own metrics service</b>, which shares the storm's fate (as CloudWatch did in 2015): " +
      "a gap is a reading it lost. " + Math.round(100 * m.gaps) + "% of the readings shown are missing."
    : "The lab's readings as the game takes them.";
  const rows = document.getElementById("monitoring");
  rows.innerHTML = "";
  for (const p of m.probes) {
    const points = m.series[p.probe];
    const last = points.length ? points[points.length - 1][1] : null;
    const tr = document.createElement("tr");
    tr.dataset.probe = p.probe;
    tr.appendChild(cell(p.what));
    tr.appendChild(cell(shown(last, p.unit)));
    const td = document.createElement("td"); td.innerHTML = spark(points, p.unit); tr.appendChild(td);
    rows.appendChild(tr);
  }
}
async function refresh() {
  const r = await fetch("/me", {headers: auth});
  if (r.status !== 200) { document.getElementById("who").textContent = "this address's token is not a role's in this game"; return; }
  const first = me === null;
  me = await r.json();
  if (first) {
    document.getElementById("who").textContent = me.team + " · " + me.role + " on-call · " + me.title;
    forms(me.moves);
    const boards = document.getElementById("dashboards");
    if (me.dashboards.length) {
      boards.textContent = "Your team's dashboards: ";
      me.dashboards.forEach((d, i) => {
        const a = document.createElement("a"); a.href = d.url; a.textContent = d.title; a.target = "_blank";
        if (i) boards.appendChild(document.createTextNode(" · "));
        boards.appendChild(a);
      });
    } else {
      boards.innerHTML = "<small>No dashboards: this lab runs without Grafana (a compose room's stacks have them); " +
                         "your monitoring above charts what you watch.</small>";
    }
  }
  const pages = document.getElementById("pages");
  pages.innerHTML = me.pages.length ? "" : "<p>none</p>";
  for (const p of me.pages) {
    const div = document.createElement("div");
    div.className = "page";
    div.textContent = p.alert + ": " + p.summary + " ";
    const b = document.createElement("button");
    b.textContent = "ack " + p.alert; b.dataset.alert = p.alert;
    b.addEventListener("click", () => move("ack", {alert: p.alert}));
    div.appendChild(b);
    pages.appendChild(div);
  }
  const g = await (await fetch("/game.json", {headers: auth})).json();
  document.getElementById("held").hidden = !g.held;
  await monitoring();
  const rows = document.getElementById("timeline");
  rows.innerHTML = "";
  for (const e of g.timeline) {
    const tr = document.createElement("tr");
    [e.t.toFixed(0) + " s", e.role || "", e.what, e.detail].forEach(x => tr.appendChild(cell(x)));
    rows.appendChild(tr);
  }
}
window.addEventListener("hashchange", () => location.reload());  // another role's link in this tab: that role's console
refresh();
setInterval(refresh, 2000);
</script></body></html>
"""
