"""Each process's HTTP API, described where its routes are added and served at ``/openapi.json``.

A route is added with :func:`add` and an :class:`Operation` that says what it takes and every
answer it may give; the description (OpenAPI 3.1) is built from those operations, so a route
cannot be served without being described. ``stormlab fuzz`` reads these descriptions and sends
each live process thousands of generated requests, good and bad: an answer the description does
not list is a bug, as is a 500.

Shared pieces: :data:`ERROR` (every error answer, ``{"error": …, "message": …}``),
:func:`schema_of` (a wire dataclass's JSON Schema, so a ``/status`` is described by the class
that writes it); the fault catalog describes its own requests (``catalog.body_schema``).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

JSON = "application/json"
ERROR: dict[str, Any] = {
    "type": "object",
    "required": ["error", "message"],
    "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
}
STRING, INTEGER, NUMBER, BOOLEAN = ({"type": t} for t in ("string", "integer", "number", "boolean"))


def obj(**props: dict[str, Any]) -> dict[str, Any]:
    """A JSON object with these properties, each required (more may come)."""
    return {"type": "object", "required": list(props), "properties": props}


LAG_WINDOW = {
    "name": "lag_window_s",
    "in": "query",
    "description": "seconds over which loop_lag_p99_s is taken (default 10; clamped to 0.1 s - 24 h)",
    "schema": {"type": "number"},
}


@dataclass(frozen=True)
class Answer:
    description: str
    schema: dict[str, Any] | None = None  # None: no body
    media: str = JSON
    headers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Operation:
    """One method on one path: what it takes (``parameters`` as OpenAPI parameter objects, a JSON
    ``body`` schema) and every answer it gives. ``protected`` ones need the lab token (401)."""

    method: str
    path: str
    summary: str
    answers: Mapping[int, Answer]
    parameters: tuple[dict[str, Any], ...] = ()
    body: dict[str, Any] | None = None
    body_required: bool = False
    protected: bool = False
    tag: str = ""

    def all_answers(self) -> dict[int, Answer]:
        out = dict(self.answers)
        if self.body is not None:  # read_object: not JSON, not an object, too big
            out.setdefault(400, Answer("the body is not a JSON object of the documented shape", ERROR))
            out.setdefault(413, Answer("the body is larger than 64 KiB", ERROR))
        if any(p["in"] == "path" for p in self.parameters):  # a value that does not fit the route
            out.setdefault(404, Answer("no such route, or no such item", ERROR))
        if any(p["in"] == "query" and p["schema"].get("type") == "number" for p in self.parameters):
            out.setdefault(400, Answer("a query parameter is not a number", ERROR))
        if self.protected:
            out[401] = Answer("the lab token is missing or wrong", ERROR)
        return out

    def describe(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"summary": self.summary, "operationId": f"{self.method.lower()}{_op_name(self.path)}", "responses": {}}
        if self.tag:
            doc["tags"] = [self.tag]
        if self.parameters:
            doc["parameters"] = [dict(p) for p in self.parameters]
        if self.body is not None:
            doc["requestBody"] = {"required": self.body_required, "content": {JSON: {"schema": self.body}}}
        if self.protected:
            doc["security"] = [{"labToken": []}]
        for status, answer in sorted(self.all_answers().items()):
            resp: dict[str, Any] = {"description": answer.description}
            if answer.schema is not None:
                resp["content"] = {answer.media: {"schema": answer.schema}}
            if answer.headers:
                resp["headers"] = {h: {"schema": {"type": "string"}} for h in answer.headers}
            doc["responses"][str(status)] = resp
        return doc


def _op_name(path: str) -> str:
    words = [w.strip("{}") for w in path.replace("-", "/").replace(".", "/").split("/") if w]
    return "".join(w[:1].upper() + w[1:] for w in words) or "Root"


OPERATIONS = web.AppKey("openapi_operations", list[Operation])
TITLE = web.AppKey("openapi_title", str)


def add(app: web.Application, op: Operation, handler: Callable) -> None:
    """Add ``handler`` at ``op.method op.path`` and its description to ``/openapi.json``."""
    app.setdefault(OPERATIONS, []).append(op)
    app.router.add_route(op.method, op.path, handler)


def document(app: web.Application) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for op in app.get(OPERATIONS, []):
        paths.setdefault(op.path, {})[op.method.lower()] = op.describe()
    return {
        "openapi": "3.1.0",
        "info": {"title": app.get(TITLE, "stormlab"), "version": "1", "description": "A process of stormlab; see docs/api.md"},
        "paths": paths,
        "components": {"securitySchemes": {"labToken": {"type": "http", "scheme": "bearer", "description": "the lab token (make token)"}}},
    }


def serve_description(app: web.Application, title: str) -> None:
    app[TITLE] = title

    async def openapi(request: web.Request) -> web.Response:
        return web.json_response(document(request.app))

    add(
        app,
        Operation(
            "GET", "/openapi.json", "this description", {200: Answer("the OpenAPI 3.1 description", {"type": "object"})}, tag="common"
        ),
        openapi,
    )


def undocumented(app: web.Application) -> list[str]:
    """Routes served without a description (HEAD, which aiohttp adds beside each GET, aside)."""
    described = {(op.method, op.path) for op in app.get(OPERATIONS, [])}
    routes = {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource is not None and r.method != "HEAD"}
    return sorted(f"{m} {p}" for m, p in routes - described)


# -- schemas from the types that write the documents ----------------------------------------------


def schema_of(cls: type, **extra: Any) -> dict[str, Any]:
    """The JSON Schema of a wire dataclass's ``to_json``: its fields (``component`` as a constant
    when the class has one), every field required."""
    hints = typing.get_type_hints(cls)
    props = {f.name: _schema(hints[f.name]) for f in dataclasses.fields(cls)}
    component = getattr(cls, "COMPONENT", "")
    if component:
        props = {"component": {"const": component}, **props}
    return {"type": "object", "required": list(props), "properties": props, **extra}


def _schema(hint: Any) -> dict[str, Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_schema(a) for a in args]}
    if hint is type(None):
        return {"type": "null"}
    if hint is Any:
        return {}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return schema_of(hint)
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if hint in simple:
        return {"type": simple[hint]}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema(args[1])}
    if origin in (list, tuple):
        return {"type": "array", "items": _schema(args[0]) if args else {}}
    raise TypeError(f"no JSON Schema for {hint!r}")
