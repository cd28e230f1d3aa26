"""The metadata service's front door: renewals read straight off the socket.

Every node of the fleet renews once a period, and a storm multiplies that: the renewal is the
one request whose cost sets how large a fleet one host can hold. This protocol sits in front
of the aiohttp app on the same port. It reads the request line of each request on a
connection; ``GET /membership/{node}`` and ``GET /healthz`` in HTTP/1.1 without a body it
answers itself, through the same :func:`~metadata_service.app.renew` as the app's route (the
same door, virtual CPU, cores and metrics, the same bytes back); anything else (the admin and
fault API, /status, /metrics, a malformed request) is handed to the aiohttp app with the
bytes read so far, and the connection stays the app's from then on.

As with the app's ``handler_cancellation``, a client that drops its connection cancels its
renewal (its work is cancelled or continued on the virtual CPU, by ``abandoned_work``). An
idle keep-alive connection is closed after ``KEEPALIVE_S``, as aiohttp's server does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from urllib.parse import unquote

from metadata_service.app import Renewed, deadline_of, renew
from metadata_service.service import MetadataService
from stormcore.web import error_body
from stormcore.wire import DEADLINE_HEADER, REFUSAL_HEADER

log = logging.getLogger(__name__)
KEEPALIVE_S = 75.0  # aiohttp's server keeps an idle connection this long
MAX_HEAD_BYTES = 8 * 1024
MEMBERSHIP = b"/membership/"
HEALTHZ = b"/healthz"
HEALTHY = b'{"ok": true}'
DEADLINE = DEADLINE_HEADER.lower().encode()
REASONS = {200: b"OK", 404: b"Not Found", 500: b"Internal Server Error", 503: b"Service Unavailable"}


def answer_bytes(answer: Renewed) -> bytes:
    head = [
        b"HTTP/1.1 %d %s" % (answer.status, REASONS.get(answer.status, b"")),
        b"Content-Type: application/json",
        b"Content-Length: %d" % len(answer.body),
    ]
    if answer.refusal:
        head.append(f"{REFUSAL_HEADER}: {answer.refusal}".encode())
    return b"\r\n".join(head) + b"\r\n\r\n" + answer.body


class FrontDoor(asyncio.Protocol):
    """One connection: renewals served here, anything else handed to ``app_protocol()``."""

    def __init__(self, service: MetadataService, app_protocol: Callable[[], asyncio.Protocol]) -> None:
        self.service, self.app_protocol = service, app_protocol
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.renewal: asyncio.Task | None = None
        self.idle: asyncio.TimerHandle | None = None
        self.handed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._arm_idle()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.renewal is None:
            self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.idle is not None:
            self.idle.cancel()
        if self.renewal is not None:
            self.renewal.cancel()  # the client went away: its renewal's work is abandoned
            self.renewal = None

    def _next(self) -> None:
        """Serve the next whole request in the buffer, or hand the connection over."""
        buffer = self.buffer
        if self.transport is None or self.transport.is_closing():
            return  # its loss is on the way: nothing more is answered on it
        while buffer and self.renewal is None and not self.handed:
            line_end = buffer.find(b"\r\n")
            if line_end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    self._hand_over()
                return
            method, _, rest = bytes(buffer[:line_end]).partition(b" ")
            target, _, version = rest.partition(b" ")
            if method != b"GET" or version != b"HTTP/1.1" or not (target.startswith(MEMBERSHIP) or target == HEALTHZ):
                self._hand_over()
                return
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    self._hand_over()
                return
            deadline, close, has_body = None, False, False
            for line in bytes(buffer[line_end + 2 : end]).split(b"\r\n"):
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == DEADLINE:
                    deadline = value.strip().decode("latin-1")
                elif name == b"connection":
                    close = value.strip().lower() == b"close"
                elif name in (b"content-length", b"transfer-encoding"):
                    has_body = True
            if has_body:  # a GET with a body: the app's parser reads it (and answers as it does)
                self._hand_over()
                return
            del buffer[: end + 4]
            if self.idle is not None:
                self.idle.cancel()
                self.idle = None
            if target == HEALTHZ:
                self._answer(Renewed(200, HEALTHY), close)
                continue
            node = unquote(target[len(MEMBERSHIP) :].partition(b"?")[0].decode("utf-8", "replace"))
            self.renewal = asyncio.get_running_loop().create_task(self._renew(node, deadline, close))

    async def _renew(self, node: str, deadline: str | None, close: bool) -> None:
        service = self.service
        try:
            answer = await renew(service, node, deadline_of(deadline, service.settings.allowance_s))
        except Exception:  # a bug, not the client's: answered as the app answers one, and logged
            log.exception("renewal of %r failed", node)
            answer, close = Renewed(500, error_body("internal", "the renewal failed: see the service's log")), True
        self.renewal = None
        self._answer(answer, close)
        self._next()

    def _answer(self, answer: Renewed, close: bool) -> None:
        transport = self.transport
        assert transport is not None
        if transport.is_closing():
            return
        transport.write(answer_bytes(answer))
        if close:
            transport.close()
        else:
            self._arm_idle()

    def _arm_idle(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
        self.idle = asyncio.get_running_loop().call_later(KEEPALIVE_S, self._idle_close)

    def _idle_close(self) -> None:
        self.idle = None
        if self.renewal is None and not self.buffer and self.transport is not None:
            self.transport.close()

    def _hand_over(self) -> None:
        """From here on the connection is the app's: it gets the bytes read so far."""
        assert self.transport is not None
        self.handed = True
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None
        protocol = self.app_protocol()
        self.transport.set_protocol(protocol)
        protocol.connection_made(self.transport)
        data, self.buffer = bytes(self.buffer), bytearray()
        if data:
            protocol.data_received(data)


def front_door(service: MetadataService) -> Callable[[Callable[[], asyncio.Protocol]], asyncio.Protocol]:
    """The protocol factory :func:`stormcore.web.serve` puts in front of the app's."""
    return lambda app_protocol: FrontDoor(service, app_protocol)
