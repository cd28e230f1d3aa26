"""The rack contract (docs/contract.md) as data: what every rack, the lab's or one of a user's,
must answer, described as OpenAPI operations.

The lab's own racks serve the item operations from here (storage_node/app.py), so the contract and
the racks that keep it cannot drift; the supervisor serves the whole description at
``/contract.json`` for anyone writing an external rack; and ``stormlab fuzz`` judges a rack that
does not describe itself (an external one) against it, as it judges every other process against
its own ``/openapi.json``.
"""

from __future__ import annotations

from typing import Any

from stormcore.openapi import ERROR, Answer, Operation

ITEM = "/nodes/{node}/tables/{table}/partitions/{partition}/items/{key}"
MAX_KEY = 256  # characters of an item's key
MAX_VALUE_BYTES = 4096  # an item's value, as compact JSON in UTF-8 (what is stored)

REFUSALS = {
    400: Answer("bad_request: a partition that is not a non-negative integer, a key over 256 characters, or a bad body", ERROR),
    404: Answer("unknown_node (no such node on this rack) or not_found (no such item)", ERROR),
    409: Answer("wrong_owner: the node does not hold that partition (of the table, or of the GSI ?index names)", ERROR),
    503: Answer("disqualified: the node's membership lapsed (or it has not renewed yet): it refuses customers", ERROR),
}
_VALUE = {
    "type": "object",
    "required": ["node", "key", "value"],
    "properties": {"node": {"type": "string"}, "key": {"type": "string"}, "value": {}},
}
_QUERY = {
    "type": "object",
    "required": ["node", "index", "items"],
    "properties": {"node": {"type": "string"}, "index": {"type": "string"}, "items": {"type": "array", "maxItems": 100}},
}
_PUT = {"type": "object", "required": ["value"], "properties": {"value": {}}}
_STORED = {
    "type": "object",
    "required": ["node", "key", "stored"],
    "properties": {"node": {"type": "string"}, "key": {"type": "string"}, "stored": {"const": True}},
}
INDEX = {"name": "index", "in": "query", "schema": {"type": "string"}, "description": "read a GSI's partition instead"}

# /status: what the lab reads of any rack (more may come; the lab's own racks say more).
STATUS_FIELDS: dict[str, dict[str, Any]] = {
    "component": {"const": "rack"},
    "rack": {"type": "integer", "minimum": 0},
    "pid": {"type": ["integer", "null"]},
    "link_up": {"type": "boolean"},
    "nodes_total": {"type": "integer", "minimum": 0},
    "nodes_serving": {"type": "integer", "minimum": 0},
    "nodes_disqualified": {"type": "integer", "minimum": 0},
    "nodes_starting": {"type": "integer", "minimum": 0},
    "renewal_p99_s": {"type": ["number", "null"], "minimum": 0},
    "renewal_attempts_total": {
        "type": "object",
        "required": ["first", "retry"],
        "properties": {"first": {"type": "number", "minimum": 0}, "retry": {"type": "number", "minimum": 0}},
    },
    "allowance_s": {"type": "number", "exclusiveMinimum": 0},
    "loop_lag_p99_s": {"type": "number", "minimum": 0},
}
STATUS_OPTIONAL: dict[str, dict[str, Any]] = {
    "nodes": {"type": ["array", "null"], "items": {"type": "object", "required": ["id", "state"]}},  # null: not asked for
    "schedule_origin_unix": {"type": ["number", "null"]},
}


def where(nodes: list[str]) -> tuple[dict[str, Any], ...]:
    """An item's path parameters, with the rack's node ids as examples."""
    return (
        {"name": "node", "in": "path", "required": True, "schema": {"type": "string", "examples": nodes[:3]}},
        {"name": "table", "in": "path", "required": True, "schema": {"type": "string", "examples": ["catalog"]}},
        {"name": "partition", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 0}},
        {"name": "key", "in": "path", "required": True, "schema": {"type": "string", "maxLength": MAX_KEY}},
    )


def get_item(nodes: list[str]) -> Operation:
    return Operation("GET", ITEM, "a customer reads an item (or queries a GSI with ?index=)", {
        200: Answer("the item; with ?index, the table's items with this key on the rack (at most 100)", {"oneOf": [_VALUE, _QUERY]}),
        **REFUSALS,
    }, parameters=(*where(nodes), INDEX), tag="customers")  # fmt: skip


def put_item(nodes: list[str]) -> Operation:
    return Operation("PUT", ITEM, "a customer writes an item: kept before the answer", {
        200: Answer("stored", _STORED),
        **REFUSALS,
        507: Answer("quota: the rack's item store is full", ERROR),
    }, parameters=(*where(nodes), INDEX), body=_PUT, body_required=True, tag="customers")  # fmt: skip


def operations(nodes: list[str]) -> list[Operation]:
    """Every operation of the contract, ``nodes`` the rack's node ids."""
    status = {"type": "object", "required": list(STATUS_FIELDS), "properties": STATUS_FIELDS | STATUS_OPTIONAL}
    nodes_param = {"name": "nodes", "in": "query", "schema": {"type": "string"}, "description": "1: each node's state too"}
    return [
        Operation("GET", "/healthz", "200 once the rack can answer the rest (the launcher waits for it)", {200: Answer("serving", {})}),
        Operation(
            "GET",
            "/status",
            "the rack's nodes: serving, disqualified, starting; renewals",
            {
                200: Answer("the rack's status (wall-clock seconds at the run's speed)", status),
            },
            parameters=(nodes_param,),
        ),  # fmt: skip
        get_item(nodes),
        put_item(nodes),
    ]


def description(nodes: list[str]) -> dict[str, Any]:
    """The contract as an OpenAPI 3.1 document (``nodes``: a rack's node ids, for the examples)."""
    paths: dict[str, dict[str, Any]] = {}
    for op in operations(nodes):
        paths.setdefault(op.path, {})[op.method.lower()] = op.describe()
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "stormlab rack contract",
            "version": "1",
            "description": "What any rack of the fleet answers, the lab's or yours: docs/contract.md. GET /metrics is optional.",
        },
        "paths": paths,
    }
