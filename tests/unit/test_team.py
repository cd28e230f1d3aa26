"""A team's game day, piece by piece: the alerts defined once (Prometheus's file and the
runner's own evaluation), roles and their moves, the desk (pages, acks, the status page), the
runner's stop conditions, second look at the steady state and progress, the score cards, and
the cascade's fixes switched at run time."""

import asyncio
import json
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, Gauge

from chaos import catalog, journal
from services.dependent import Switch, fix_on
from services.scaling.backlog import Activity, Backlog
from stormlab.cli import main
from stormlab.engine.reading import Reading
from stormlab.responder import alerts, desk, desk_web, monitoring, moves, players, roles
from stormlab.responder.moves import ACTIONS, ROLES, check_role
from stormlab.responder.runbook import Ops, first_look
from stormlab.scenarios import scoring
from stormlab.scenarios.reader import load
from stormlab.scenarios.runner import Runner
from stormlab.scenarios.scenario import ScenarioError, live_inject, schedule
from tests.unit.test_gameday_engine import ToyLab, VirtualClock, flagship

ROOT = Path(__file__).resolve().parents[2]


# -- the alerts, defined once -------------------------------------------------------------------


def test_prometheus_rule_file_is_written_from_the_one_definition():
    assert (ROOT / "prometheus/rules/alerts.yml").read_text() == alerts.rules_yaml(), (
        "run: python -m stormlab.responder.alerts > prometheus/rules/alerts.yml"
    )


def test_every_alert_carries_its_runbook_section_and_the_page_is_the_one_definition():
    page = (ROOT / "docs/alerts.md").read_text()
    assert page == alerts.runbook_markdown(), "run: python -m stormlab.responder.alerts --runbook > docs/alerts.md"
    rules = yaml.safe_load((ROOT / "prometheus/rules/alerts.yml").read_text())["groups"][0]["rules"]
    headings = {line[3:].lower() for line in page.splitlines() if line.startswith("## ")}
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        assert url == f"docs/alerts.md#{rule['alert'].lower()}" and url.split("#")[1] in headings


def test_every_role_is_paged_by_some_alert_and_every_paging_alert_has_a_local_form():
    assert {a.role for a in alerts.PAGING} == set(moves.ROLES)
    assert all(a.terms for a in alerts.PAGING)
    assert alerts.BY_NAME["TableSLOBurn"].promql() == (
        "table:stormlab_customer_errors:ratio_rate1m > 0.05 and on () (stormlab:customer_errors:ratio_rate1m < 0.01)"
    )
    assert (
        alerts.BY_NAME["MetricGaps"].promql() == "stormlab:metric_gaps:ratio_rate1m > 0.1 or stormlab:metric_put_errors:ratio_rate1m > 0.05"
    )


def test_the_runner_fires_an_alert_after_its_for_and_resolves_it_when_the_condition_ends():
    bodies = []
    storm = alerts.BY_NAME["RetryStorm"]
    ev = alerts.Evaluator(bodies.append, speed=2.0, alerts=[storm])  # for: 1m at speed 2 is 30 s
    sample = Reading(nodes_total=100, nodes_disqualified=15)
    for t in range(0, 30):
        ev.observe(float(t), sample, 1_000_000.0 + t)
    assert bodies == []
    ev.observe(30.0, sample, 1_000_030.0)
    [fired] = bodies
    assert fired["status"] == "firing" and fired["receiver"] == "database"
    [alert] = fired["alerts"]
    assert alert["labels"] == {"alertname": "RetryStorm", "severity": "critical", "role": "database"}
    assert alert["annotations"]["summary"] == "15% of storage nodes are disqualified"
    assert alert["annotations"]["runbook_url"] == "docs/alerts.md#retrystorm"  # as Alertmanager's page carries it
    ev.observe(31.0, sample, 1_000_031.0)
    assert len(bodies) == 1  # firing once, not once a sample
    ev.observe(32.0, Reading(nodes_total=100, nodes_disqualified=0), 1_000_032.0)
    assert bodies[-1]["status"] == "resolved" and bodies[-1]["alerts"][0]["endsAt"].endswith("Z")


