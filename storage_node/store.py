"""A rack's durable item store: SQLite in WAL mode.

``synchronous=NORMAL`` in WAL mode makes every committed write survive the process being
killed (SIGKILL): the commit is in the WAL file in the OS before the write is acknowledged.
(Surviving a power cut as well would need ``synchronous=FULL``, an fsync per write.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stormcore import sqlite
from stormcore.documents import dumps

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS items (tbl TEXT NOT NULL, part INTEGER NOT NULL, key TEXT NOT NULL,"
    " value TEXT NOT NULL, PRIMARY KEY (tbl, part, key)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS items_by_key ON items (tbl, key)",
)


QUOTA_BYTES = 64 * 1024 * 1024  # a rack's store on disk (keys, rows, index): the customer API cannot fill the disk


class QuotaExceeded(Exception):
    """The write would take the rack's store past its quota: refused, nothing written."""


class ItemStore:
    def __init__(self, path: Path | str, quota_bytes: int = QUOTA_BYTES) -> None:
        self._db = sqlite.connect(path, SCHEMA, max_bytes=quota_bytes)
        self.quota_bytes = quota_bytes

    def put(self, table: str, partition: int, key: str, value: Any) -> None:
        try:
            sqlite.writing(self._db, "INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?)", (table, partition, key, dumps(value)))
        except sqlite.StoreFull:
            raise QuotaExceeded(f"the rack's store is at its quota of {self.quota_bytes:,} bytes on disk") from None

    @property
    def bytes(self) -> int:
        """The store's size on disk (its pages)."""
        pages, size = (int(self._db.execute(f"PRAGMA {p}").fetchone()[0]) for p in ("page_count", "page_size"))
        return pages * size

    def get(self, table: str, partition: int, key: str) -> tuple[bool, Any]:
        row = self._db.execute("SELECT value FROM items WHERE tbl=? AND part=? AND key=?", (table, partition, key)).fetchone()
        return (True, json.loads(row[0])) if row else (False, None)

    def query(self, table: str, key: str) -> list[Any]:
        """Items of ``table`` with this key in any partition (what a GSI query by that key returns)."""
        rows = self._db.execute("SELECT value FROM items WHERE tbl=? AND key=? LIMIT 100", (table, key))
        return [json.loads(v) for (v,) in rows]

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM items").fetchone()[0])

    def close(self) -> None:
        self._db.close()


class AsyncItemStore:
    """The store off the event loop (``stormcore/sqlite.py``): a WAL checkpoint on the loop would
    stall every node's renewal timers in the rack and skew the storm."""

    def __init__(self, path: Path | str, quota_bytes: int = QUOTA_BYTES) -> None:
        self._worker = sqlite.Worker(lambda: ItemStore(path, quota_bytes), "item-store")
        self._store: ItemStore = self._worker.store

    async def put(self, table: str, partition: int, key: str, value: Any) -> None:
        await self._worker.run(self._store.put, table, partition, key, value)

    async def get(self, table: str, partition: int, key: str) -> tuple[bool, Any]:
        return await self._worker.run(self._store.get, table, partition, key)

    async def query(self, table: str, key: str) -> list[Any]:
        return await self._worker.run(self._store.query, table, key)

    def close(self) -> None:
        self._worker.close(self._store.close)
