"""Scripted injects: read from a scenario file, fired by the runner at their time or once their
condition has held (virtual time, at speed), and scored by what came back within their time."""

import asyncio

import pytest

from stormlab.responder import moves
from stormlab.scenarios import debrief, scoring
from stormlab.scenarios.reader import load
from stormlab.scenarios.runner import Runner
from stormlab.scenarios.scenario import ScenarioError, live_inject, schedule
from tests.unit.test_gameday_engine import OPENING, toy

SCENARIO = (
    "title: injects\nsteps:\n"
    + OPENING
    + """      time_limit: 3m
      recovered: {probe: customer_error_ratio, below: 0.01, for: 5s}
injects:
  - name: exec-asks
    at: 45s
    to: database
    message: An executive asks for the customer impact in five minutes.
    expect: post
    names_tables: true
    within: 5m
  - name: storm-call
    when: {probe: customer_error_ratio, above: 0.3, for: 10s}
    to: team
    message: Say who has the storm.
    within: 1m
"""
)


def fire(speed: float):
    clock, lab = toy()
    scenario = load(SCENARIO)
    heard = []
    runner = Runner(
        scenario,
        schedule(scenario, 2015, speed),
        lab,
        clock,
        autopilot=False,
        speed=speed,
        echo=lambda line: None,
        on_inject=lambda i: heard.append((clock.now() - runner.t0, i)),
    )
    journal = asyncio.run(runner.run())
    return journal, heard


@pytest.mark.parametrize("speed", [1.0, 2.0])
def test_an_inject_fires_at_its_time_and_on_its_condition_at_speed(speed):
    journal, heard = fire(speed)
    by_name = {i["name"]: (at, i) for at, i in heard}
    at, executive = by_name["exec-asks"]
    assert executive["at_s"] == 45 / speed and 0 <= executive["fired_s"] - 45 / speed <= 1 / speed  # within a tick
    assert at == pytest.approx(executive["fired_s"]) and executive["due_s"] == pytest.approx(executive["fired_s"] + 300 / speed)
    assert executive["within_s"] == 300 / speed and executive["answer"] == "post" and executive["names_tables"]
    # the toy storms 10 wall seconds after the blip (at 20 s of the run): its condition then holds for its 10 s
    _, call = by_name["storm-call"]
    held = 20 / speed + 10 + 10 / speed
    assert call["at_s"] is None and held <= call["fired_s"] <= held + 1 / speed
    assert sorted(i["name"] for i in journal["injects"]) == ["exec-asks", "storm-call"]  # each fires once, both in the journal


def entry(t, action, role, **args):
    return {"t": t, "action": action, "role": role, "args": args, "ok": True}


def test_an_inject_is_answered_only_as_it_asked_within_its_time_and_by_whom_it_was_sent_to():
    samples = [{"t": 30.0, "table_error_ratio": {"catalog": 0.6, "orders": 0.01}, "customer_error_ratio": 0.5}]
    sent = [
        {"name": "exec-asks", "to": "database", "answer": "post", "names_tables": True, "fired_s": 45.0, "within_s": 300.0, "due_s": 345.0},
        {"name": "say-it", "to": "team", "answer": "ack", "names_tables": False, "fired_s": 40.0, "within_s": 60.0, "due_s": 100.0},
        {"name": "note-it", "to": "queues", "answer": "note", "names_tables": False, "fired_s": 40.0, "within_s": 20.0, "due_s": 60.0},
    ]
    actions = [
        entry(41.0, "ack", "queues", alert="another-page"),  # not the inject's name
        entry(50.0, "post-status", "database", severity="major-outage", text="Requests fail in us-east"),  # no table named
        entry(55.0, "ack", "scaling", alert="say-it"),  # a team's inject: anyone's ack answers it
        entry(90.0, "post-status", "queues", severity="major-outage", text="catalog fails"),  # not the database's post
        entry(120.0, "post-status", "database", severity="major-outage", text="Customers of CATALOG fail"),
        entry(70.0, "note", "queues", text="on it"),  # after its minute: late
    ]
    actions.sort(key=lambda a: a["t"])
    scored = {i["name"]: i for i in scoring.injects({"injects": sent, "player_actions": actions, "samples": samples})}
    assert (scored["exec-asks"]["answered"], scored["exec-asks"]["answer_s"]) == (True, 75.0)
    assert (scored["say-it"]["answered"], scored["say-it"]["answer_s"]) == (True, 15.0)
    assert (scored["note-it"]["answered"], scored["note-it"]["answer_s"]) == (False, 30.0)
    lines = [debrief._inject(i) for i in scored.values()]
    assert "answered after 75 s" in lines[0] and "answered late, after 30 s" in lines[2]
    nothing = scoring.injects({"injects": sent, "player_actions": [], "samples": samples})
    assert [i["answered"] for i in nothing] == [False, False, False] and debrief._inject(nothing[0]).endswith("not answered")