def test_the_monday_tail_alert_names_its_table_and_needs_the_aggregate_low():
    bodies = []
    ev = alerts.Evaluator(bodies.append, alerts=[alerts.BY_NAME["TableSLOBurn"]])
    tail = Reading(customer_error_ratio=0.002, table_error_ratio={"metric-groups": 0.9, "catalog": 0.0})
    storm = Reading(customer_error_ratio=0.55, table_error_ratio={"metric-groups": 0.9, "catalog": 0.5})
    for t in range(0, 70):
        ev.observe(float(t), storm, float(t))
    assert bodies == []  # the aggregate is high: the fleet-wide alerts speak, not this one
    for t in range(70, 131):
        ev.observe(float(t), tail, float(t))
    [alert] = bodies[0]["alerts"]
    assert alert["labels"]["table"] == "metric-groups"
    assert alert["annotations"]["summary"] == "Table metric-groups: 90% of requests fail"


# -- roles and their moves ----------------------------------------------------------------------


def test_each_role_owns_its_services_moves_and_everyone_owns_the_rest():
    a = moves.ACTIONS
    assert moves.owner_of(a["pause-metadata"], {}) == "database"
    assert moves.owner_of(a["enable"], {"fix": "stale-cache"}) == "queues"
    assert moves.owner_of(a["enable"], {"fix": "short-timeout"}) == "console"
    assert moves.owner_of(a["scale-workers"], {"workers": 4}) == "scaling"
    assert moves.owner_of(a["post-status"], {}) is None
    moves.check_role("queues", a["enable"], {"fix": "stale-cache"})
    moves.check_role("queues", a["ack"], {})
    with pytest.raises(catalog.ChaosError, match="database on-call's move, not queues's"):
        moves.check_role("queues", a["pause-metadata"], {})
    with pytest.raises(catalog.ChaosError, match="unknown role"):
        moves.check_role("dba", a["status"], {})
    with pytest.raises(catalog.ChaosError, match="fix must be one of"):
        moves.fault_of(a["enable"], {"fix": "retry-storm"})
    assert moves.move_values(a["enable"], {"fix": "stale-cache", "duration": "1m"}) == {"duration": "1m"}


def test_a_fix_lease_wins_while_it_lasts_and_the_start_up_value_returns_after():
    gauge = Gauge("g", "g", registry=CollectorRegistry())
    changes = []
    switch = Switch(gauge, False, changes.append)
    first, second = object(), object()
    switch.hold(first, True)
    switch.hold(second, True)
    switch.release(first)
    assert switch.value is True and changes == [True]  # the other lease still holds it
    switch.release(second)
    assert switch.value is False and changes == [True, False] and gauge._value.get() == 0
    assert (fix_on(4), fix_on(1), fix_on(True), fix_on(False)) == (1, 0, 1, 0)


def test_scaling_the_workers_shares_the_backlog_out_again_keeping_each_groups_order():
    backlog = Backlog(1, False)
    for i in range(12):
        backlog.add(Activity(i, f"g-{i % 4}", i, float(i)))
    head = backlog.next_for(0)
    backlog.resize(4)
    assert len(backlog) == 12 and backlog.workers == 4
    for w in range(4):
        ids = [a.id for a in backlog.queues[w]]
        assert ids == sorted(ids)
        assert {backlog.worker_of(a.group) for a in backlog.queues[w]} <= {w}
    backlog.done(0, head)  # a worker that took it before the resize: found wherever it went
    assert len(backlog) == 11
    backlog.resize(1)
    assert [a.id for a in backlog.queues[0]] == list(range(1, 12))


def look(**snap) -> dict[str, str]:
    return dict(line.split(":", 1) for line in first_look(Reading.from_json({"nodes_total": 400, "allowance_s": 1.0} | snap)).splitlines())


def test_the_first_look_names_the_storm_and_its_runbook():
    storm = look(nodes_disqualified=220, metadata_processing_p99_s=0.9, cell_disqualified_fraction={"0": 0.55})
    assert storm["diagnosis"].strip().startswith("STORM: ") and "pause-metadata, set-capacity, resume --staged" in storm["diagnosis"]
    assert "cells" not in storm and "cell 0" not in storm["margin"]  # one cell: nothing about cells
    assert look(nodes_disqualified=0, metadata_processing_p99_s=0.7)["diagnosis"].strip().startswith("margin is thin")
    assert look(nodes_disqualified=0, metadata_processing_p99_s=0.2)["diagnosis"].strip() == "no storm"


