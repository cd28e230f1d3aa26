"""What a game day measured: moments, the seed-vs-lab table, the players' score. Pure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chaos.fault_lease import describe_effect
from stormcore import incidents
from stormcore.incidents import Account
from stormlab.engine.reading import CASCADE_PROBES, Reading, headline, readings
from stormlab.engine.story import Sample, host_fields, host_figures, invalid_reasons
from stormlab.responder.desk import TEAM
from stormlab.responder.moves import INJECT, ROLES, acted_as, is_move
from stormlab.scenarios.scenario import Scenario, one_table


def records(journal: dict[str, Any]) -> list[dict[str, Any]]:
    """Every step's record, the autopilot's moves in place after their operator step."""
    return [r for s in journal["steps"] for r in (s, *s.get("autopilot", []))]


def judged_effects(journal: dict[str, Any], effect_of: Callable[[dict[str, Any]], dict[str, Any] | None]) -> dict[str, Any]:
    """Each fault step with what its lease did (``effect_of``: the lab's answer once it ended); a
    fault on traffic that did nothing fails its step and is a finding: a run whose blip cut nothing
    did not play the incident, whatever its expectations say."""
    findings = []
    for r in records(journal):
        if not r.get("lease"):
            continue
        found = effect_of(r["lease"])
        r["effect"] = None if found is None else found["effect"]
        if found is not None and found["no_effect"]:
            r["passed"] = False
            r["detail"] = f"{r.get('detail', '')} — {describe_effect(found['effect'])}".strip(" —")
            findings.append(f"{r['name']} ({r.get('fault')}) had no effect: it met no traffic to drop or hold back")
    outcome = "failed" if findings and journal["outcome"] in ("passed", "deviated") else journal["outcome"]
    return journal | {"findings": findings, "outcome": outcome}


def moments(journal: dict[str, Any]) -> dict[str, float]:
    """When each step happened: a fault or action when it was taken, an expectation when it
    was met, the operator phase when the lab recovered."""
    out = {}
    for r in records(journal):
        if r["kind"] == "expect" and r.get("passed"):
            out[r["name"]] = r["at_s"] + r["met_after_s"]
        elif r["kind"] == "operator":
            if r.get("recovered_after_s") is not None:
                out[r["name"]] = r["started_s"] + r["recovered_after_s"]
        elif r["kind"] in ("fault", "action", "wait"):
            out[r["name"]] = r["at_s"]
    return out


def compare(scenario: Scenario, journal: dict[str, Any]) -> list[dict[str, Any]]:
    """The seed's numbers beside the lab's; a span of 2015 time also at this run's pace (derived:
    2015's blip to recovery over this run's; none when it did not recover), and whether the row is
    about the cascade."""
    when = moments(journal)
    pace = run_pace(scenario, journal)
    own = account_of(scenario).own
    by_name = {r["name"]: r for r in records(journal)}
    rows = []
    for c in scenario.compare:
        kind, _, ref = c.measure.partition(":")
        if kind == "mean":
            mean = by_name.get(ref, {}).get("mean")
            probe = by_name.get(ref, {}).get("expect", "").split()[0] if mean is not None else ""
            lab = None if mean is None else _value(probe, mean)
        elif kind == "window":
            a, b = c.steps()
            lab = window(journal, when.get(a), when.get(b), c.probe or "")
        else:
            a, b = ref.split("..")
            lab = f"{when[b] - when[a]:.0f} s" if a in when and b in when else None
        paced = None if c.span_2015_s is None or pace is None else f"{c.span_2015_s / pace:.0f} s"
        checks = [step.check for s in c.steps() if (step := scenario.find(s)) is not None]
        per_table = one_table(c.probe or "")[1] is not None
        probes = [p for p in (c.probe, *(check.probe for check in checks if check is not None)) if p and not p.startswith(own)]
        cascade = per_table or any(p in CASCADE_PROBES for p in probes)
        rows.append({"what": c.what, "in_2015": c.in_2015, "at_lab_pace": paced, "lab": lab or "not measured", "cascade": cascade})
    return rows


def _value(probe: str, x: float) -> str:
    return f"{100 * x:.1f}%" if probe.endswith("ratio") else f"{x:.3g}" + (" s" if probe.endswith("_s") else "")


def window(journal: dict[str, Any], start: float | None, end: float | None, probe: str) -> str | None:
    """A probe over the samples between two moments: its mean and its worst, not one reading
    (``table_error_ratio=TABLE``: that table's customers' error)."""
    if start is None or end is None:
        return None
    name, table = one_table(probe)
    values = [v for x in readings(journal["samples"]) if start <= x.t <= end and (v := x.probe(name, table)) is not None]
    if not values:
        return None
    return f"mean {_value(name, sum(values) / len(values))}, worst {_value(name, max(values))}"


def error_minutes(samples: list[Reading], probe: str = "customer_error_ratio") -> float:
    """Error-minutes: an error ratio (the customers', or ``probe``) integrated over the run (lab minutes)."""
    total = 0.0
    for a, b in zip(samples, samples[1:], strict=False):
        ea, eb = a.probe(probe), b.probe(probe)
        if ea is not None and eb is not None:
            total += (ea + eb) / 2 * (b.t - a.t)
    return total / 60


def score(scenario: Scenario, journal: dict[str, Any]) -> dict[str, Any]:
    when = moments(journal)
    onset = when.get(scenario.onset_step) if scenario.onset_step else None
    operator = next((r for r in journal["steps"] if r["kind"] == "operator"), None)
    players = journal["player_actions"]
    samples = readings(journal["samples"])
    recovered = when.get(operator["name"]) if operator else None
    in_phase = [a for a in players if operator and a["t"] >= operator["started_s"] and is_move(a)]
    # the team detected: its first page after the onset, to the first move any role made after it
    # (each role's own page to its own move is on its card); with no pages, the first look at
    # `ops status`, as before pages existed
    page = next((p for p in alerts(journal) if p["status"] == "firing" and onset is not None and p["t"] >= onset), None)
    if page is not None:
        detect = _first_after([a for a in players if a["ok"] and is_move(a)], page)
        detect_s = None if detect is None else round(detect - page["t"], 1)
    else:
        detect = next((a["t"] for a in players if onset is not None and a["t"] >= onset and a["action"] == "status"), None)
        detect_s = None if detect is None or onset is None else round(detect - onset, 1)
    return {
        "onset_s": None if onset is None else round(onset, 1),
        "time_to_detect_s": detect_s,
        "time_to_mitigate_s": None if recovered is None or onset is None else round(recovered - onset, 1),
        "customer_error_minutes": round(error_minutes(samples), 3),
        # the lease manager's lab (aws-2025-10): its customers' launches
        **({"launch_error_minutes": round(error_minutes(samples, LAUNCHES), 3)} if headline(samples) == LAUNCHES else {}),
        "actions_taken": len(in_phase),
        "failed_actions": sum(1 for a in in_phase if not a["ok"]),
        "recovered": recovered is not None,
        "injects_fired": len(journal.get("injects", [])),
        "injects_answered": sum(1 for i in injects(journal) if i["answered"]),
    }


def alerts(journal: dict[str, Any]) -> list[dict[str, Any]]:
    """The pages the alerts raised (an inject is delivered as a page, and scored as an inject)."""
    return [p for p in journal.get("pages", []) if p.get("via") != INJECT]


def injects(journal: dict[str, Any]) -> list[dict[str, Any]]:
    """Each inject that fired, with whether it was answered as it asked within its time: an ack
    naming it, a status post (naming a table whose customers failed, if it asked), or a note; by its
    role, or for a team's inject by anyone. ``answer_s``: how long the first such answer took (one
    after the time allowed is late: not answered)."""
    impacted = impacted_tables(journal, 0.0)
    out = []
    for i in journal.get("injects", []):
        first = next((a for a in journal["player_actions"] if answers(i, a, impacted)), None)
        took = None if first is None else round(first["t"] - i["fired_s"], 1)
        out.append(i | {"answered": first is not None and first["t"] <= i["due_s"], "answer_s": took})
    return out


def answers(inject: dict[str, Any], entry: dict[str, Any], impacted: dict[str, float]) -> bool:
    """Whether a journal entry answers an inject as it asked (after it fired, by whom it was sent to)."""
    if not entry["ok"] or entry["t"] < inject["fired_s"] or inject["to"] not in (TEAM, acted_as(entry)):
        return False
    if inject["answer"] == "ack":
        return entry["action"] == "ack" and entry["args"].get("alert") == inject["name"]
    if inject["answer"] == "post":
        text = str(entry["args"].get("text", "")).lower()
        return entry["action"] == "post-status" and (not inject["names_tables"] or any(t.lower() in text for t in impacted))
    return entry["action"] == "note"


def impacted_tables(journal: dict[str, Any], since: float) -> dict[str, float]:
    """The tables whose customers failed (over IMPACTED) after ``since``, and each one's worst."""
    hit: dict[str, float] = {}
    for s in readings(journal["samples"]):
        if s.t >= since:
            for table, ratio in s.table_error_ratio.items():
                if ratio is not None and ratio > IMPACTED:
                    hit[table] = max(hit.get(table, 0.0), ratio)
    return hit


def scored(scenario: Scenario, journal: dict[str, Any], period_s: float) -> dict[str, Any]:
    """The journal with everything the debrief reads: the seed-vs-lab table, the score, each
    role's card, the status page, the seed's timeline and the validity (``period_s``: the
    renewal period of the lab that ran, wall-clock seconds)."""
    onset = score(scenario, journal)["onset_s"]
    return journal | {
        "comparison": compare(scenario, journal),
        "score": score(scenario, journal),
        "roles": roles(journal, onset),
        "status_page": status_page(journal, onset),
        "injects": injects(journal),
        "seed_timeline": seed_timeline(scenario, journal),
        "account": account_of(scenario).card(),
        "pace": run_pace(scenario, journal),
        "validity": validity(journal, period_s),
    }


def validity(journal: dict[str, Any], period_s: float) -> dict[str, Any]:
    """The demo's validity check on a game day's samples (wall-clock seconds; ``period_s``: the
    run's renewal period). The herd is the 3 periods after the first blip; the whole-run lag p99
    is not in a game day's samples, so its 10 s windows are judged."""
    raw = readings(journal["samples"])
    if not raw:
        return {"valid": True, "invalid_reasons": []}
    samples = [Sample(r.t, 0, 0, 0, 0, None, None, r.loop_lag_p99_s or 0.0, **host_fields(r)) for r in raw]
    allowance = max((r.allowance_s or 0.0 for r in raw), default=0.0)
    blip = next((r["at_s"] for r in records(journal) if r.get("fault") == "blip"), None)
    reasons = invalid_reasons(samples, 0.0, blip, allowance, period_s) if allowance else []
    return {"valid": not reasons, "invalid_reasons": reasons, **host_figures(samples, 0.0)}


def roles(journal: dict[str, Any], onset: float | None) -> dict[str, dict[str, Any]]:
    """The score card of each on-call role that was paged or moved: its pages, how soon it
    acknowledged the first page after the onset, and time to detect: that page to the role's
    first move (a lease on its service)."""
    pages = [p for p in alerts(journal) if p["status"] == "firing"]
    actions = journal["player_actions"]
    cards = {}
    for role in ROLES:
        mine = [p for p in pages if p["role"] == role]
        acts = [a for a in actions if acted_as(a) == role]
        if not mine and not acts:
            continue
        first = next((p for p in mine if onset is None or p["t"] >= onset), mine[0] if mine else None)
        acks = [a for a in acts if a["action"] == "ack" and a["ok"]]
        moves = [a for a in acts if is_move(a)]
        ack_at = _first_after(acks, first)
        move_at = _first_after([m for m in moves if m["ok"]], first)
        cards[role] = {
            "pages": len(mine),
            "first_page": first["alert"] if first else None,
            "first_page_s": None if first is None else round(first["t"], 1),
            "time_to_ack_s": None if ack_at is None or first is None else round(ack_at - first["t"], 1),
            "time_to_detect_s": None if move_at is None or first is None else round(move_at - first["t"], 1),
            "moves": len(moves),
            "failed_moves": sum(1 for m in moves if not m["ok"]),
            "acks": len(acks),
            "posts": sum(1 for a in acts if a["action"] == "post-status" and a["ok"]),
        }
    return cards


def _first_after(entries: list[dict[str, Any]], page: dict[str, Any] | None) -> float | None:
    return None if page is None else next((e["t"] for e in entries if e["t"] >= page["t"]), None)


IMPACTED = 0.05  # a table whose error ratio went above this after the onset had customers failing


def status_page(journal: dict[str, Any], onset: float | None) -> dict[str, Any]:
    """The communication score: how soon after the onset the first post went up, and whether
    the posts named the tables whose customers failed (the Monday tail: a low overall error
    rate can hide a few customers' high one)."""
    posted = [a for a in journal["player_actions"] if a["action"] == "post-status" and a["ok"]]
    hit = {} if onset is None else impacted_tables(journal, onset)
    words = " ".join(str(p["args"].get("text", "")).lower() for p in posted)
    named = sorted(t for t in hit if t.lower() in words)
    first = next((p["t"] for p in posted if onset is None or p["t"] >= onset), None)
    return {
        "posts": len(posted),
        "time_to_post_s": None if first is None or onset is None else round(first - onset, 1),
        "impacted_tables": sorted(hit, key=lambda t: -hit[t]),
        "tables_named": named,
        "impact_named": bool(named),
    }


LAUNCHES = "launch_error_ratio"
ACCOUNTS: dict[str, Account] = {i.name: i.account for i in incidents.REGISTERED}  # each incident's (stormcore/incidents/)


def account_of(scenario: Scenario) -> Account:
    """The account a scenario tells (its settings' incident: its profile's, unless it sets one)."""
    return ACCOUNTS[scenario.settings.incident]


def incident_of(journal: dict[str, Any]) -> incidents.Incident:
    """The incident a scored journal was set beside, known by its account's card (the first
    incident's for journals written before accounts)."""
    card = told(journal)
    return next((i for i in incidents.REGISTERED if i.account.card() == card), incidents.FIRST)


def told(journal: dict[str, Any]) -> dict[str, str]:
    """The account a scored journal was set beside (2015's for journals written before accounts)."""
    return journal.get("account") or incidents.FIRST.account.card()


def blip_and_recovery(scenario: Scenario, journal: dict[str, Any]) -> tuple[float | None, float | None]:
    """When the run's trigger came (2015's blip; the account's first fault) and when it recovered
    (the first operator phase's recovery)."""
    trigger = account_of(scenario).trigger
    blip = next((r["at_s"] for r in records(journal) if r.get("fault") == trigger and r.get("passed")), None)
    operator = next((r for r in journal["steps"] if r["kind"] == "operator"), None)
    return blip, moments(journal).get(operator["name"]) if operator else None


def run_pace(scenario: Scenario, journal: dict[str, Any]) -> float | None:
    """How many times faster than the account this run played the incident, derived: the account's
    trigger to recovery (2015: 4 h 51 min) over this run's (None: it did not recover, or had no trigger)."""
    blip, recovered = blip_and_recovery(scenario, journal)
    if blip is None or recovered is None or recovered <= blip:
        return None
    return account_of(scenario).recovered_min * 60 / (recovered - blip)


def seed_timeline(scenario: Scenario, journal: dict[str, Any]) -> list[dict[str, Any]]:
    """The seed's timeline beside the lab's: each moment after the blip in 2015 and in this run, and
    both as a fraction of their own blip to recovery, so the order and the spans compare without
    assuming a pace; 2015's moment at this run's pace (derived, see ``run_pace``) beside them."""
    when = moments(journal)
    blip, recovered = blip_and_recovery(scenario, journal)
    pace = run_pace(scenario, journal)
    moves = [a for a in journal["player_actions"] if a["ok"]]  # the autopilot's moves are journaled like the players'
    account = account_of(scenario)
    found = {
        f"fault:{account.trigger}": blip,
        "onset": when.get(scenario.onset_step) if scenario.onset_step else None,
        "recovered": recovered,
    }
    span = None if pace is None or blip is None or recovered is None else recovered - blip
    rows = []
    for minutes, clock, what, mark in account.rows:
        kind, _, name = mark.partition(":")
        if kind == "page":
            at = next((p["t"] for p in journal.get("pages", []) if p["alert"] == name and p["status"] == "firing"), None)
        elif kind == "move":
            at = min((m["t"] for m in moves if m["action"] == name), default=None)
        elif kind == "step":
            at = when.get(name)
        else:
            at = found.get(mark)
        after = None if at is None or blip is None else round(at - blip, 1)
        rows.append(
            {
                "in_2015": clock,
                "what": what,
                "after_blip_2015_min": minutes,
                "fraction_2015": round(minutes / account.recovered_min, 2),
                "at_run_pace_s": None if pace is None else round(minutes * 60 / pace, 1),
                "lab_after_blip_s": after,
                "fraction_lab": None if after is None or not span else round(after / span, 2),
            }
        )
    return rows
