"""Bounded by design: a game takes its players' moves, its pages and its injects up to a budget
(413 for one too large, 429 past the game's), nothing taken past it; the views anyone may open
without a token are made at most once a second (and after each write), whatever the readers do;
a deploy to a lab none of whose racks takes one is a 409 that says why, not a 500."""

import json

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from chaos.control import LeaseRunner, Recorder, add_fault_routes
from stormcore.settings import LabSettings
from stormcore.web import json_errors
from stormlab.engine import launcher
from stormlab.engine.reading import Reading
from stormlab.engine.supervisor import FAULTS, Supervisor
from stormlab.responder import bounds, desk_web, monitoring
from tests.unit.test_team import LAB_TOKEN, as_role, book, page_body  # noqa: F401 (book: the fixture)


def post(text: str) -> dict:
    return {"action": "post-status", "as": "database", "args": {"severity": "degraded", "text": text}}


@pytest.fixture
def small(monkeypatch):
    """Budgets a test can spend: 3 moves of at most 200 bytes, 2 pages, 1 inject."""
    monkeypatch.setattr(
        bounds,
        "budgets",
        lambda: {
            "moves": bounds.Budget("moves", 3, 200, 10_000),
            "pages": bounds.Budget("pages", 2, 8_192, 100_000),
            "injects": bounds.Budget("injects", 1, 4_096, 100_000),
        },
    )


def test_a_budget_takes_up_to_its_count_and_bytes_and_nothing_past_them():
    budget = bounds.Budget("posts", count=2, each_bytes=10, total_bytes=15)
    budget.take(8)
    with pytest.raises(bounds.OverBudget) as too_big:
        budget.take(11)
    assert too_big.value.status == 413
    with pytest.raises(bounds.OverBudget) as spent:
        budget.take(8)  # 16 bytes in all
    assert spent.value.status == 429 and (budget.taken, budget.taken_bytes) == (1, 8)
    budget.take(7)
    with pytest.raises(bounds.OverBudget, match="at most 2"):
        budget.take(1)


async def test_one_roles_token_cannot_post_without_limit(book, aiohttp_client, small):  # noqa: F811
    the_desk, ops = book
    client = await aiohttp_client(desk_web.app(the_desk, ops, LAB_TOKEN))
    huge = await client.post("/moves", json=post("x" * 1000), headers=as_role("db-token"))
    assert huge.status == 413 and (await huge.json())["error"] == "too_large"
    for n in range(3):
        assert (await client.post("/moves", json=post(f"update {n}"), headers=as_role("db-token"))).status == 200
    queues = post("one more") | {"as": "queues"}
    spent = await client.post("/moves", json=queues, headers=as_role("q-token"))  # the game's budget, whichever role
    assert spent.status == 429 and (await spent.json())["error"] == "too_many"
    status = await (await client.get("/status.json")).json()
    assert [p["args"]["text"] for p in status["posts"]] == ["update 0", "update 1", "update 2"]  # nothing past the budget


async def test_pages_and_injects_have_their_budgets_too(book, aiohttp_client, small):  # noqa: F811
    the_desk, ops = book
    sent = []

    def inject(body):
        sent.append(body)
        return body

    game = desk_web.Game(lambda: {}, inject, lambda on: {}, lambda: False, lambda: None)
    client = await aiohttp_client(desk_web.app(the_desk, ops, LAB_TOKEN, game=game))
    for _ in range(2):
        assert (await client.post("/alertmanager", json=page_body(), headers=as_role(LAB_TOKEN))).status == 200
    assert (await client.post("/alertmanager", json=page_body(), headers=as_role(LAB_TOKEN))).status == 429
    assert len(the_desk.pages) == 2
    body = {"to": "database", "message": "a customer calls"}
    assert (await client.post("/inject", json=body, headers=as_role(LAB_TOKEN))).status == 200
    assert (await client.post("/inject", json=body, headers=as_role(LAB_TOKEN))).status == 429 and len(sent) == 1


async def test_tokenless_views_are_made_at_most_once_a_second_and_after_each_write(book, aiohttp_client, monkeypatch):  # noqa: F811
    the_desk, ops = book
    made = {"game": 0, "monitoring": 0}

    def so_far():
        made["game"] += 1
        return None

    async def seen():
        made["monitoring"] += 1
        return monitoring.direct([Reading(t=1.0, customer_error_ratio=0.5)])

    monkeypatch.setattr(desk_web, "VIEW_EVERY_S", 3600.0)  # the readers below all come within it, however slow the host
    game = desk_web.Game(so_far, lambda b: b, lambda on: {}, lambda: False, seen)
    client = await aiohttp_client(desk_web.app(the_desk, ops, LAB_TOKEN, game=game))
    monkeypatch.setattr(desk_web, "game_document", lambda desk, view: {"made": made["game"], "posts": desk.posts()})
    for _ in range(50):
        assert (await client.get("/game.json")).status == 200
        assert (await client.get("/monitoring.json")).status == 200
    assert made == {"game": 1, "monitoring": 1}  # fifty readers, one view each: the lab's metrics asked once
    assert (await client.post("/moves", json=post("we are on it"), headers=as_role("db-token"))).status == 200
    after = json.loads(await (await client.get("/game.json")).text())
    assert [p["args"]["text"] for p in after["posts"]] == ["we are on it"] and made["game"] == 2  # a write is seen at once


async def test_a_deploy_to_a_lab_whose_only_rack_is_external_is_a_409_that_says_why(tmp_path, aiohttp_client, monkeypatch):
    monkeypatch.setenv("STORMLAB_TOKEN", LAB_TOKEN)
    laid_out = launcher.plan(LabSettings(racks=1, nodes_per_rack=5), 0, tmp_path / "data", external={0: "python3 my_rack.py"})
    plan = {"settings": {}, "components": [c.__dict__ | {"url": c.url} for c in laid_out.components]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    sup = Supervisor(tmp_path)
    app = web.Application(middlewares=[json_errors])
    add_fault_routes(app, LeaseRunner(Recorder(CollectorRegistry(), FAULTS, "supervisor")), {"deploy": sup.deploy})
    client = await aiohttp_client(app)  # the supervisor's own /faults, without starting its lab
    body = {"fault": "deploy", "allowance_s": 2.0, "duration_s": 30}
    answer = await client.post("/faults", json=body)
    said = await answer.json()
    assert answer.status == 409 and said["error"] == "no_rack_to_deploy" and "external rack" in said["message"]