def test_the_first_look_names_the_one_cell_that_storms_under_the_fleets_line():
    """One cell of 16 storming is 6% of the fleet, under RetryStorm's 10% line: the look says which
    cell (CellRetryStorm's line) and gives its runbook with --cell."""
    cells = {str(c): 0.0 for c in range(16)} | {"3": 1.0}
    seen = look(nodes_total=1600, nodes_disqualified=100, metadata_processing_p99_s=0.3, cell_disqualified_fraction=cells)
    assert seen["diagnosis"].strip().startswith("STORM in cell 3: ")
    assert "pause-metadata --cell 3, set-capacity --cell 3, resume --cell 3 --staged" in seen["diagnosis"]
    assert "cell 3 100%" in seen["cells"] and "cell 0 0%" in seen["cells"] and "(cell 0's service)" in seen["margin"]
    two = look(nodes_total=1600, nodes_disqualified=200, cell_disqualified_fraction=cells | {"7": 1.0})
    assert two["diagnosis"].strip().startswith("STORM in cells 3, 7: ") and "--cell" not in two["diagnosis"]
    calm = look(nodes_total=1600, nodes_disqualified=0, metadata_processing_p99_s=0.2, cell_disqualified_fraction=dict.fromkeys(cells, 0.0))
    assert calm["diagnosis"].strip() == "no storm"


def test_the_first_look_in_the_2025_lab_names_the_endpoint_then_the_collapse_and_their_runbooks():
    lease = {"nodes_disqualified": 0, "metadata_processing_p99_s": 0.7, "lease_droplets": 5000}
    empty = look(**lease, launch_error_ratio=1.0, leases_active=0, lease_endpoint="empty")
    assert empty["diagnosis"].strip().startswith("LAUNCHES FAILING (100%): the database's endpoint does not resolve")
    assert empty["diagnosis"].strip().endswith("Runbook: repair-endpoint")
    collapse = look(**lease, launch_error_ratio=1.0, leases_active=0, lease_endpoint="ok", leases_established_per_s=0.0,
                    lease_timed_out_per_s=170.0)  # fmt: skip
    assert collapse["diagnosis"].strip().startswith("CONGESTIVE COLLAPSE (100% of launches failing)")
    assert "throttle RATE, then restart-host N" in collapse["diagnosis"]
    coming = look(**lease, launch_error_ratio=0.6, leases_active=2000, lease_endpoint="ok", leases_established_per_s=40.0)
    assert coming["diagnosis"].strip() == "LAUNCHES FAILING (60%): leases are coming back (2000 of 5000)"
    assert look(**lease, launch_error_ratio=0.0, leases_active=5000)["diagnosis"].strip().startswith("margin is thin")  # launches fine


# -- the desk: pages, acks, the status page -----------------------------------------------------


def page_body(name="RetryStorm", role="database", status="firing"):
    return alerts.webhook(
        status, [{"status": status, "labels": {"alertname": name, "role": role, "severity": "critical"}, "annotations": {"summary": "s"}}]
    )


def test_pages_wait_for_their_roles_ack(tmp_path):
    desk.record_webhook(tmp_path, page_body(), "alertmanager")
    desk.record_webhook(tmp_path, page_body("QueuesFailing", "queues"), "alertmanager")
    assert [p["alert"] for p in desk.unacked(tmp_path, "database")] == ["RetryStorm"]
    assert [p["alert"] for p in desk.unacked(tmp_path, None)] == ["RetryStorm", "QueuesFailing"]
    journal.record(tmp_path, "ack", {"alert": "RetryStorm"}, True, "acked", role="database")
    assert desk.unacked(tmp_path, "database") == []
    desk.record_webhook(tmp_path, page_body(), "alertmanager")  # it fires again later: a new page
    assert len(desk.unacked(tmp_path, "database")) == 1


