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


async def a_door(target_port: int) -> tuple[asyncio.AbstractServer, int]:
    sock = door.listen([0])[0]
    server = await asyncio.get_running_loop().create_server(lambda: door.Outside(("127.0.0.1", target_port)), sock=sock)
    return server, sock.getsockname()[1]


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
