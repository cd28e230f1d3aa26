"""A rack's HTTP face: the customer item API of its nodes, /status, /metrics, /healthz.

  GET /nodes/{node}/tables/{table}/partitions/{partition}/items/{key}[?index=GSI]
  PUT /nodes/{node}/tables/{table}/partitions/{partition}/items/{key}   {"value": …}

A node that has disqualified itself answers 503 with the reason; a node asked for a
partition it does not hold answers 409 ``wrong_owner``; an unknown node 404.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from aiohttp import web

from storage_node import contract
from storage_node.contract import MAX_KEY, MAX_VALUE_BYTES
from storage_node.metrics import RackMetrics
from storage_node.rack import DEPLOYABLE, Node, Rack, StaleDeploy
from storage_node.store import AsyncItemStore, QuotaExceeded
from stormcore import openapi
from stormcore.auth import from_env, token_middleware
from stormcore.documents import encoded_bytes, whole
from stormcore.fleet import cell_of, node_id
from stormcore.openapi import ERROR, LAG_WINDOW, Answer, Operation, schema_of
from stormcore.racks import SCHEDULE_ORIGIN_ENV
from stormcore.settings import LabSettings, SettingsError
from stormcore.web import BadRequest, LoopLag, base_app, json_error, read_object
from stormcore.wire import RackStatus

SETTINGS = web.AppKey("settings", LabSettings)
RACK = web.AppKey("rack", Rack)
STORE = web.AppKey("store", AsyncItemStore)
METRICS = web.AppKey("metrics", RackMetrics)
LAG = web.AppKey("lag", LoopLag)
MAX_GENERATION = 2**53 - 1  # a deploy push's generation: an integer every JSON reader keeps exact


def create_app(
    settings: LabSettings,
    rack: int,
    link_url: str,
    data_dir: Path,
    token: str | None = None,
    held: tuple[dict, int] | None = None,
    schedule_origin: float | None = None,
) -> web.Application:
    metrics = RackMetrics.create(rack, cell_of(rack, settings))
    metrics.allowance.labels(str(rack)).set(settings.allowance_s)
    lag = LoopLag(metrics.registry)
    holder: dict[str, Rack] = {}
    guard = token_middleware(from_env() if token is None else token)  # /admin/deploy

    def refresh() -> None:
        if holder:
            holder["rack"].sync_metrics()

    app = base_app(f"stormlab rack {rack}", metrics.registry, lag, refresh=refresh, middlewares=[guard])
    app[SETTINGS], app[METRICS], app[LAG] = settings, metrics, lag

    async def rack_ctx(app: web.Application) -> AsyncIterator[None]:
        data_dir.mkdir(parents=True, exist_ok=True)
        app[STORE] = AsyncItemStore(data_dir / f"rack-{rack:02d}.sqlite3")
        app[RACK] = holder["rack"] = Rack(settings, rack, link_url, metrics, schedule_origin)
        if held is not None:  # a restarted rack runs what the live deploys hold from its first renewal
            app[RACK].hold(*held)
        app[RACK].start()
        yield
        await app[RACK].stop()
        app[STORE].close()

    app.cleanup_ctx.append(rack_ctx)
    describe_routes(app, [node_id(rack, i) for i in range(settings.nodes_per_rack)])
    return app


def describe_routes(app: web.Application, nodes: list[str]) -> None:
    openapi.add(app, contract.get_item(nodes), get_item)  # the contract's own operations: the lab's racks keep it
    openapi.add(app, contract.put_item(nodes), put_item)
    nodes_param = {"name": "nodes", "in": "query", "schema": {"type": "string"}, "description": "1: each node's state too"}
    openapi.add(app, Operation("GET", "/status", "the rack's nodes: serving, disqualified, renewal latency", {
        200: Answer("the rack's status", schema_of(RackStatus)),
    }, parameters=(LAG_WINDOW, nodes_param)), status)  # fmt: skip
    held = {
        "type": "object",
        "properties": {
            "retry_policy": {"type": "string"},
            "allowance_s": {"type": "number", "exclusiveMinimum": 0},
            "renewal_period_s": {"type": "number", "exclusiveMinimum": 0},
        },
        "additionalProperties": False,
    }
    push = {
        "type": "object",
        "required": ["generation", "held"],
        "properties": {"generation": {"type": "integer", "minimum": 0, "maximum": MAX_GENERATION}, "held": held},
        "additionalProperties": False,
    }
    answer = {
        "type": "object",
        "required": ["generation", "held", "running"],
        "properties": {"generation": {"type": "integer"}, "held": held, "running": {**held, "required": list(DEPLOYABLE)}},
    }
    openapi.add(app, Operation("POST", "/admin/deploy", (
        "what the live deploys hold on this rack, whole (the supervisor's push): the rack runs its "
        "start-up settings with these over them (profile time)"), {
        200: Answer("what the rack holds and runs now", answer),
        400: Answer("an unknown setting or a value out of range: nothing changed", ERROR),
        409: Answer("a generation older than the one the rack runs (a push overtaken): nothing changed", ERROR),
    }, body=push, body_required=True, protected=True, tag="admin"), deploy)  # fmt: skip


def check_held(held: object) -> dict[str, object]:
    """A deploy push's held settings, checked as JSON values (SettingsError checks the ranges)."""
    if not isinstance(held, dict):
        raise BadRequest("held must be an object of settings")
    unknown = sorted(set(held) - set(DEPLOYABLE))
    if unknown:
        raise BadRequest(f"a deploy holds {', '.join(DEPLOYABLE)}, not {', '.join(unknown)}")
    for key, value in held.items():
        wanted = str if key == "retry_policy" else (int, float)
        if isinstance(value, bool) or not isinstance(value, wanted) or (key != "retry_policy" and value <= 0):  # type: ignore[operator]
            raise BadRequest(f"{key} must be {'a policy name' if key == 'retry_policy' else 'a positive number of seconds'}")
    return held