@pytest.mark.parametrize(
    "body", [{}, {"alerts": "x"}, {"alerts": [{"labels": {}}]}, {"alerts": [{"labels": {"alertname": ""}}]}, {"alerts": [3]}]
)
def test_a_malformed_webhook_records_nothing(tmp_path, body):
    with pytest.raises(ValueError):
        desk.record_webhook(tmp_path, body, "alertmanager")
    assert desk.read_pages(tmp_path) == []


LAB_TOKEN = "lab-token-for-the-desk-tests"


async def nothing_seen():
    return {}


@pytest.fixture
def book(tmp_path, monkeypatch):
    """A game's desk with two roles' tokens, and the runbook it makes moves with (a lab whose
    metadata service does not answer)."""
    monkeypatch.setenv("STORMLAB_TOKEN", LAB_TOKEN)
    the_desk = desk.Desk(tmp_path, "game day", {"database": "db-token", "queues": "q-token"})
    state = {"directory": str(tmp_path), "settings": {"STORMLAB_RACKS": "2"}, "components": {"metadata": {"url": "http://127.0.0.1:9"}}}
    return the_desk, Ops(state, journal=the_desk.journal, unacked=the_desk.unacked)


def as_role(token):
    return {"Authorization": f"Bearer {token}"}


async def test_the_desk_takes_alertmanagers_pages_with_the_token_and_serves_the_status_page(book, aiohttp_client):
    the_desk, ops = book
    heard = []
    client = await aiohttp_client(desk_web.app(the_desk, ops, LAB_TOKEN, heard.append))
    assert (await client.post("/alertmanager", json=page_body())).status == 401
    assert (await client.post("/alertmanager", json=page_body(), headers=as_role("db-token"))).status == 401  # a role's token: no
    bad = await client.post("/alertmanager", data="{not json", headers=as_role(LAB_TOKEN))
    assert bad.status == 400 and (await bad.json())["error"] == "bad_request"
    assert (await client.post("/alertmanager", json={"alerts": [{}]}, headers=as_role(LAB_TOKEN))).status == 400
    ok = await client.post("/alertmanager", json=page_body(), headers=as_role(LAB_TOKEN))
    assert ok.status == 200 and (await ok.json()) == {"recorded": 1}
    assert [p["alert"] for p in heard] == ["RetryStorm"]  # the runner prints it as it arrives
    posted = await client.post(
        "/moves", json={"action": "post-status", "as": "database", "args": {"severity": "major-outage", "text": "<catalog> fails"}},
        headers=as_role("db-token"),
    )  # fmt: skip
    assert posted.status == 200 and (await posted.json())["ok"]
    page = await (await client.get("/")).text()
    assert "major-outage" in page and "&lt;catalog&gt; fails" in page and "posted by database" in page
    status = await (await client.get("/status.json")).json()
    assert len(status["posts"]) == 1 and status["pages"][0]["alert"] == "RetryStorm"


async def test_a_line_another_process_appends_to_the_journal_is_not_on_the_status_page_or_scored(book, aiohttp_client):
    the_desk, ops = book
    client = await aiohttp_client(desk_web.app(the_desk, ops, LAB_TOKEN))
    journal.record(the_desk.directory, "post-status", {"severity": "resolved", "text": "all fine"}, True, "posted", role="database")
    journal.record(the_desk.directory, "ack", {"alert": "RetryStorm"}, True, "acked", role="database")
    assert "all fine" not in await (await client.get("/")).text()
    assert the_desk.journal.entries() == [] and (await (await client.get("/status.json")).json())["posts"] == []


@pytest.mark.parametrize(
    ("token", "body", "status", "says"),
    [
        ("nobody", {"action": "note", "as": "database", "args": {"text": "x"}}, 401, "role's token"),
        ("q-token", {"action": "note", "as": "database", "args": {"text": "x"}}, 403, "queues on-call's, not database's"),
        ("q-token", {"action": "pause-metadata", "as": "queues", "args": {}}, 403, "database on-call's move"),
        ("db-token", {"action": "reboot", "as": "database", "args": {}}, 400, "action must be one of"),
        ("db-token", {"action": "note", "as": "database", "args": [1]}, 400, "args must be an object"),
        ("db-token", {"action": "note", "args": {}}, 400, "as must name the role"),
        ("db-token", {"action": "post-status", "as": "database", "args": {"text": "no severity"}}, 400, "needs --severity"),
        ("db-token", {"action": "pause-metadata", "as": "database", "args": {"duration": "0s"}}, 200, "duration"),
    ],
)
async def test_a_move_needs_its_roles_token_and_a_refusal_makes_nothing(book, aiohttp_client, token, body, status, says):
    the_desk, ops = book
    client = await aiohttp_client(desk_web.app(the_desk, ops, LAB_TOKEN))
    resp = await client.post("/moves", json=body, headers=as_role(token))
    answer = await resp.json()
    assert resp.status == status and says in answer["message"], answer
    if status == 200:  # made, failed, journaled: a bad duration is the player's failed move (exit 2)
        assert answer["ok"] is False and answer["exit_code"] == 2 and the_desk.journal.entries()[0]["role"] == "database"
    else:
        assert the_desk.journal.entries() == []


