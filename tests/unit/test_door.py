"""The namespace's door (stormlab/engine/door.py): a connection made to a lab port on the host is
passed on, both ways, byte for byte, half-closes and refusals included. Here in one namespace: the
door's listening socket and its target are two ports of this loopback."""

from __future__ import annotations

import asyncio
import socket

from stormlab.engine import door
from stormlab.runs.fuzz_door import frozen_inside


async def echo_server() -> tuple[asyncio.AbstractServer, int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()  # to EOF: the client half-closed
        writer.write(data[::-1])
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def a_door(target_port: int, waiting: door.Waiting | None = None) -> tuple[asyncio.AbstractServer, int]:
    sock = door.listen([0])[0]
    waiting = waiting or door.Waiting()
    server = await asyncio.get_running_loop().create_server(lambda: door.Outside(("127.0.0.1", target_port), waiting), sock=sock)
    return server, sock.getsockname()[1]


async def closed_by_the_door(reader: asyncio.StreamReader) -> bool:
    """The door closed the connection (as a refusal: a reset, or an end with nothing said)."""
    try:
        return await asyncio.wait_for(reader.read(), 5) == b""
    except ConnectionResetError:
        return True


async def closed(writer: asyncio.StreamWriter, *servers: asyncio.AbstractServer) -> None:
    """The client's connection closed, the servers too, and the door's ends given the loop's turn to close."""
    writer.close()
    await writer.wait_closed()
    for server in servers:
        server.close()
        await server.wait_closed()
    await asyncio.sleep(0.05)


async def test_a_connection_through_the_door_carries_every_byte_both_ways_and_its_half_close():
    inside, port = await echo_server()
    outside, door_port = await a_door(port)
    payload = bytes(range(256)) * 4096  # 1 MiB: past the high-water mark, so reading pauses and resumes
    reader, writer = await asyncio.open_connection("127.0.0.1", door_port)
    writer.write(payload)
    await writer.drain()
    writer.write_eof()  # the answer comes after the request's end, on the same connection
    answer = await asyncio.wait_for(reader.read(), 10)
    assert answer == payload[::-1]
    await closed(writer, outside, inside)


async def test_nothing_listening_inside_is_a_closed_connection_not_a_hang():
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()  # nothing listens there now
    outside, door_port = await a_door(port)
    reader, writer = await asyncio.open_connection("127.0.0.1", door_port)
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed: as the supervisor's health check sees "not yet"
    await closed(writer, outside)


def test_the_ports_are_bound_on_the_hosts_loopback_and_handed_on():
    sock = door.listen([0])[0]
    try:
        assert sock.get_inheritable() and sock.getsockname()[0] == "127.0.0.1"
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)  # listening before the namespace is made
    finally:
        sock.close()


async def test_the_door_holds_no_byte_while_its_inside_connection_is_pending_and_gives_up_on_a_slow_inside(monkeypatch):
    """A local user sent 96 MiB to a lab port while the lab process behind it was frozen: the door
    held all of it (and, out of memory, would take the whole lab down). Now it reads nothing until
    the inside connection is made: the sender waits on the kernel's buffers. After CONNECT_S the
    outside connection is closed, as a refusal."""
    monkeypatch.setattr(door, "CONNECT_S", 1.5)
    inside, queued = frozen_inside()
    outside, door_port = await a_door(inside.getsockname()[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", door_port)
    chunk, sent = b"x" * (1 << 20), 0
    try:
        while sent < 96 << 20:
            writer.write(chunk)
            await asyncio.wait_for(writer.drain(), 0.5)
            sent += len(chunk)
    except (TimeoutError, ConnectionError):
        pass
    assert sent < 32 << 20, f"the door took {sent >> 20} MiB for an inside that never accepted"
    assert await closed_by_the_door(reader)  # after CONNECT_S, not held for ever
    writer.transport.abort()
    outside.close()
    await outside.wait_closed()
    for s in (inside, *queued):
        s.close()


async def test_the_door_closes_connections_past_its_limit_of_waiting_ones(monkeypatch):
    monkeypatch.setattr(door, "CONNECT_S", 1.0)
    inside, queued = frozen_inside()
    waiting = door.Waiting(limit=2)
    outside, door_port = await a_door(inside.getsockname()[1], waiting)
    held = [await asyncio.open_connection("127.0.0.1", door_port) for _ in range(2)]
    await asyncio.sleep(0.2)
    assert waiting.now == 2
    reader, writer = await asyncio.open_connection("127.0.0.1", door_port)
    assert await closed_by_the_door(reader)  # the third: closed at once, not queued behind them
    for _, w in [*held, (reader, writer)]:
        w.transport.abort()
    while waiting.now:  # the door gives the two waiting ones up after CONNECT_S
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.05)
    outside.close()
    await outside.wait_closed()
    for s in (inside, *queued):
        s.close()


def test_the_door_fuzzer_finds_nothing_in_this_door_and_counts_what_it_sent(monkeypatch):
    """`stormlab fuzz --only door` against a stand-in for the metadata service (an echo of /healthz)."""
    from stormlab.runs.fuzz import OperationResult
    from stormlab.runs.fuzz_door import fuzz_door

    monkeypatch.setattr(door, "CONNECT_S", 1.0)
    server, port = _healthz_server()
    try:
        rows = fuzz_door(f"http://127.0.0.1:{port}", 40, 1, lambda op: OperationResult("door", op))
    finally:
        server.shutdown()
        server.server_close()
    by = {r.operation: r for r in rows}
    assert set(by) == {"raw bytes (to metadata)", "slow writers (to metadata)", "half-open (to metadata)", "a frozen inside"}
    assert all(not r.findings for r in rows), {r.operation: dict(r.findings) for r in rows}
    assert by["raw bytes (to metadata)"].requests == 40 and by["half-open (to metadata)"].statuses[200] == 20
    assert by["slow writers (to metadata)"].statuses[200] == 4 and by["a frozen inside"].statuses[0] == 4  # closed, no answer


def test_the_door_fuzzer_finds_a_door_that_keeps_a_connection_to_a_frozen_inside(monkeypatch):
    from stormlab.runs import fuzz_door as fd
    from stormlab.runs.fuzz import OperationResult

    async def never(self) -> None:  # the door before its deadline: a connect that hangs holds the outside for ever
        await asyncio.Event().wait()

    monkeypatch.setattr(door, "CONNECT_S", 0.5)
    monkeypatch.setattr(fd, "ANSWER_S", 0.5)
    monkeypatch.setattr(door.Outside, "_pass_on", never)
    server, port = _healthz_server()
    try:
        rows = fd.fuzz_door(f"http://127.0.0.1:{port}", 4, 1, lambda op: OperationResult("door", op))
    finally:
        server.shutdown()
        server.server_close()
    assert any("kept open past the door's deadlines" in kind for r in rows for kind in r.findings)


def _healthz_server():
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args) -> None:
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 128  # as the lab's processes listen (http.server's 5 drops SYNs past it: the door gives those up)

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_port
