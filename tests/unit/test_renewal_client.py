"""The plain renewal client against a real loopback server: what it reads, what it drops."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from storage_node.client import Malformed, RenewalClient
from stormcore.wire import REFUSAL_HEADER


class Server:
    """An aiohttp server whose answer each test sets, counting connections and cancelled handlers."""

    def __init__(self) -> None:
        self.cancelled = 0
        self.delay = 0.0
        self.answer = lambda: web.Response(body=b'{"ok":true}')
        self.seen: list[dict[str, str]] = []
        self.peers: set[tuple[str, int]] = set()  # the client connections seen

    @property
    def connections(self) -> int:
        return len(self.peers)

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(dict(request.headers))
        self.peers.add(request.transport.get_extra_info("peername"))
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return self.answer()

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return site.name


@pytest.fixture
async def served():
    server = Server()
    url = await server.start()
    client = RenewalClient(url, REFUSAL_HEADER)
    yield server, client
    client.close()
    await server.runner.cleanup()


def deadline(s: float = 2.0) -> float:
    return asyncio.get_running_loop().time() + s


async def test_an_answer_is_read_and_its_connection_kept_for_the_next(served):
    server, client = served
    request = client.request("/membership/r00-n000", {"X-Stormlab-Deadline": "1"})
    first = await client.get(request, deadline())
    second = await client.get(request, deadline())
    assert (first.status, first.body) == (200, b'{"ok":true}') and second == first
    assert server.connections == 1 and client.connections == 1  # one keep-alive connection, reused
    assert server.seen[0]["X-Stormlab-Deadline"] == "1" and server.seen[0]["Host"].startswith("127.0.0.1:")


async def test_a_refusal_is_read_from_its_header(served):
    server, client = served

    def refused():
        return web.Response(status=503, body=b'{"error":"paused"}', headers={REFUSAL_HEADER: "paused"})

    server.answer = refused
    answer = await client.get(client.request("/membership/x", {}), deadline())
    assert (answer.status, answer.refusal) == (503, "paused")


async def test_a_request_out_of_time_drops_its_connection_and_the_server_cancels_its_work(served):
    server, client = served
    server.delay = 5.0
    with pytest.raises(TimeoutError):
        await client.get(client.request("/membership/x", {}), deadline(0.2))
    assert client.connections == 0
    for _ in range(100):
        if server.cancelled:
            break
        await asyncio.sleep(0.01)
    assert server.cancelled == 1  # the client that gave up went away: the server saw it
    server.delay = 0.0
    assert (await client.get(client.request("/membership/x", {}), deadline())).status == 200
    assert server.connections == 2  # a new connection after the dropped one


async def test_an_idle_connection_the_server_closed_is_replaced_once(served):
    server, client = served
    request = client.request("/membership/x", {})
    await client.get(request, deadline())
    (conn,) = client._idle
    conn.transport.abort()  # closed while idle, its loss not yet delivered when it is taken from the pool
    conn.closed = False
    assert (await client.get(request, deadline())).status == 200
    assert server.connections == 2


async def test_nothing_listening_is_unreachable():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        client = RenewalClient(f"http://127.0.0.1:{port}", REFUSAL_HEADER)
        with pytest.raises(OSError):
            await client.get(client.request("/", {}), deadline())


@pytest.mark.parametrize(
    "raw",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n\r\nno length",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA",
    ],
)
async def test_a_malformed_answer_is_an_error_and_its_connection_dropped(raw):
    closed = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(raw)
        await reader.read()  # until the client drops the connection
        writer.close()
        await writer.wait_closed()
        closed.set()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = RenewalClient(f"http://127.0.0.1:{port}", REFUSAL_HEADER)
    with pytest.raises(Malformed):
        await client.get(client.request("/", {}), deadline())
    assert client.connections == 0
    await asyncio.wait_for(closed.wait(), 5)  # the server saw the client go
    server.close()
    await server.wait_closed()


def test_only_http_urls_with_a_port():
    for url in ("https://127.0.0.1:1", "http://127.0.0.1", "127.0.0.1:80"):
        with pytest.raises(ValueError):
            RenewalClient(url, REFUSAL_HEADER)
