"""A rack's durable item store: SQLite in WAL mode.

``synchronous=NORMAL`` in WAL mode makes every committed write survive the process being
killed (SIGKILL): the commit is in the WAL file in the OS before the write is acknowledged.
(Surviving a power cut as well would need ``synchronous=FULL``, an fsync per write.)
"""
from __future__ import annotations

import json
import sqlite3
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
        self._db.execute("INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?)",
                         (table, partition, key, json.dumps(value)))

    def get(self, table: str, partition: int, key: str) -> tuple[bool, Any]:
        row = self._db.execute("SELECT value FROM items WHERE tbl=? AND part=? AND key=?",
                               (table, partition, key)).fetchone()
        return (True, json.loads(row[0])) if row else (False, None)

    def query(self, table: str, key: str) -> list[Any]:
        """Items of ``table`` with this key in any partition (what a GSI query by that key returns)."""
        rows = self._db.execute("SELECT value FROM items WHERE tbl=? AND key=? LIMIT 100", (table, key))
        return [json.loads(v) for (v,) in rows]

    def count(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM items").fetchone()[0]

    def close(self) -> None:
        self._db.close()
