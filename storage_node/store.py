"""A rack's durable item store: SQLite in WAL mode.

``synchronous=NORMAL`` in WAL mode makes every committed write survive the process being
killed (SIGKILL): the commit is in the WAL file in the OS before the write is acknowledged.
(Surviving a power cut as well would need ``synchronous=FULL``, an fsync per write.)
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


class ItemStore:
    def __init__(self, path: Path | str) -> None:
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS items (tbl TEXT NOT NULL, part INTEGER NOT NULL, key TEXT NOT NULL,"
            " value TEXT NOT NULL, PRIMARY KEY (tbl, part, key)) WITHOUT ROWID"
        )
        self._db.execute("CREATE INDEX IF NOT EXISTS items_by_key ON items (tbl, key)")

    def put(self, table: str, partition: int, key: str, value: Any) -> None:
        self._db.execute("INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?)", (table, partition, key, json.dumps(value)))

    def get(self, table: str, partition: int, key: str) -> tuple[bool, Any]:
        row = self._db.execute("SELECT value FROM items WHERE tbl=? AND part=? AND key=?", (table, partition, key)).fetchone()
        return (True, json.loads(row[0])) if row else (False, None)

    def query(self, table: str, key: str) -> list[Any]:
        """Items of ``table`` with this key in any partition (what a GSI query by that key returns)."""
        rows = self._db.execute("SELECT value FROM items WHERE tbl=? AND key=? LIMIT 100", (table, key))
        return [json.loads(v) for (v,) in rows]

    def count(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM items").fetchone()[0]

    def close(self) -> None:
        self._db.close()


class AsyncItemStore:
    """The store off the event loop: one worker thread does every SQLite call, in order.

    A commit is usually microseconds, but a WAL checkpoint (an fsync of the database) can take
    a few hundred milliseconds on a slow disk; done on the event loop it would stall every
    node's renewal timers in the rack and skew the storm.
    """

    def __init__(self, path: Path | str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="item-store")
        self._store = self._executor.submit(ItemStore, path).result()

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def put(self, table: str, partition: int, key: str, value: Any) -> None:
        await self._run(self._store.put, table, partition, key, value)

    async def get(self, table: str, partition: int, key: str) -> tuple[bool, Any]:
        return await self._run(self._store.get, table, partition, key)

    async def query(self, table: str, key: str) -> list[Any]:
        return await self._run(self._store.query, table, key)

    def close(self) -> None:
        self._executor.submit(self._store.close).result()
        self._executor.shutdown()
