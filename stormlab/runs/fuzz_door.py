"""The rootless lab's door, fuzzed (``stormlab fuzz --only door``): what any local user can send it.

The door (stormlab/engine/door.py) takes every connection made to a lab port on the host and
passes it on to the lab process inside the namespace. Any local user can reach it, so the fuzzer
serves a door of its own in front of the running lab's metadata service (the same code as the
namespace lab's, on a free port) and sends it:

- **raw bytes**: random bytes of random lengths, then the connection closed (the metadata
  service answers what it makes of them; the door must carry it and go on);
- **slow** writers: a valid request a byte at a time;
- **half-open** connections: a valid request, then the sender's half closed before the answer;
- **a frozen inside**: connections to a second door whose inside accepts nothing (a full
  backlog, as a frozen lab process has): each must be closed within the door's connect deadline,
  and none may hold the door's bytes meanwhile.

Then a plain request through the door must be answered, nothing may be waiting, and the door's
loop must have raised nothing. Each kind is one row of the fuzzer's table; a finding is a crash
in the door, a request it did not carry, or a connection it kept.
"""

from __future__ import annotations

import asyncio
import random
import socket
import urllib.parse
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from stormlab.engine import door
from stormlab.engine.ports import HOST

HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: door\r\nConnection: close\r\n\r\n"
AT_ONCE = 32  # connections open at once per kind
ANSWER_S = 10.0


def fuzz_door(metadata_url: str, requests_n: int, seed: int, result_of: Callable[[str], Any]) -> list[Any]:
    """The door's rows (``result_of(operation)`` makes each; the fuzzer's OperationResult)."""
    port = urllib.parse.urlsplit(metadata_url).port
    assert port is not None, metadata_url
    return asyncio.run(_fuzz(port, requests_n, random.Random(seed), result_of))


class Served:
    """A door on a free port in front of ``target``, and whatever its loop caught raising."""

    def __init__(self, target: int) -> None:
        self.target, self.waiting = target, door.Waiting()
        self.raised: list[object] = []

    async def __aenter__(self) -> Served:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: self.raised.append(context.get("exception") or context.get("message")))
        sock = door.listen([0])[0]
        self.port = sock.getsockname()[1]
        self.sides: list[door.Outside] = []
        self.server = await loop.create_server(self._outside, sock=sock)
        return self

    def _outside(self) -> door.Outside:
        side = door.Outside((HOST, self.target), self.waiting)
        self.sides.append(side)
        return side

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        for side in self.sides:  # whatever a finding left open, closed with the door
            for end in (side, side.peer):
                if end is not None and end.transport is not None:
                    end.transport.abort()
        await self.server.wait_closed()
        await asyncio.sleep(0)


async def _fuzz(target: int, n: int, rng: random.Random, result_of: Callable[[str], Any]) -> list[Any]:
    rows = []
    async with Served(target) as served:
        kinds: list[tuple[str, int, Callable[[int], Awaitable[int]]]] = [
            ("raw bytes", n, lambda p: _raw(p, rng.randbytes(rng.randint(1, 4096)))),
            ("slow writers", max(4, n // 25), _slow),
            ("half-open", max(4, n // 2), _half_open),
        ]
        for name, count, one in kinds:
            rows.append(await _kind(result_of(f"{name} (to metadata)"), count, partial(one, served.port), served))
        inside, queued = frozen_inside()
        try:
            async with Served(inside.getsockname()[1]) as stuck:
                rows.append(await _kind(result_of("a frozen inside"), max(4, n // 25), partial(_raw, stuck.port, HEALTHZ), stuck))
                await _settled(stuck, rows[-1])
        finally:
            for s in (inside, *queued):
                s.close()
        await _settled(served, rows[0])
        if await _half_open(served.port) != 200:  # after it all, a plain request is still carried
            rows[0].found("the door no longer carries a plain request", f"GET /healthz via the door to :{target}")
    return rows


async def _kind(row: Any, count: int, one: Callable[[], Awaitable[int]], served: Served) -> Any:
    gate = asyncio.Semaphore(AT_ONCE)

    async def each() -> None:
        async with gate:
            row.requests += 1
            try:
                status = await asyncio.wait_for(one(), ANSWER_S + door.CONNECT_S)
            except TimeoutError:
                row.found("kept open past the door's deadlines", "a connection the door neither carried nor closed")
                return
            row.statuses[status] += 1

    await asyncio.gather(*(each() for _ in range(count)))
    for raised in served.raised:
        row.found(f"the door raised: {raised!r}"[:200], "see the fuzzer's stderr")
    served.raised.clear()
    return row


async def _settled(served: Served, row: Any) -> None:
    for _ in range(int(door.CONNECT_S * 2 * 10) + 10):  # the deadline twice, and a second
        if served.waiting.now == 0:
            return
        await asyncio.sleep(0.1)
    row.found(f"{served.waiting.now} connections still waiting on the inside", "the door's Waiting count after every client closed")


def _status(answer: bytes) -> int:
    """The HTTP status of what came back (0: closed with nothing, or not HTTP)."""
    head = answer.split(b"\r\n", 1)[0].split()
    return int(head[1]) if len(head) > 1 and head[0].startswith(b"HTTP/") and head[1].isdigit() else 0


async def _exchange(port: int, send: Callable[[asyncio.StreamWriter], Awaitable[None]]) -> int:
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        await send(writer)
        return _status(await asyncio.wait_for(reader.read(64 * 1024), ANSWER_S + door.CONNECT_S))
    except (ConnectionError, OSError):
        return 0
    finally:
        writer.transport.abort()


async def _raw(port: int, data: bytes) -> int:
    async def send(writer: asyncio.StreamWriter) -> None:
        writer.write(data)
        writer.write_eof()  # all there is: whatever the process makes of it, it answers or closes
        await writer.drain()

    return await _exchange(port, send)


async def _slow(port: int) -> int:
    async def send(writer: asyncio.StreamWriter) -> None:
        for byte in HEALTHZ:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.01)

    return await _exchange(port, send)


async def _half_open(port: int) -> int:
    async def send(writer: asyncio.StreamWriter) -> None:
        writer.write(HEALTHZ)
        writer.write_eof()
        await writer.drain()

    return await _exchange(port, send)


def frozen_inside() -> tuple[socket.socket, list[socket.socket]]:
    """A listener that accepts nothing, its backlog full: a connection to it is neither made nor refused."""
    inside = socket.socket()
    inside.bind((HOST, 0))
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