async def test_a_move_that_fails_at_its_holder_is_a_failed_move_and_journaled_as_the_role(book, aiohttp_client):
    the_desk, ops = book
    client = await aiohttp_client(desk_web.app(the_desk, ops, LAB_TOKEN))
    resp = await client.post("/moves", json={"action": "pause-metadata", "as": "database", "args": {}}, headers=as_role("db-token"))
    answer = await resp.json()
    assert resp.status == 200 and answer["ok"] is False and answer["exit_code"] == 1 and "did not answer" in answer["message"]
    [entry] = the_desk.journal.entries()
    assert (entry["action"], entry["ok"], entry["role"], entry["fault"]) == ("pause-metadata", False, "database", "pause-metadata")


@pytest.mark.parametrize("weak", ["", "short", "stormlab"])
def test_the_desk_refuses_a_lab_token_anyone_could_guess(book, weak):
    from stormcore.auth import WeakToken

    the_desk, ops = book
    with pytest.raises(WeakToken):
        desk_web.app(the_desk, ops, weak)


async def test_an_ack_is_the_acking_roles_and_a_clock_step_cannot_put_it_before_its_page(book):
    the_desk, ops = book
    walls = iter([1000.0, 400.0, 400.5])  # the wall clock steps back ten minutes after the page
    the_desk.journal.wall = lambda: next(walls)
    the_desk.page(page_body(), "alertmanager")
    done = await ops.run("ack", {"alert": None}, "database")
    assert done["ok"] and done["role"] == "database" and done["at"] < the_desk.pages[0]["at"]  # by the wall, before
    assert the_desk.unacked("database") == []  # by the monotonic clock, after: answered
    refused = await ops.run("ack", {"alert": None}, "queues")
    assert not refused["ok"] and "waits for queues's ack" in refused["message"]


# -- the runner: stop conditions, the steady state again, progress ------------------------------

SHORT = """\
title: short
steady_state: [{probe: customer_error_ratio, below: 0.01}]
steps:
  - {name: the blip, at: 1s, fault: blip, args: {racks: 3, duration: 5s}}
  - {name: a long wait, wait: 5m}
"""


def run_toy(text):
    clock = VirtualClock()
    lab = ToyLab(clock)
    scenario = load(text)
    seen = []
    runner = Runner(scenario, schedule(scenario, 1), lab, clock, autopilot=True, echo=lambda line: None, progress=seen.append)
    return lab, asyncio.run(runner.run()), seen


def test_a_stop_condition_aborts_the_run_and_rolls_back():
    lab, result, _ = run_toy(SHORT + "stop_when: [{probe: customer_error_ratio, above: 0.5, for: 20s}]\n")
    assert result["outcome"] == "aborted" and lab.halted == 1
    stop = result["steps"][-1]
    assert stop["kind"] == "stop" and "customer_error_ratio > 0.5 for 20s" in stop["name"]
    assert 30 <= stop["at_s"] <= 32  # the storm starts 10 s after the blip, then holds 20 s


def test_the_steady_state_is_checked_again_after_the_run():
    _, result, _ = run_toy(SHORT)
    after = [s for s in result["steps"] if s["kind"] == "steady-after"]
    assert result["outcome"] == "deviated" and len(after) == 1 and not after[0]["passed"]  # the toy storm never ends


