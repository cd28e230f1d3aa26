"""The metadata service's HTTP face: answers membership renewals through the virtual CPU.

Routes:
  GET  /membership/{node}          a node's membership list (costs base + per_entry x entries)
  GET  /partition-map              who holds each partition, for customer routing (free)
  POST /admin/pause                 turn membership requests away (the front door: free)
  POST /admin/resume {"staged": N, "every_s": S}   readmit the fleet, at once or in N steps
  POST /admin/capacity {"cores": n, "break_glass": false}   set virtual cores (shared path)
  POST /admin/tables/{table}/gsis {"add": n}    customers adopt n more GSIs (shared path)
  POST|GET|DELETE /faults           fault leases (metadata_service/faults.py)
  GET  /status, /metrics, /healthz
Admin requests that change the service go through the same overloaded virtual CPU as the
renewals: the shared-fate path on which capacity could not be added in 2015. ``break_glass``
takes a path around it. /admin and /faults need the lab token. The arguments of pause,
resume and capacity, and their ranges, are those of the fault catalog's leases of the same name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from chaos import catalog
from chaos.control import LeaseRunner, Recorder, add_fault_routes
from metadata_service.admission import door, membership_work_s
from metadata_service.faults import MetadataFaults
from metadata_service.membership import MAX_GSIS, MembershipStore, TooManyGsis, UnknownTable
from metadata_service.metrics import MetadataMetrics
from metadata_service.service import MetadataService
from stormcore import openapi
from stormcore.auth import from_env, token_middleware
from stormcore.openapi import ERROR, INTEGER, LAG_WINDOW, NUMBER, STRING, Answer, Operation, obj, schema_of
from stormcore.settings import LabSettings, SettingsError
from stormcore.web import BadRequest, LoopLag, base_app, json_error, number, read_object
from stormcore.wire import DEADLINE_HEADER, OVERLOADED, PAUSED, REFUSAL_HEADER, Membership, MetadataStatus, PartitionMap

SERVICE = web.AppKey("service", MetadataService)
REFUSED = {
    PAUSED: "membership requests are paused by an operator",
    OVERLOADED: "turned away by admission control: the service is past its limit or the renewal's deadline",
}
LAG = web.AppKey("lag", LoopLag)


def create_app(settings: LabSettings, token: str | None = None, cell: int = 0) -> web.Application:
    """The metadata service of one cell (the only one without cells): its racks' renewals, its
    share of the cores, its own admin path and faults."""
    if not 0 <= cell < settings.cells:
        raise SettingsError(f"cell must be between 0 and {settings.cells - 1}, got {cell}")
    metrics = MetadataMetrics.create()
    lag = LoopLag(metrics.registry)
    service = MetadataService(settings, MembershipStore.for_cell(settings, cell), metrics, cell)
    app = base_app(
        "stormlab metadata service",
        metrics.registry,
        lag,
        refresh=service.sync_metrics,
        middlewares=[token_middleware(from_env() if token is None else token)],
    )
    app[SERVICE], app[LAG] = service, lag
    app.cleanup_ctx.append(_service_ctx)
    describe_routes(app, service.store)
    faults = MetadataFaults(service, LeaseRunner(Recorder(metrics.registry, catalog.names("metadata"), "metadata")))
    add_fault_routes(app, faults.runner, faults.handlers())
    return app


def describe_routes(app: web.Application, store: MembershipStore) -> None:
    node = {"name": "node", "in": "path", "required": True, "schema": {"type": "string", "examples": store.nodes[:3]}}
    table = {"name": "table", "in": "path", "required": True, "schema": {"type": "string", "examples": list(store.tables)}}
    admission = {"type": "object", "required": ["paused"], "properties": {"paused": {"type": "boolean"}, "staged": {"type": "object"}}}
    sizes = {"type": "object", "additionalProperties": {"type": "integer"}}
    add = openapi.add
    add(app, Operation("GET", "/membership/{node}", "a storage node renews its membership (through the virtual CPU)", {
        200: Answer("the node's membership", schema_of(Membership)),
        404: Answer("no such node in this cell", ERROR),
        503: Answer("membership requests are paused, or turned away by admission control (overloaded)", ERROR),
    }, parameters=(node, DEADLINE), tag="membership"), membership)  # fmt: skip
    etag = {"name": "If-None-Match", "in": "header", "schema": {"type": "string"}, "description": "the ETag of the map the caller has"}
    add(app, Operation("GET", "/partition-map", "who holds each partition, for the customers' routing", {
        200: Answer("the map", schema_of(PartitionMap), headers=("ETag",)),
        304: Answer("unchanged since the ETag given", headers=("ETag",)),
    }, parameters=(etag,), tag="membership"), partition_map)  # fmt: skip
    add(app, Operation("GET", "/status", "the service's state: pause, cores, in-flight work, membership sizes", {
        200: Answer("the metadata service's status", schema_of(MetadataStatus)),
    }, parameters=(LAG_WINDOW,)), status)  # fmt: skip
    add(app, Operation("POST", "/admin/pause", "turn membership requests away at the door", {
        200: Answer("paused", {"type": "object", "required": ["paused"], "properties": {"paused": {"const": True}}}),
    }, protected=True, tag="admin"), pause)  # fmt: skip
    resume_body = _args_schema("resume-metadata", ("staged", "every_s"))
    add(app, Operation("POST", "/admin/resume", "readmit the fleet, at once or in steps", {
        200: Answer("the admission now", admission),
    }, body=resume_body, protected=True, tag="admin"), resume)  # fmt: skip
    capacity_body = _args_schema("capacity", ("cores", "break_glass"), required=("cores",))
    add(app, Operation("POST", "/admin/capacity", "set the virtual cores, through the overloaded shared path unless break_glass", {
        200: Answer("the cores now", obj(cores=NUMBER)),
    }, body=capacity_body, body_required=True, protected=True, tag="admin"), capacity)  # fmt: skip
    grow = {"type": "object", "required": ["add"], "properties": {"add": {"type": "integer", "minimum": 1, "maximum": MAX_GSIS}}}
    grown = obj(table=STRING, gsis=INTEGER, version=INTEGER, sizes=sizes)
    add(app, Operation("POST", "/admin/tables/{table}/gsis", f"customers adopt more GSIs on a table (at most {MAX_GSIS})", {
        200: Answer("the table's GSIs now", grown),
        400: Answer("not a number of GSIs, or the table would have too many", ERROR),
        404: Answer("no such table", ERROR),
        409: Answer("the table changed while the request waited for the CPU", ERROR),
    }, parameters=(table,), body=grow, body_required=True, protected=True, tag="admin"), grow_gsis)  # fmt: skip


def _args_schema(fault: str, keys: tuple[str, ...], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The admin API's body: the catalog's arguments of the lease of the same name."""
    wire = catalog.FAULTS[fault].wire
    return {"type": "object", "required": list(required), "properties": {k: catalog.arg_schema(wire[k]) for k in keys}}


