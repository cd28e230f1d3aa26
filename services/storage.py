"""A dependent service's client of the lab's storage API (the cascade's services use it).

Their control-plane rows live in stormlab tables on the racks: a row's key picks its partition
(crc32 of the key, modulo the table's partitions), the partition map says which node holds it,
and the request goes over HTTP to that node's rack, the way loadgen's customers' requests do.
So a row is unavailable exactly when the node holding it refuses: disqualified in a storm,
every node once the metadata service is paused.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Sequence
from typing import Any

import aiohttp

from stormcore.fleet import rack_of
from stormcore.racks import RackUrls
from stormcore.wire import PartitionMap, TableRoute, WireError

FAILURES = ("refused", "wrong_owner", "timeout", "error", "no_route")


class StorageError(Exception):
    """A row could not be read or written; ``reason`` is one of FAILURES."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def partition_of(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode()) % partitions


def owner_of(route: TableRoute, key: str) -> tuple[int, str]:
    """The partition a row's key falls in, and the node holding it."""
    partition = partition_of(key, len(route.owners))
    return partition, route.owners[partition]


class Storage:
    def __init__(
        self, metadata_url: str, rack_urls: RackUrls, session: aiohttp.ClientSession, timeout_s: float, tables: Sequence[str] = ()
    ) -> None:
        self.metadata_url, self.rack_urls, self.session = metadata_url.rstrip("/"), rack_urls, session
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.map: PartitionMap | None = None
        # the tables this service routes to (every table if none): the map of those only, so a
        # change to another table (new GSIs on catalog) costs it no 3 MB at 10,000 nodes
        self.map_url = f"{self.metadata_url}/partition-map" + (f"?tables={','.join(tables)}" if tables else "")

    async def close(self) -> None:
        """Connections of its own to close (the session is its service's)."""

    async def refresh_map(self) -> bool:
        """Fetch the partition map if it changed; False if the metadata service did not answer."""
        known = {"If-None-Match": f'"{self.map.version}"'} if self.map else {}
        try:
            async with self.session.get(self.map_url, headers=known, timeout=self.timeout) as resp:
                if resp.status == 304:
                    return True
                if resp.status != 200:
                    return False
                self.map = PartitionMap.decode(await resp.read())
                return True
        except (aiohttp.ClientError, TimeoutError, WireError):
            return False

    def url(self, table: str, key: str) -> str:
        if not key or "/" in key or len(key) > 256:
            raise ValueError(f"a row key is 1-256 characters without '/': {key!r}")
        route = self.map.tables.get(table) if self.map else None
        if route is None or not route.owners:
            raise StorageError("no_route", f"no route to table {table!r} yet")
        partition, owner = owner_of(route, key)
        try:
            rack = self.rack_urls[rack_of(owner)]
        except KeyError:
            raise StorageError("no_route", f"rack {rack_of(owner)} not found yet") from None
        return f"{rack}/nodes/{owner}/tables/{table}/partitions/{partition}/items/{key}"

    async def get(self, table: str, key: str, timeout_s: float | None = None) -> Any:
        """The row's value, or None if there is no such row."""
        status, body = await self._call("GET", self.url(table, key), None, timeout_s)
        if status == 404 and body.get("error") == "not_found":
            return None
        return body.get("value")

    async def put(self, table: str, key: str, value: Any, timeout_s: float | None = None) -> None:
        await self._call("PUT", self.url(table, key), {"value": value}, timeout_s)

    async def _call(self, method: str, url: str, body: Any, timeout_s: float | None) -> tuple[int, dict[str, Any]]:
        timeout = aiohttp.ClientTimeout(total=timeout_s) if timeout_s is not None else self.timeout
        try:
            async with self.session.request(method, url, json=body, timeout=timeout) as resp:
                answer = await resp.json(content_type=None)
                status = resp.status
        except TimeoutError:
            raise StorageError("timeout", f"{method} {url} timed out") from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise StorageError("error", f"{method} {url}: {exc}") from None
        answer = answer if isinstance(answer, dict) else {}
        if status == 200 or (method == "GET" and status == 404 and answer.get("error") == "not_found"):
            return status, answer  # a row that is not there is an answer, for a read
        reason = {503: "refused", 409: "wrong_owner"}.get(status, "error")
        raise StorageError(reason, f"{method} {url}: {status} {answer.get('message', '')}")


async def keep_map_fresh(storage: Storage, every_s: float, phase: float = 0.0) -> None:
    """A background loop: the routes follow the partition map (a stuck partition, new GSIs).
    ``phase`` (a share of ``every_s``) shifts this service's reads once it has a map, so the
    services started together do not all fetch and decode a changed map in the same moment
    (the whole map is 3 MB at 10,000 nodes, ~14 ms of a core to decode; a service's own tables'
    a tenth of it or less)."""
    shifted = False
    while True:
        await storage.refresh_map()
        if storage.map and not shifted:
            shifted = True
            await asyncio.sleep(phase * every_s)
        await asyncio.sleep(every_s if storage.map else min(every_s, 0.5))