HELD_ENV = "STORMLAB_DEPLOY_HELD"  # {"generation": N, "held": {...}}: what holds when a rack (re)starts


def schedule_origin_from_env(environ: Mapping[str, str]) -> float | None:
    """The lab's shared renewal-schedule origin (unix seconds), when the launcher gave one."""
    text = environ.get(SCHEDULE_ORIGIN_ENV)
    if not text:
        return None
    try:
        origin = float(text)
    except ValueError:
        raise SettingsError(f"{SCHEDULE_ORIGIN_ENV} must be unix seconds, not {text!r}") from None
    if not math.isfinite(origin) or origin < 0:
        raise SettingsError(f"{SCHEDULE_ORIGIN_ENV} must be unix seconds, not {text!r}")
    return origin


def held_from_env(environ: Mapping[str, str]) -> tuple[dict, int] | None:
    """What the supervisor handed a (re)starting rack: the held settings and their generation."""
    text = environ.get(HELD_ENV)
    if not text:
        return None
    try:
        body = json.loads(text)
        return dict(check_held(body["held"])), int(body["generation"])
    except (ValueError, KeyError, TypeError, BadRequest) as exc:
        raise SystemExit(f"{HELD_ENV} is not a deploy push ({exc}): {text!r}") from None


async def deploy(request: web.Request) -> web.Response:
    body = await read_object(request)
    unknown = sorted(set(body) - {"generation", "held"})
    if unknown:
        raise BadRequest(f"a deploy push takes generation and held, not {', '.join(unknown)}")
    generation = whole(body.get("generation"))
    if generation is None or not 0 <= generation <= MAX_GENERATION:
        raise BadRequest(f"generation must be a whole number from 0 to {MAX_GENERATION}")
    held = check_held(body.get("held"))
    rack = request.app[RACK]
    try:
        now_held = rack.hold(held, generation)
    except StaleDeploy as exc:
        return json_error(409, "stale_deploy", str(exc), generation=exc.generation)
    except SettingsError as exc:
        raise BadRequest(str(exc)) from None
    return web.json_response({"generation": rack.generation, "held": now_held, "running": rack.deployed()})