async def _service_ctx(app: web.Application) -> AsyncIterator[None]:
    app[SERVICE].start()
    yield


def lease_args(fault: str, body: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The admin API's arguments, checked as the fault catalog checks the lease of that name."""
    spec = catalog.FAULTS[fault]
    try:
        return {k: spec.wire[k].check(body[k]) if k in body else spec.wire[k].parse(spec.wire[k].default) for k in keys}
    except catalog.ChaosError as exc:
        raise BadRequest(str(exc)) from None


async def membership(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    node = request.match_info["node"]
    if not service.store.has_node(node):
        service.metrics.requests.labels("membership", "rejected").inc()
        return json_error(404, "unknown_node", f"no storage node {node!r} in this cell")
    entries, s = service.store.entries(node), service.settings
    work = membership_work_s(s, entries)
    refused = door(
        service.admission, node, service.now(), work, service.cpu.inflight, service.cpu.cores, _deadline(request, s.allowance_s), s
    )
    if refused is not None:
        service.metrics.requests.labels("membership", refused).inc()
        answer = json_error(503, refused, REFUSED[refused])
        answer.headers[REFUSAL_HEADER] = refused
        return answer
    await service.on_cpu("membership", work)
    service.metrics.entries.observe(entries)
    return web.Response(body=service.store.membership(node), content_type="application/json")


DEADLINE = {
    "name": DEADLINE_HEADER,
    "in": "header",
    "schema": {"type": "string"},
    "description": "seconds the caller will wait (its allowance); deadline-aware shedding reads it (default: the lab's allowance)",
}


def _deadline(request: web.Request, default: float) -> float:
    """The caller's deadline from its header, if it is a sane number of seconds."""
    try:
        value = float(request.headers.get(DEADLINE_HEADER, ""))
    except ValueError:
        return default
    return value if 0 < value <= 3600 else default


async def partition_map(request: web.Request) -> web.Response:
    store = request.app[SERVICE].store
    etag = f'"{store.version}"'
    if request.headers.get("If-None-Match") == etag:
        return web.Response(status=304, headers={"ETag": etag})  # routers poll this: unchanged costs nothing
    return web.Response(body=store.partition_map(), content_type="application/json", headers={"ETag": etag})


async def pause(request: web.Request) -> web.Response:
    request.app[SERVICE].pause()
    return web.json_response({"paused": True})


async def resume(request: web.Request) -> web.Response:
    args = lease_args("resume-metadata", await read_object(request), ("staged", "every_s"))
    service = request.app[SERVICE]
    service.resume(args["staged"], args["every_s"])
    return web.json_response(service.admission.describe(service.now()))


async def capacity(request: web.Request) -> web.Response:
    body = await read_object(request)
    if "cores" not in body:
        raise BadRequest("cores is required")
    args = lease_args("capacity", body, ("cores", "break_glass"))
    await request.app[SERVICE].set_capacity(args["cores"], args["break_glass"])
    return web.json_response({"cores": args["cores"]})


async def grow_gsis(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    store = service.store
    table = request.match_info["table"]
    add = int(number(await read_object(request), "add", 1, MAX_GSIS, integer=True))
    if table not in store.tables:
        return json_error(404, "unknown_table", f"no table {table!r}; tables: {', '.join(store.tables)}")
    if len(store.tables[table].gsis) + add > MAX_GSIS:
        return json_error(400, "too_many_gsis", f"{table} would exceed {MAX_GSIS} GSIs")
    if not service.settings.admin_apart:
        await service.on_cpu("admin", service.settings.admin_cost_s)
    try:
        gsis = store.add_gsis(table, add)
    except (UnknownTable, TooManyGsis) as exc:  # changed while this request waited for the CPU
        return json_error(409, "conflict", str(exc))
    service.store_changed()
    return web.json_response({"table": table, "gsis": gsis, "version": store.version, "sizes": store.size_distribution()})


async def status(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    service.sync_metrics()
    now = service.now()
    return web.json_response(
        MetadataStatus(
            **request.app[LAG].readings(request),
            paused=service.admission.paused,
            admission=service.admission.describe(now),
            cores=service.cpu.cores,
            inflight=service.cpu.inflight,
            busy_cores=service.cpu.busy_cores,
            abandoned_work=service.settings.abandoned_work,
            wasted_work_s=service.wasted_s,
            membership_version=service.store.version,
            membership_sizes={str(k): v for k, v in service.store.size_distribution().items()},
            processing_p99_s=service.latency.quantile(0.99, now),
            allowance_s=service.settings.allowance_s,
            cell=service.cell,
        ).to_json()
    )
