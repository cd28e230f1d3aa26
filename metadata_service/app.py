"""The metadata service's HTTP face: answers membership renewals through the virtual CPU.

Routes:
  GET  /membership/{node}          a node's membership list (costs base + per_entry x entries)
  GET  /partition-map              who holds each partition, for customer routing (free)
  POST|GET|DELETE /faults           leases: pause-metadata, resume-metadata, capacity, gsi-growth,
                                    stuck-partition (metadata_service/faults.py)
  GET  /status, /metrics, /healthz
Every change to the service is a lease on /faults (the lab token required), so each ends by
itself and is listed and halted like any fault. Capacity and GSI growth go through the same
overloaded virtual CPU as the renewals: the shared-fate path on which capacity could not be
added in 2015 (``break_glass`` takes a path around it).
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from typing import NamedTuple

from aiohttp import web

from chaos import catalog
from chaos.control import LeaseRunner, Recorder, add_fault_routes
from metadata_service.admission import door, membership_work_s
from metadata_service.faults import MetadataFaults
from metadata_service.membership import MembershipStore
from metadata_service.metrics import MetadataMetrics
from metadata_service.service import MetadataService
from stormcore import openapi
from stormcore.auth import from_env, token_middleware
from stormcore.openapi import ERROR, LAG_WINDOW, Answer, Operation, obj, schema_of
from stormcore.settings import LabSettings, SettingsError
from stormcore.web import BadRequest, LoopLag, base_app, error_body, json_error
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
    metrics = MetadataMetrics.create(cell)
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
    add = openapi.add
    add(app, Operation("GET", "/membership/{node}", "a storage node renews its membership (through the virtual CPU)", {
        200: Answer("the node's membership", schema_of(Membership)),
        404: Answer("no such node in this cell", ERROR),
        503: Answer("membership requests are paused, or turned away by admission control (overloaded)", ERROR),
    }, parameters=(node, DEADLINE), tag="membership"), membership)  # fmt: skip
    etag = {"name": "If-None-Match", "in": "header", "schema": {"type": "string"}, "description": "the ETag of the map the caller has"}
    tables = {"name": "tables", "in": "query", "schema": {"type": "string", "examples": ["queue-metadata"]},
              "description": "comma list of tables: the map of these only (a service reads its own)"}  # fmt: skip
    add(app, Operation("GET", "/partition-map", "who holds each partition, for the customers' routing", {
        200: Answer("the map", schema_of(PartitionMap), headers=("ETag",)),
        304: Answer("unchanged since the ETag given", headers=("ETag",)),
        400: Answer("tables names a table this map does not have", ERROR),
    }, parameters=(etag, tables), tag="membership"), partition_map)  # fmt: skip
    since = {"name": "since", "in": "query", "schema": {"type": "number"}, "description": "unix seconds (default: all kept)"}
    pair = {"anyOf": [{"type": "number"}, {"type": "string"}]}  # [unix seconds, node]: no prefixItems, schemathesis refuses it
    arrived = {"type": "array", "items": {"type": "array", "items": pair, "minItems": 2, "maxItems": 2}}
    add(app, Operation("GET", "/arrivals", "when each membership request reached the door, and whose (the last 20,000): the herd's shape", {
        200: Answer("[unix seconds, node] each, oldest first", obj(arrivals=arrived)),
    }, parameters=(since,), tag="membership"), arrivals)  # fmt: skip
    add(app, Operation("GET", "/status", "the service's state: pause, cores, in-flight work, membership sizes", {
        200: Answer("the metadata service's status", schema_of(MetadataStatus)),
    }, parameters=(LAG_WINDOW,)), status)  # fmt: skip


async def _service_ctx(app: web.Application) -> AsyncIterator[None]:
    app[SERVICE].start()
    yield


class Renewed(NamedTuple):
    """A renewal's answer, for either door (the app's route, or the front door's fast path)."""

    status: int
    body: bytes
    refusal: str = ""  # the refusal header's value on a 503


async def renew(service: MetadataService, node: str, deadline_s: float) -> Renewed:
    """A node renews its membership: the door (pause, admission), then its work on the virtual CPU.
    A caller that goes away cancels this (its work is then cancelled or continued: abandoned_work)."""
    if not service.store.has_node(node):
        service.metrics.requests.labels("membership", "rejected").inc()
        return Renewed(404, error_body("unknown_node", f"no storage node {node!r} in this cell"))
    service.arrivals.append((time.time(), node))  # as it reaches the door: the herd's shape (/arrivals)
    entries, s = service.store.entries(node), service.settings
    work = membership_work_s(s, entries)
    refused = door(service.admission, node, service.now(), work, service.cpu.inflight, service.cpu.cores, deadline_s, s)
    if refused is not None:
        service.metrics.requests.labels("membership", refused).inc()
        return Renewed(503, error_body(refused, REFUSED[refused]), refused)
    await service.on_cpu("membership", work)
    service.metrics.entries.observe(entries)
    return Renewed(200, service.store.membership(node))


async def membership(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    deadline = deadline_of(request.headers.get(DEADLINE_HEADER), service.settings.allowance_s)
    answer = await renew(service, request.match_info["node"], deadline)
    return web.Response(
        status=answer.status,
        body=answer.body,
        content_type="application/json",
        headers={REFUSAL_HEADER: answer.refusal} if answer.refusal else None,
    )


DEADLINE = {
    "name": DEADLINE_HEADER,
    "in": "header",
    "schema": {"type": "string"},
    "description": "seconds the caller will wait (its allowance); deadline-aware shedding reads it (default: the lab's allowance)",
}


def deadline_of(header: str | None, default: float) -> float:
    """The caller's deadline from its header, if it is a sane number of seconds."""
    try:
        value = float(header or "")
    except ValueError:
        return default
    return value if 0 < value <= 3600 else default


async def partition_map(request: web.Request) -> web.Response:
    store = request.app[SERVICE].store
    tables = None
    if "tables" in request.query:  # a service that routes to its own tables reads only theirs
        tables = [t for t in request.query["tables"].split(",") if t]
        unknown = sorted({t for t in tables if t not in store.tables})
        if not tables or unknown:
            known = ", ".join(store.tables)
            return json_error(400, "bad_request", f"tables must name tables of this map ({known}); not {', '.join(unknown) or 'none'}")
    etag = f'"{store.version}"'
    if request.headers.get("If-None-Match") == etag:
        return web.Response(status=304, headers={"ETag": etag})  # routers poll this: unchanged costs nothing
    return web.Response(body=store.partition_map(tables), content_type="application/json", headers={"ETag": etag})


async def arrivals(request: web.Request) -> web.Response:
    try:
        since = float(request.query.get("since", "-inf"))
    except ValueError:
        raise BadRequest("since is unix seconds") from None
    if math.isnan(since):
        raise BadRequest("since is unix seconds")
    kept = request.app[SERVICE].arrivals
    return web.json_response({"arrivals": [[t, node] for t, node in kept if t > since]})


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