def _target(request: web.Request) -> tuple[Node, str, int, str] | web.Response:
    """The node, table, partition and key of an item request, or the refusal to answer it."""
    rack, metrics = request.app[RACK], request.app[METRICS]
    m = request.match_info
    node = rack.nodes.get(m["node"])
    if node is None:
        metrics.served.labels(rack.label, "bad_request").inc()
        return json_error(404, "unknown_node", f"no node {m['node']!r} in rack {rack.index}")
    try:
        partition = int(m["partition"])
    except ValueError:
        partition = -1
    if partition < 0 or len(m["key"]) > MAX_KEY:
        metrics.served.labels(rack.label, "bad_request").inc()
        return json_error(400, "bad_request", f"partition must be a non-negative integer, key at most {MAX_KEY} chars")
    if not node.refusal.serving:
        metrics.served.labels(rack.label, "refused").inc()
        return json_error(
            503, "disqualified", f"node {node.id} refuses requests: {node.refusal.reason}", node=node.id, state=node.refusal.state.value
        )
    index = request.query.get("index")
    if not node.owns(m["table"], index, partition):
        metrics.served.labels(rack.label, "wrong_owner").inc()
        return json_error(409, "wrong_owner", f"node {node.id} does not hold {m['table']}/{index or 'base'}/{partition}")
    return node, m["table"], partition, m["key"]


async def get_item(request: web.Request) -> web.Response:
    target = _target(request)
    if isinstance(target, web.Response):
        return target
    node, table, partition, key = target
    rack, store, metrics = request.app[RACK], request.app[STORE], request.app[METRICS]
    if "index" in request.query:
        metrics.served.labels(rack.label, "ok").inc()
        items = await store.query(table, key)
        return web.json_response({"node": node.id, "index": request.query["index"], "items": items})
    found, value = await store.get(table, partition, key)
    if not found:
        metrics.served.labels(rack.label, "not_found").inc()
        return json_error(404, "not_found", f"no item {key!r} in {table}/{partition}")
    metrics.served.labels(rack.label, "ok").inc()
    return web.json_response({"node": node.id, "key": key, "value": value})


async def put_item(request: web.Request) -> web.Response:
    rack, metrics = request.app[RACK], request.app[METRICS]
    if "index" in request.query:
        metrics.served.labels(rack.label, "bad_request").inc()
        return json_error(400, "bad_request", "GSI partitions are read-only: write to the table")
    body = await read_object(request)
    if "value" not in body or encoded_bytes(body["value"]) > MAX_VALUE_BYTES:
        metrics.served.labels(rack.label, "bad_request").inc()
        raise BadRequest(f'body must be {{"value": …}} of at most {MAX_VALUE_BYTES} bytes as JSON (UTF-8)')
    target = _target(request)
    if isinstance(target, web.Response):
        return target
    node, table, partition, key = target
    try:
        await request.app[STORE].put(table, partition, key, body["value"])  # committed before we acknowledge
    except QuotaExceeded as exc:
        metrics.served.labels(rack.label, "quota").inc()
        return json_error(507, "quota", str(exc))
    metrics.served.labels(rack.label, "ok").inc()
    return web.json_response({"node": node.id, "key": key, "stored": True})


async def status(request: web.Request) -> web.Response:
    rack = request.app[RACK]
    counts = rack.count()
    return web.json_response(
        RackStatus(
            **request.app[LAG].readings(request),
            rack=rack.index,
            pid=os.getpid(),
            link_up=rack.link_up,
            nodes_total=len(rack.nodes),
            nodes_serving=counts["serving"],
            nodes_disqualified=counts["disqualified"],
            nodes_starting=counts["starting"],
            renewal_p99_s=rack.renewal_latency.quantile(0.99, rack.now()),
            renewal_attempts_total=rack.attempts_total(),
            allowance_s=rack.settings.allowance_s,
            deployed=rack.deployed() | {"held": dict(rack.held), "generation": rack.generation},
            schedule_origin_unix=rack.schedule_origin_unix,
            nodes=[n.status() for n in rack.nodes.values()] if request.query.get("nodes") == "1" else None,
        ).to_json()
    )
