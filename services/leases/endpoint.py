"""The database's regional endpoint as the lease manager dials it: a DNS name that can stop
resolving (DynamoDB's empty record of 19 October 2025).

The manager reaches each storage rack by a name under :data:`ENDPOINT` (``127.0.0.1`` becomes
``127.0.0.1.dynamodb.us-east-1.lab``); :class:`Endpoint` is the resolver its client uses. While
the record is empty, resolving fails, so every **new** connection fails; a connection already
open keeps working, as in 2025. The client's connections are recycled every :data:`RECYCLE_S`
(a new pool; the old one closes once its requests are done), the way an SDK's connections age
out, so a broken endpoint reaches every call within seconds and not never.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

from services.storage import Storage
from stormcore.web import is_address

ENDPOINT = "dynamodb.us-east-1.lab"
OK, EMPTY, REPAIRED = "ok", "empty", "repaired"  # the record: as it was, emptied (the fault), put back by hand
RECYCLE_S = 5.0  # wall seconds a pool of connections is used for new requests
CLOSE_AFTER_S = 10.0  # an old pool closes this long after it stopped taking requests


def through(url: str) -> str:
    """``url`` with its host under the endpoint's name."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}.{ENDPOINT}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class Endpoint(AbstractResolver):
    """Resolves names under :data:`ENDPOINT` while its record is not empty."""

    def __init__(self) -> None:
        self.record = OK
        self.failures = 0
        self._real: ThreadedResolver | None = None  # made in the loop, for a name that is not an address

    @property
    def empty(self) -> bool:
        return self.record == EMPTY

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        if host.endswith("." + ENDPOINT):
            if self.empty:
                self.failures += 1
                raise OSError(socket.EAI_NONAME, f"{host}: no address (the endpoint's DNS record is empty)")
            host = host.removesuffix("." + ENDPOINT)
        if is_address(host):
            return [{"hostname": host, "host": host, "port": port, "family": family, "proto": 0, "flags": socket.AI_NUMERICHOST}]
        if self._real is None:
            self._real = ThreadedResolver()
        return await self._real.resolve(host, port, family)

    async def close(self) -> None:
        if self._real is not None:
            await self._real.close()


class EndpointStorage(Storage):
    """The lab's storage client, dialling the racks through the endpoint's name, its connections
    recycled every :data:`RECYCLE_S`."""

    def __init__(self, endpoint: Endpoint, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.endpoint = endpoint
        self._old: set[aiohttp.ClientSession] = set()
        self._tasks: set[asyncio.Task[None]] = set()  # old pools closing
        self.session = self.pool()  # the service's own session stays unused: every call goes through the endpoint

    def url(self, table: str, key: str) -> str:
        return through(super().url(table, key))

    def pool(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=0, resolver=self.endpoint, use_dns_cache=False)
        return aiohttp.ClientSession(connector=connector)

    async def recycle(self) -> None:
        """A background loop: a new pool for new requests every RECYCLE_S; the old one closes later."""
        while True:
            await asyncio.sleep(RECYCLE_S)
            old, self.session = self.session, self.pool()
            self._old.add(old)
            asyncio.get_running_loop().call_later(CLOSE_AFTER_S, self._closing, old)

    def _closing(self, session: aiohttp.ClientSession) -> None:
        task = asyncio.get_running_loop().create_task(self._close(session))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _close(self, session: aiohttp.ClientSession) -> None:
        self._old.discard(session)
        await session.close()

    async def close(self) -> None:
        for session in (*self._old, self.session):
            await session.close()
