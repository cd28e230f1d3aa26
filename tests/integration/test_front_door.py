"""The metadata service's front door: renewals served off the socket, the same answers as the
app's route; everything else handed to the app on the same connection."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from metadata_service.app import SERVICE, create_app
from metadata_service.front import front_door
from storage_node.client import RenewalClient
from stormcore.wire import REFUSAL_HEADER, Membership
from tests.conftest import eventually

TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def door(tiny_settings):
    """The app behind the front door on a loopback port, as ``serve(..., front=)`` runs it."""
    app = create_app(tiny_settings.replace(cost_base_s=0.0, cost_per_entry_s=0.0), token=TOKEN)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    factory = front_door(app[SERVICE])
    app_protocol = runner.server
    server = await asyncio.get_running_loop().create_server(lambda: factory(app_protocol), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield app, f"http://127.0.0.1:{port}"
    server.close()
    await runner.cleanup()


async def raw(url: str, request: bytes, read_until_close: bool = False) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request)
    try:
        if read_until_close:
            return await asyncio.wait_for(reader.read(), 5)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        return head + await reader.readexactly(length)
    finally:
        writer.close()


async def test_a_renewal_gets_the_same_bytes_as_from_the_apps_route(door):
    app, url = door
    client = RenewalClient(url, REFUSAL_HEADER)
    try:
        fast = await client.get(client.request("/membership/r00n003", {"X-Stormlab-Deadline": "1"}), asyncio.get_running_loop().time() + 5)
    finally:
        client.close()
    assert fast.status == 200
    assert fast.body == app[SERVICE].store.membership("r00n003")
    assert Membership.decode(fast.body).node == "r00n003"
    async with aiohttp.ClientSession() as session, session.get(f"{url}/healthz") as resp:
        assert resp.status == 200 and await resp.json() == {"ok": True}
    ok = app[SERVICE].metrics.registry.get_sample_value("stormlab_metadata_requests_total", {"kind": "membership", "outcome": "ok"})
    assert ok == 1.0  # counted as the route counts it


async def test_unknown_nodes_and_pauses_answer_as_the_app_does(door):
    app, url = door
    async with aiohttp.ClientSession(headers=AUTH) as session:
        async with session.get(f"{url}/membership/nobody") as resp:
            assert resp.status == 404 and (await resp.json())["error"] == "unknown_node"
        async with session.post(f"{url}/faults", json={"fault": "pause-metadata", "duration_s": 5}) as resp:
            assert resp.status == 201, await resp.text()  # the fault API, handed to the app on the same port
        async with session.get(f"{url}/membership/r00n000") as resp:
            assert resp.status == 503 and resp.headers[REFUSAL_HEADER] == "paused"
            assert (await resp.json())["error"] == "paused"


async def test_a_connection_that_renewed_is_handed_to_the_app_for_anything_else(door):
    _, url = door
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:  # one keep-alive connection
        for path in ("/membership/r00n001", "/status", "/membership/r00n002", "/metrics", "/nowhere"):
            async with session.get(f"{url}{path}") as resp:
                await resp.read()
                assert resp.status == (404 if path == "/nowhere" else 200), path


async def test_pipelined_renewals_are_answered_in_order(door):
    app, url = door
    request = b"GET /membership/r00n004 HTTP/1.1\r\nHost: x\r\n\r\nGET /membership/r00n005 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    both = await raw(url, request, read_until_close=True)
    first = app[SERVICE].store.membership("r00n004")
    second = app[SERVICE].store.membership("r00n005")
    assert both.index(first) < both.index(second)


@pytest.mark.parametrize(
    "request_bytes,status",
    [
        (b"GET /membership/r00n000 HTTP/1.1\r\nContent-Length: nope\r\n\r\n", 400),  # the app's parser answers
        (b"BREW /membership/r00n000 HTTP/1.1\r\n\r\n", 400),
        (b"GET /membership/%ZZ HTTP/1.1\r\nConnection: close\r\n\r\n", 404),
    ],
)
async def test_bad_requests_get_the_apps_4xx(door, request_bytes, status):
    _, url = door
    answer = await raw(url, request_bytes, read_until_close=True)
    assert answer.split(b" ")[1] == b"%d" % status, answer[:80]


async def test_a_client_that_goes_away_abandons_its_work(door, tiny_settings):
    app, url = door
    service = app[SERVICE]
    service.scheduler.set_cores(0.1)  # slow enough that the renewal is still on the CPU
    service.settings = service.settings.replace(cost_base_s=50.0)
    client = RenewalClient(url, REFUSAL_HEADER)
    try:
        with pytest.raises(TimeoutError):
            await client.get(client.request("/membership/r00n000", {}), asyncio.get_running_loop().time() + 0.3)
    finally:
        client.close()

    async def abandoned():
        labels = {"kind": "membership", "outcome": "abandoned"}
        value = service.metrics.registry.get_sample_value("stormlab_metadata_requests_total", labels)
        return value == 1.0 and service.cpu.inflight == 0

    await eventually(abandoned, what="the dropped renewal's work cancelled")