def test_progress_says_the_step_what_it_waits_for_the_value_and_the_time_left():
    _, _, seen = run_toy(SHORT)
    waiting = [p for p in seen if p["step"] == "a long wait"]
    assert waiting and waiting[0]["waiting_for"] == "300s to pass" and waiting[0]["left_s"] <= 300
    assert all(b["t"] - a["t"] >= 5 for a, b in zip(seen, seen[1:], strict=False))


def test_stop_when_and_promql_probes_are_read_and_checked():
    scenario = load(SHORT + 'stop_when: [{probe: promql, expr: "sum(up)", below: 1, for: 30s}]\n')
    assert scenario.promql() == {"sum(up)"}
    with pytest.raises(ScenarioError, match=r"scenario:6: stop_when\[0\]: expr"):
        load(SHORT + "stop_when: [{probe: promql, below: 1}]\n")


# -- the score cards ----------------------------------------------------------------------------


def test_each_role_is_scored_from_its_page_to_its_ack_and_its_first_move():
    clock, lab = VirtualClock(), None
    lab = ToyLab(clock)
    scenario = flagship()
    runner = Runner(scenario, schedule(scenario, 2015), lab, clock, autopilot=True, echo=lambda line: None)
    result = asyncio.run(runner.run())
    onset = scoring.score(scenario, result)["onset_s"]
    pause = next(a for a in result["player_actions"] if a["action"] == "pause-metadata")
    result["pages"] = [
        {"t": onset + 5, "alert": "RetryStorm", "role": "database", "status": "firing"},
        {"t": onset + 6, "alert": "QueuesFailing", "role": "queues", "status": "firing"},
    ]
    result["player_actions"] += [
        {"t": onset + 7, "action": "ack", "args": {"alert": "RetryStorm"}, "ok": True, "role": "database", "fault": None},
        {
            "t": onset + 8,
            "action": "post-status",
            "args": {"severity": "major-outage", "text": "Orders fail"},
            "ok": True,
            "role": "database",
            "fault": None,
        },
    ]
    cards = scoring.roles(result, onset)
    assert cards["database"]["time_to_ack_s"] == 2.0
    assert cards["database"]["time_to_detect_s"] == round(pause["t"] - (onset + 5), 1)
    assert cards["queues"]["time_to_ack_s"] is None and cards["queues"]["moves"] == 0
    posted = scoring.status_page(result, onset)
    assert posted["time_to_post_s"] == 8.0 and posted["tables_named"] == ["orders"] and posted["impact_named"]
    seed = {r["in_2015"]: r for r in scoring.seed_timeline(scenario, result)}
    assert seed["2:19 AM"]["lab_after_blip_s"] == 0 and seed["5:06 AM"]["lab_after_blip_s"] > 0
    pace = scoring.run_pace(scenario, result)
    assert seed["5:06 AM"]["at_run_pace_s"] == (None if pace is None else round(167 * 60 / pace, 1))
    assert json.dumps(cards)  # goes into the journal as it is


def test_a_scenarios_fix_moves_are_checked_like_any_move(tmp_path, capsys):
    path = tmp_path / "fix.yaml"
    path.write_text(SHORT + "rollback:\n  - {name: fix it, action: enable, args: {fix: meteor}}\n")
    assert main(["scenario", "validate", str(path)]) == 2
    assert "fix.yaml:7: rollback[0] (fix it): enable: fix must be one of stale-cache" in capsys.readouterr().err
    path.write_text(SHORT + "rollback:\n  - {name: more workers, action: scale-workers, args: {workers: 100}}\n")
    assert main(["scenario", "validate", str(path)]) == 2
    assert "workers must be at least 1 and at most 64, got 100" in capsys.readouterr().err
    path.write_text(SHORT + "rollback:\n  - {name: fix it, action: enable, args: {fix: stale-cache}}\n")
    assert main(["scenario", "validate", str(path)]) == 0