def test_an_inject_is_delivered_as_a_page_but_scored_as_an_inject_not_an_alert():
    pages = [
        {"t": 10.0, "role": "database", "alert": "RetryStorm", "status": "firing", "via": "runner"},
        {"t": 5.0, "role": "database", "alert": "exec-asks", "status": "firing", "via": "inject"},
    ]
    journal = {"pages": pages, "player_actions": [entry(12.0, "ack", "database", alert="RetryStorm")], "samples": []}
    card = scoring.roles(journal, onset=0.0)["database"]
    assert card["first_page"] == "RetryStorm" and card["pages"] == 1 and card["time_to_ack_s"] == 2.0  # the inject is not a page here
    assert [(mark, label) for _, _, mark, label in moves.role_events(journal)] == [
        ("inject", "exec-asks"),
        ("page", "RetryStorm"),
        ("ack", "RetryStorm"),
    ]


@pytest.mark.parametrize(
    ("inject", "says"),
    [
        ("{name: x, to: database, message: m}", "needs at (a time of the run) or when"),
        ("{name: x, at: 5s, when: {probe: customer_error_ratio, above: 0.1}, to: database, message: m}", "one of them"),
        ("{name: x, at: 5s, to: dba, message: m}", "a role (database"),
        ("{name: x, at: 5s, to: team, message: m, expect: call}", "one of ack, post, note"),
        ("{name: x, at: 5s, to: team, message: m, names_tables: yes}", "goes with expect: post"),
        ("{name: x, at: 5s, to: team}", "missing field 'message'"),
        ("{name: x, at: soon, to: team, message: m}", "injects[0].at"),
    ],
)
def test_a_broken_inject_names_its_line_and_field(inject, says):
    text = SCENARIO.split("injects:")[0] + f"injects:\n  - {inject}\n"
    with pytest.raises(ScenarioError) as caught:
        load(text, "s.yaml")
    assert says in str(caught.value) and "s.yaml:10:" in str(caught.value), caught.value


def test_inject_names_are_unique():
    text = SCENARIO + "  - {name: exec-asks, at: 5s, to: team, message: again}\n"
    with pytest.raises(ScenarioError, match="inject names must be unique"):
        load(text, "s.yaml")


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"to": "database"}, "message: the text"),
        ({"to": "dba", "message": "m"}, "to: a role"),
        ({"to": "team", "message": "m", "expect": "call"}, "expect: one of ack, post, note"),
        ({"to": "team", "message": "m", "names_tables": True}, "true only with expect: post"),
        ({"to": "team", "message": "m", "names_tables": "yes", "expect": "post"}, "names_tables: true or false"),
        ({"to": "team", "message": "m", "within": "soon"}, "within: not a duration"),
        ({"to": "team", "message": "m", "within": "-5s"}, "within:"),
        ({"to": "team", "message": "m", "within": "2h"}, "at most 3600s"),
        ({"to": "team", "message": "x" * 1001}, "1-1000 characters"),
        ({"to": "team", "message": "m", "at": "5s"}, "not at"),
    ],
)
def test_an_inject_typed_live_that_is_not_one_is_refused_and_says_why(body, says):
    with pytest.raises(ScenarioError, match=None) as caught:
        live_inject(body, "live-1")
    assert says in str(caught.value), caught.value


def test_an_inject_typed_live_is_sent_at_once_and_scored_like_the_scenarios():
    clock, lab = toy()
    scenario = load(SCENARIO)
    heard = []
    runner = Runner(scenario, schedule(scenario, 2015), lab, clock, autopilot=False, echo=lambda line: None, on_inject=heard.append)

    async def game():
        play = asyncio.create_task(runner.run())
        while not runner.samples or runner.samples[-1].t < 60:  # the game's first minute, in virtual time
            await asyncio.sleep(0)
        sent = runner.inject_now({"to": "queues", "message": "Are the queues fine?", "within": "30s"})
        again = runner.inject_now({"to": "team", "message": "A second one", "expect": "note"})
        lab.actions.append({"t": sent["fired_s"] + 12, "action": "ack", "role": "queues", "args": {"alert": "live-1"}, "ok": True})
        return sent, again, await play

    sent, again, journal = asyncio.run(game())
    assert (sent["name"], again["name"]) == ("live-1", "live-2") and sent["at_s"] is None
    assert 60 <= sent["fired_s"] <= 61 and sent["due_s"] == pytest.approx(sent["fired_s"] + 30)
    assert [i["name"] for i in heard] == ["storm-call", "exec-asks", "live-1", "live-2"]  # delivered as the scenario's are
    scored = {i["name"]: i for i in scoring.injects(journal)}
    assert scored["live-1"]["answered"] and scored["live-1"]["answer_s"] == 12.0 and not scored["live-2"]["answered"]
