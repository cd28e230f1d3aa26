"""Every parse of untrusted input in the shared checks is total: bytes from a request, a header, a
query, an id or a file, decoded or converted, answer a 4xx (or a clear error), never a 500 or a
traceback. Each case here was a 500 or a traceback on the tree before it."""

from __future__ import annotations

import argparse
import asyncio
import json

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from chaos import cli as chaos_cli
from chaos.catalog import ChaosError
from chaos.control import LeaseRunner, Recorder, add_fault_routes
from stormcore import commandline
from stormcore.auth import carries, token_middleware
from stormcore.documents import encoded_bytes, is_decimal, loads
from stormcore.web import LoopLag, json_errors, read_object
from stormcore.wire import WireError, parse_object
from stormlab.rooms import room_web
from tests.unit.test_room_console import CARD, TOKEN, snap


@pytest.mark.parametrize("text", ["²", "¹²", "٣", "１２", "3²", "", "1" * 19, "-1", "+1", " 1", "1_000"])
def test_a_decimal_is_ascii_digits_only(text):
    """``str.isdigit`` takes superscripts (which ``int`` refuses: a 500) and other scripts' digits."""
    assert not is_decimal(text)


def test_a_decimal_of_ascii_digits_is_one():
    assert is_decimal("0") and is_decimal("42") and is_decimal("9" * 18)


async def test_a_lease_id_in_another_digit_class_is_a_400(aiohttp_client):
    runner = LeaseRunner(Recorder(CollectorRegistry(), ("blip",), "linkproxy"), max_duration_s=600)
    app = web.Application(middlewares=[json_errors])
    add_fault_routes(app, runner, {}, racks_total=10)
    client = await aiohttp_client(app)
    for bad in ("²", "¹²", "٣"):
        answer = await client.delete("/faults", params={"id": bad})
        assert answer.status == 400, bad


@pytest.mark.parametrize("text", ["linkproxy#²", "linkproxy#٣", "linkproxy#" + "9" * 19, "#3"])
def test_a_lease_named_on_the_command_line_in_another_digit_class_is_a_usage_error(text):
    with pytest.raises(ChaosError, match="HOLDER#ID"):
        chaos_cli.parse_lease(text)


async def test_a_lag_window_of_nan_is_a_400_not_a_nan_status(aiohttp_client):
    async def status(request: web.Request) -> web.Response:
        return web.json_response({"window": LoopLag.within(request)})

    app = web.Application(middlewares=[json_errors])
    app.router.add_get("/status", status)
    client = await aiohttp_client(app)
    for bad in ("nan", "NaN", "inf", "-inf", "x"):
        assert (await client.get("/status", params={"lag_window_s": bad})).status == 400, bad
    assert (await (await client.get("/status", params={"lag_window_s": "30"})).json()) == {"window": 30.0}


def test_a_header_of_bytes_that_are_not_utf8_carries_no_token():
    """aiohttp hands a header's bytes that are not UTF-8 on as surrogates; encoding them strictly
    raised UnicodeEncodeError inside the one bearer check: a 500 on every protected route."""
    assert not carries("Bearer \udcff\udcfe", "s3cret")
    assert not carries("Bearer s3cret\ud800", "s3cret")
    assert carries("Bearer s3cret", "s3cret")


async def raw_request(port: int, head: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    await writer.wait_closed()
    return answer


async def test_a_protected_route_given_a_token_of_raw_bytes_is_a_401(aiohttp_server):
    async def faults(request: web.Request) -> web.Response:
        return web.json_response({"faults": []})

    app = web.Application(middlewares=[json_errors, token_middleware("s3cret-token-of-the-lab")])
    app.router.add_get("/faults", faults)
    server = await aiohttp_server(app)
    answer = await raw_request(
        server.port, b"GET /faults HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\nConnection: close\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 401"), answer[:80]


async def test_a_rooms_join_page_given_raw_bytes_and_a_seat_given_a_cookie_of_raw_bytes_answer_4xx(aiohttp_server):
    async def read():
        return {"team-1": snap(0.0)}

    links = {"team-1": {"database": "http://127.0.0.1:1/play#token=db1"}, "team-2": {}}
    console = room_web.Console(CARD, read, room_web.Controls(halt=dict), TOKEN, links=lambda: links)
    server = await aiohttp_server(room_web.app(console))
    answer = await raw_request(
        server.port, b"GET /join/links HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\r\nConnection: close\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 401"), answer[:80]
    [seat] = [s for s in console.seats.shown(links)]
    console.seats.claim(seat.code, None)  # another browser's
    head = (
        f"POST /seat/{seat.code} HTTP/1.1\r\nHost: x\r\nCookie: stormlab-seat=".encode()
        + b"\xff\xfe"
        + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    answer = await raw_request(server.port, head)
    assert answer.startswith(b"HTTP/1.1 409"), answer[:80]
    answer = await raw_request(server.port, b"GET /seat/%ff%fe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 404"), answer[:80]


@pytest.mark.parametrize("body", [b'{"text": "\\ud800"}', b'{"\\udfff": 1}', b'{"a": ["x", {"b": "\\ud83d"}]}'])
def test_a_body_holding_half_a_surrogate_pair_is_not_json_the_lab_takes(body):
    """Python's reader takes "\\ud800"; no UTF-8 holds it, so the size check (encoded_bytes), the
    stores and the pages after the reader raised UnicodeEncodeError: a 500 (a desk's move, an item)."""
    with pytest.raises(WireError, match="surrogate"):
        parse_object(body)
    assert loads(b'{"a": "\\ud83d\\ude00"}') == {"a": "\U0001f600"} and encoded_bytes({"a": "\U0001f600"}) == 12  # a pair is text


async def test_a_desks_move_holding_half_a_surrogate_pair_is_a_400(aiohttp_client):
    async def moves(request: web.Request) -> web.Response:
        body = await read_object(request)
        return web.json_response({"bytes": encoded_bytes(body)})

    app = web.Application(middlewares=[json_errors])
    app.router.add_post("/moves", moves)
    client = await aiohttp_client(app)
    answer = await client.post("/moves", data=b'{"action": "note", "args": {"text": "\\ud800"}}')
    assert answer.status == 400 and "surrogate" in (await answer.json())["message"]


def test_under_json_an_unexpected_exception_still_ends_in_one_error_document(capsys):
    def broken(args: argparse.Namespace) -> int:
        raise KeyError("a bug")

    code = commandline.run("stormlab", argparse.Namespace(json=True, command_words="status"), broken)
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert code == 1 and doc["exit_code"] == 1 and doc["ok"] is False and "KeyError" in doc["error"]
    assert "Traceback" in err  # for the bug report
