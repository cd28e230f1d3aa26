"""The fuzzer finds what it is for: a 500, an undescribed answer, a body of the wrong shape, an
invalid request carried out, a protected operation served without the token; and nothing on an
operation that keeps its description."""

import asyncio

import pytest
import requests
import schemathesis
from aiohttp import web

from stormcore import openapi
from stormcore.auth import token_middleware
from stormcore.openapi import BOOLEAN, ERROR, Answer, Operation, obj
from stormcore.web import json_error, json_errors, read_object
from stormlab.runs.fuzz import fuzz_operation, sent_was_valid, too_long

TOKEN = "a-test-token-long-enough"
OK = Answer("fine", obj(ok=BOOLEAN))


def broken_app() -> web.Application:
    app = web.Application(middlewares=[json_errors, token_middleware(TOKEN)])
    openapi.serve_description(app, "a broken service")

    async def fine(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def crash(request: web.Request) -> web.Response:
        raise RuntimeError("a bug")

    async def shape(request: web.Request) -> web.Response:
        return web.json_response({"ok": "yes"})

    async def teapot(request: web.Request) -> web.Response:
        return json_error(418, "teapot", "not described")

    async def lenient(request: web.Request) -> web.Response:
        await read_object(request)
        return web.json_response({"ok": True})

    small = obj(n={"type": "integer", "minimum": 0, "maximum": 5})
    openapi.add(app, Operation("GET", "/fine", "keeps its description", {200: OK}), fine)
    openapi.add(app, Operation("POST", "/checked", "refuses what its description refuses", {200: OK, 400: Answer("bad", ERROR)},
                               body=small, body_required=True), checked_handler())  # fmt: skip
    openapi.add(app, Operation("GET", "/crash", "raises", {200: OK}), crash)
    openapi.add(app, Operation("GET", "/shape", "answers the wrong shape", {200: OK}), shape)
    openapi.add(app, Operation("GET", "/teapot", "answers a status it does not describe", {200: OK}), teapot)
    openapi.add(app, Operation("POST", "/lenient", "carries out invalid requests", {200: OK}, body=small, body_required=True), lenient)
    openapi.add(app, Operation("POST", "/open", "described as protected, served to anyone", {200: OK}, protected=True), fine)
    return app


def checked_handler():
    async def checked(request: web.Request) -> web.Response:
        body = await read_object(request)
        n = body.get("n")
        if set(body) - {"n"} or isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 5:
            return json_error(400, "bad_request", "n must be an integer 0-5")
        return web.json_response({"ok": True})

    return checked


@pytest.fixture
async def served(aiohttp_server):
    server = await aiohttp_server(broken_app())
    url = str(server.make_url("")).rstrip("/")
    description = await asyncio.to_thread(schemathesis.openapi.from_url, f"{url}/openapi.json")
    ops = {op.path: op for op in (found.ok() for found in description.get_all_operations())}
    return url, ops


async def fuzz(served, path, n=40):
    url, ops = served
    return await asyncio.to_thread(fuzz_operation, "broken", url, ops[path], TOKEN, n, 1)


@pytest.mark.parametrize(
    "path,finding",
    [
        ("/crash", "server error: 500"),
        ("/shape", "violates schema"),
        ("/teapot", "Undocumented status code"),
        ("/lenient", "Schema-violating request accepted"),
        ("/open", "served without the lab token"),
    ],
)
async def test_the_fuzzer_finds_each_kind_of_bug(served, path, finding):
    result = await fuzz(served, path)
    print(result.findings)
    assert result.requests == 40
    assert any(finding in kind for kind in result.findings), result.findings
    assert all(result.repro[kind].startswith("curl") for kind in result.findings)


@pytest.mark.parametrize("path", ["/fine", "/checked"])
async def test_an_operation_that_keeps_its_description_has_no_findings(served, path):
    result = await fuzz(served, path, n=60)
    assert result.requests == 60 and not result.findings, result.findings
    if path == "/checked":
        assert result.negative == 30 and result.statuses[400] >= 30 and result.statuses[200] >= 1


FILTER = {"parameters": [{"name": "fault", "in": "query", "schema": {"enum": ["blip", "freeze"]}}]}


def prepared(url: str, method: str = "DELETE"):
    return requests.Request(method, url).prepare()


def test_an_invalid_value_that_went_on_the_wire_as_a_valid_one_is_not_a_finding():
    """schemathesis draws ["blip"] (an array: invalid) and sends fault=blip (valid): the service
    took a valid request. Only that is excused: a value the schema refuses, a number, a body, a path."""
    assert sent_was_valid(FILTER, prepared("http://h/faults?fault=blip"))
    assert sent_was_valid(FILTER, prepared("http://h/faults"))  # the filter is optional
    assert not sent_was_valid(FILTER, prepared("http://h/faults?fault=meteor"))
    assert not sent_was_valid(FILTER, prepared("http://h/faults?fault=blip&fault=freeze"))
    numbers = {"parameters": [{"name": "n", "in": "query", "schema": {"type": "integer", "minimum": 0}}]}
    assert not sent_was_valid(numbers, prepared("http://h/x?n=3"))  # not judged here, so not excused
    assert not sent_was_valid({**FILTER, "requestBody": {}}, prepared("http://h/faults?fault=blip", "POST"))


def test_a_request_line_too_long_for_the_http_layer_is_its_refusal():
    assert too_long(prepared("http://h/status?x=" + "y" * 9000, "GET"))
    assert not too_long(prepared("http://h/status?x=y", "GET"))
