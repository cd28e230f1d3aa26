"""The renewal client: a node's membership request in plain HTTP/1.1, close to the machine.

Renewals are the lab's hottest path: every node of the fleet sends one per period, and when a
blipped rack's link returns every node of it sends one at once (the herd). A general HTTP
client builds a request object, a timeout object and a connection key per attempt; this one
sends a node's request bytes, built once, over a connection from its rack's keep-alive pool,
and reads the answer with one header scan. The semantics are the 2015 client's and the same
as the general client's they replace (``renewal_client=session`` keeps that one):

- one deadline covers the whole attempt, connecting included (the allowance);
- a request that ran out of time drops its connection: the server sees the client go away
  (and cancels the abandoned work, or not, by its own setting); so does any error;
- an answer with keep-alive returns its connection to the pool, newest used first;
- a pooled connection the server closed while it sat idle is retried once on a new one (the
  general client does the same for idempotent requests), any other loss is ``unreachable``.

Nothing here decides what an answer means: the node does.
"""

from __future__ import annotations

import asyncio
from typing import NamedTuple
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 16 * 1024  # a membership answer's head is a few hundred bytes


class Answer(NamedTuple):
    status: int
    refusal: str  # the refusal header's value, "" when absent
    body: bytes


class ServerClosed(ConnectionResetError):
    """The connection closed before any byte of the answer arrived."""


class Malformed(ValueError):
    """The answer is not HTTP/1.1 this client reads (it is dropped with its connection)."""


class _Connection(asyncio.Protocol):
    __slots__ = ("transport", "buffer", "waiter", "closed", "refusal_header", "keep_alive")

    def __init__(self, refusal_header: bytes) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[Answer] | None = None
        self.closed = False
        self.refusal_header = refusal_header  # lower case
        self.keep_alive = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        try:
            answer = self._parse()
        except Malformed as e:
            waiter.set_exception(e)
            return
        if answer is not None:
            waiter.set_result(answer)

    def eof_received(self) -> bool:
        return False  # the transport closes itself; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            if self.buffer:
                waiter.set_exception(ConnectionResetError("the connection closed in the middle of an answer"))
            else:
                waiter.set_exception(ServerClosed("the connection closed before the answer"))

    def exchange(self, request: bytes) -> asyncio.Future[Answer]:
        assert self.transport is not None
        if self.transport.is_closing():  # closed by the server, its loss not yet delivered
            raise ServerClosed("the connection was closing")
        self.waiter = waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return waiter

    def drop(self) -> None:
        """Close at once, unsent bytes and all: a client that gave up."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _parse(self) -> Answer | None:
        buffer = self.buffer
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(buffer) > MAX_HEAD_BYTES:
                raise Malformed("an answer's head past 16 KiB")
            return None
        lines = bytes(buffer[:end]).split(b"\r\n")
        status_line = lines[0]
        if not status_line.startswith(b"HTTP/1.") or len(status_line) < 12:
            raise Malformed(f"not an HTTP/1 status line: {status_line[:40]!r}")
        try:
            status = int(status_line[9:12])
        except ValueError:
            raise Malformed(f"no status code in {status_line[:40]!r}") from None
        length, refusal, keep_alive = -1, "", status_line.startswith(b"HTTP/1.1")
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    raise Malformed("a Content-Length that is not a number") from None
            elif name == self.refusal_header:
                refusal = value.strip().decode("latin-1")
            elif name == b"connection":
                keep_alive = value.strip().lower() == b"keep-alive"
            elif name == b"transfer-encoding":
                raise Malformed("a chunked answer (membership answers carry a Content-Length)")
        if length < 0:
            raise Malformed("an answer without a Content-Length")
        start = end + 4
        if len(buffer) < start + length:
            return None
        body = bytes(buffer[start : start + length])
        if len(buffer) > start + length:
            raise Malformed("bytes after the answer nobody asked for")
        buffer.clear()
        self.keep_alive = keep_alive
        return Answer(status, refusal, body)


class RenewalClient:
    """One rack's connections to its link (``http://host:port``), shared by its nodes."""

    def __init__(self, url: str, refusal_header: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.port is None:
            raise ValueError(f"the renewal client speaks to http://HOST:PORT, not {url!r}")
        self.host, self.port = parts.hostname, parts.port
        self.host_header = parts.netloc
        self._refusal_header = refusal_header.lower().encode()
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    def request(self, path: str, headers: dict[str, str]) -> bytes:
        """The bytes of ``GET path``: built once by each caller and sent as they are."""
        lines = [f"GET {path} HTTP/1.1", f"Host: {self.host_header}", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
        return "\r\n".join(lines).encode("latin-1")

    async def get(self, request: bytes, deadline: float) -> Answer:
        """Send ``request`` and read its answer by ``deadline`` (the loop's clock), or raise
        TimeoutError (the connection dropped), OSError (unreachable) or ValueError (malformed)."""
        conn = None
        try:
            async with asyncio.timeout_at(deadline):
                conn = self._reuse()
                if conn is not None:
                    try:
                        answer = await conn.exchange(request)
                    except ServerClosed:  # it closed while idle: once more on a new one
                        conn = None
                if conn is None:
                    conn = await self._connect()
                    answer = await conn.exchange(request)
        except BaseException:
            if conn is not None:
                self._discard(conn)
            raise
        if answer.status and conn.keep_alive and not conn.closed:
            conn.waiter = None
            self._idle.append(conn)
        else:
            self._discard(conn)
        return answer

    def _reuse(self) -> _Connection | None:
        idle = self._idle
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
            self._open.discard(conn)
        return None

    async def _connect(self) -> _Connection:
        header = self._refusal_header
        _, conn = await asyncio.get_running_loop().create_connection(lambda: _Connection(header), self.host, self.port)
        self._open.add(conn)
        return conn

    def _discard(self, conn: _Connection) -> None:
        conn.drop()
        self._open.discard(conn)

    @property
    def connections(self) -> int:
        """Connections open now (idle in the pool or carrying a request)."""
        return sum(1 for c in self._open if not c.closed)

    def close(self) -> None:
        for conn in list(self._open):
            conn.drop()
        self._open.clear()
        self._idle.clear()