def test_each_roles_console_has_its_own_moves_and_everyones():
    forms = {role: [m["title"] for m in players.moves_for(role)] for role in ROLES}
    assert forms["database"][:3] == ["set-capacity", "pause-metadata", "resume"] and "restore-partition" in forms["database"]
    assert forms["queues"] == ["enable stale-cache", "post to the status page", "note"]
    for role, titles in forms.items():
        for m in players.moves_for(role):
            move_args = {"fix": m["fix"]} if m["fix"] else {}
            check_role(role, ACTIONS[m["action"]], move_args)  # every form is a move the desk takes from this role
        assert titles[-2:] == ["post to the status page", "note"]
    pause = next(m for m in players.moves_for("database") if m["action"] == "pause-metadata")
    assert [f["name"] for f in pause["fields"]] == ["duration", "cell"]
    assert pause["fields"][0]["kind"] == "duration" and "how long the lease lasts" in pause["fields"][0]["help"]
    capacity = next(m for m in players.moves_for("database") if m["action"] == "set-capacity")
    assert {f["name"]: f["kind"] for f in capacity["fields"]}["break_glass"] == "flag"


async def test_a_roles_console_knows_its_role_by_its_token_and_the_game_is_read_without_one(book, aiohttp_client):
    the_desk, ops = book
    the_desk.team = "blue"
    so_far = {
        "t": 42.0,
        "pages": [{"t": 10.0, "role": "database", "alert": "RetryStorm", "status": "firing"}],
        "player_actions": [
            {"t": 12.0, "role": "database", "action": "ack", "args": {"alert": "RetryStorm"}, "ok": True},
            {"t": 15.0, "role": "database", "action": "pause-metadata", "fault": "pause-metadata", "args": {}, "ok": True},
        ],
        "score": {"recovered": False, "customer_error_minutes": 0.4},
        "roles": {"database": {"pages": 1, "acks": 1, "moves": 1, "posts": 0}},
        "status_page": {"posts": 0},
        "injects": [],
        "held": False,
        "holds": [],
    }

    async def seen():
        return monitoring.direct([Reading(t=1.0, customer_error_ratio=0.55), Reading(t=2.0, customer_error_ratio=0.56)])

    boards = ({"title": "stormlab · Storm overview", "url": "http://127.0.0.1:20035/d/stormlab-storm"},)
    game = desk_web.Game(
        so_far=lambda: so_far, inject=lambda body: body, hold=lambda on: {}, held=lambda: False, monitoring=seen, dashboards=boards
    )
    client = await aiohttp_client(desk_web.app(the_desk, ops, LAB_TOKEN, game=game))
    the_desk.page(page_body(), "alertmanager")
    for auth in ({}, as_role("nobody"), {"Authorization": "db-token"}):
        resp = await client.get("/me", headers=auth)
        assert resp.status == 401 and (await resp.json())["error"] == "unauthorized"
    me = await (await client.get("/me", headers=as_role("db-token"))).json()
    assert (me["role"], me["team"]) == ("database", "blue") and [p["alert"] for p in me["pages"]] == ["RetryStorm"]
    assert "pause-metadata" in [m["action"] for m in me["moves"]]
    assert me["dashboards"] == list(boards)  # the lab's, for the page's links
    queues = await (await client.get("/me", headers=as_role("q-token"))).json()
    assert queues["role"] == "queues" and queues["pages"] == []  # the database's page is not the queues'
    game = await (await client.get("/game.json")).json()
    assert [(e["t"], e["role"], e["what"]) for e in game["timeline"]] == [
        (10.0, "database", "page"),
        (12.0, "database", "ack"),
        (15.0, "database", "move"),
    ]
    assert game["score"]["customer_error_minutes"] == 0.4 and game["team"] == "blue" and game["t"] == 42.0
    page = await client.get("/play")
    assert page.status == 200 and "location.hash" in await page.text()  # the token stays in the browser
    bare = await aiohttp_client(desk_web.app(the_desk, ops, LAB_TOKEN))
    assert (await (await bare.get("/game.json")).json())["score"] is None  # a desk with no runner behind it knows no score
    assert (await bare.get("/monitoring.json")).status == 409
    seen = await (await client.get("/monitoring.json")).json()  # read without a token, as the game is
    assert seen["mode"] == "direct" and seen["series"]["customer_error_ratio"] == [[1.0, 0.55], [2.0, 0.56]]


