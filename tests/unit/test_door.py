"""The namespace's door (stormlab/engine/door.py): a connection made to a lab port on the host is
passed on, both ways, byte for byte, half-closes and refusals included. Here in one namespace: the
door's listening socket and its target are two ports of this loopback."""

from __future__ import annotations

import asyncio
import socket

from stormlab.engine import door


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


def a_frozen_inside() -> tuple[socket.socket, list[socket.socket]]:
    """A lab process that accepts nothing (frozen, or swamped): its backlog is full, so a new
    connection to it is neither made nor refused (the kernel drops its SYNs and the client waits)."""
    inside = socket.socket()
    inside.bind(("127.0.0.1", 0))
    inside.listen(0)
    queued = []
    for _ in range(3):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(inside.getsockname())
        except BlockingIOError:
            pass
        queued.append(s)
    return inside, queued


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
    inside, queued = a_frozen_inside()
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
    inside, queued = a_frozen_inside()
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