async def test_the_desk_takes_an_inject_with_the_lab_token_and_only_while_a_game_runs(book, aiohttp_client):
    the_desk, ops = book
    sent = []

    def inject(body):
        sent.append(live_inject(body, "live-1"))
        return {"name": "live-1", "fired_s": 12.0}

    game = desk_web.Game(so_far=dict, inject=inject, hold=dict, held=bool, monitoring=nothing_seen)
    client = await aiohttp_client(desk_web.app(the_desk, ops, LAB_TOKEN, game=game))
    body = {"to": "database", "message": "The status page is due."}
    for auth in ({}, as_role("db-token")):  # a role's token is not the room's
        assert (await client.post("/inject", json=body, headers=auth)).status == 401
    bad = await client.post("/inject", json={"to": "database"}, headers=as_role(LAB_TOKEN))
    assert bad.status == 400 and "message" in (await bad.json())["message"] and sent == []
    ok = await client.post("/inject", json=body, headers=as_role(LAB_TOKEN))
    assert ok.status == 200 and (await ok.json()) == {"inject": {"name": "live-1", "fired_s": 12.0}}
    assert [(i.to, i.message) for i in sent] == [("database", "The status page is due.")]
    idle = await aiohttp_client(desk_web.app(the_desk, ops, LAB_TOKEN))
    resp = await idle.post("/inject", json=body, headers=as_role(LAB_TOKEN))
    assert resp.status == 409 and (await resp.json())["error"] == "no_game"


async def test_the_facilitators_hold_refuses_moves_on_the_lab_and_not_looks_acks_notes_or_posts(book, aiohttp_client):
    the_desk, ops = book
    holds = []

    def hold(on):
        holds.append(on)
        return {"changed": True, "held": on, "t": 30.0, "started": True}

    game = desk_web.Game(so_far=dict, inject=dict, hold=hold, held=lambda: bool(holds) and holds[-1], monitoring=nothing_seen)
    client = await aiohttp_client(desk_web.app(the_desk, ops, LAB_TOKEN, game=game))
    for auth in ({}, as_role("db-token")):  # the room's (lab) token only: a player cannot hold the game
        assert (await client.post("/hold", json={"on": True}, headers=auth)).status == 401
    for body in ({}, {"on": "yes"}, {"on": 1}):
        resp = await client.post("/hold", json=body, headers=as_role(LAB_TOKEN))
        assert resp.status == 400 and "on must be" in (await resp.json())["message"]
    assert holds == []
    held = await client.post("/hold", json={"on": True}, headers=as_role(LAB_TOKEN))
    assert held.status == 200 and (await held.json())["held"] is True and holds == [True]
    pause = await client.post("/moves", json={"action": "pause-metadata", "as": "database", "args": {}}, headers=as_role("db-token"))
    answer = await pause.json()
    assert pause.status == 409 and answer["error"] == "held" and "pause-metadata waits" in answer["message"]
    assert the_desk.journal.entries() == []  # nothing made, nothing journaled
    note = await client.post("/moves", json={"action": "note", "as": "database", "args": {"text": "we wait"}}, headers=as_role("db-token"))
    assert note.status == 200 and (await note.json())["ok"]
    assert [e["action"] for e in the_desk.journal.entries()] == ["note"]
    await client.post("/hold", json={"on": False}, headers=as_role(LAB_TOKEN))
    after = await client.post("/moves", json={"action": "pause-metadata", "as": "database", "args": {}}, headers=as_role("db-token"))
    assert after.status == 200 and "did not answer" in (await after.json())["message"]  # made again: its holder is down here
    idle = await aiohttp_client(desk_web.app(the_desk, ops, LAB_TOKEN))
    resp = await idle.post("/hold", json={"on": True}, headers=as_role(LAB_TOKEN))
    assert resp.status == 409 and (await resp.json())["error"] == "no_game"


def test_a_game_hands_tokens_to_its_own_incidents_roles(tmp_path):
    """2015's game seats the database's and the cascade's on-calls; 2025's, EC2's (the lease manager's)."""
    flagship_roles = roles.issue(tmp_path, "http://127.0.0.1:1", "2015")
    assert set(flagship_roles) == {"database", "queues", "scaling", "metrics", "console"}
    assert set(roles.issue(tmp_path, "http://127.0.0.1:1", "2025", incident="aws-2025-10")) == {"leases"}
    assert sorted(p.name for p in roles.game_dir(tmp_path).iterdir()) == ["game.json", "leases"]  # the earlier game's tokens gone
