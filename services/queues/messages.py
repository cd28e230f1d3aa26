"""The queues' messages: the service's own data, in SQLite (WAL) off the event loop, so a
message is acknowledged only once it is committed and survives the process being killed.

SQS's semantics, at least once: a receive does not delete. It hides each message it returns
for a visibility timeout and hands back a receipt; ``delete`` with that receipt removes the
message. A message not deleted in time (its receiver crashed, its answer never arrived) is
received again, with a new receipt (the old one then deletes nothing). Times are the wall
clock's, so a restarted service keeps the visibility its predecessor gave.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stormcore import sqlite
from stormcore.documents import dumps

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, body TEXT NOT NULL,"
    " visible_at REAL NOT NULL DEFAULT 0, receipt TEXT, receives INTEGER NOT NULL DEFAULT 0)",
)
COLUMNS = {  # added to a store written before receives kept their messages
    "visible_at": "REAL NOT NULL DEFAULT 0",
    "receipt": "TEXT",
    "receives": "INTEGER NOT NULL DEFAULT 0",
}
INDEX = "CREATE INDEX IF NOT EXISTS messages_visible ON messages (queue, visible_at, id)"


QUOTA_BYTES = 64 * 1024 * 1024  # the messages on disk: sends past it are refused (507), receives go on
SEND_SHARE = 0.9  # sends stop at this share of the quota: the rest is room for receives (receipts) and deletes


class MessageStore:
    def __init__(self, path: Path | str, clock: Callable[[], float] = time.time, quota_bytes: int = QUOTA_BYTES) -> None:
        self._db = sqlite.connect(path, SCHEMA, max_bytes=quota_bytes)
        self.quota_bytes = quota_bytes
        self.clock = clock
        have = {row[1] for row in self._db.execute("PRAGMA table_info(messages)")}
        for column, kind in COLUMNS.items():
            if column not in have:
                self._db.execute(f"ALTER TABLE messages ADD COLUMN {column} {kind}")
        self._db.execute(INDEX)

    def send(self, queue: str, body: Any) -> int:
        """The message's id once it is committed; sqlite.StoreFull (nothing stored) at the quota."""
        if self.used_bytes() > SEND_SHARE * self.quota_bytes:
            raise sqlite.StoreFull(f"the messages take {self.used_bytes():,} bytes of a {self.quota_bytes:,}-byte quota")
        cursor = sqlite.writing(self._db, "INSERT INTO messages (queue, body) VALUES (?, ?)", (queue, dumps(body)))
        return int(cursor.lastrowid or 0)

    def receive(self, queue: str, most: int, visibility_s: float) -> list[dict[str, Any]]:
        """Up to ``most`` visible messages, oldest first, each hidden for ``visibility_s`` and
        given a fresh receipt (``receives`` counts how often it has been handed out)."""
        now = self.clock()
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            rows = self._db.execute(
                "SELECT id, body, receives FROM messages WHERE queue=? AND visible_at<=? ORDER BY id LIMIT ?", (queue, now, most)
            ).fetchall()
            out = [{"id": i, "body": json.loads(b), "receipt": f"{i}.{secrets.token_hex(8)}", "receives": n + 1} for i, b, n in rows]
            self._db.executemany(
                "UPDATE messages SET visible_at=?, receipt=?, receives=? WHERE id=?",
                [(now + visibility_s, m["receipt"], m["receives"], m["id"]) for m in out],
            )
        return out

    def delete(self, queue: str, receipt: str) -> bool:
        """Remove the message this receipt was handed out with; False if it is gone or was
        received again since (its newer receipt deletes it)."""
        cursor = self._db.execute("DELETE FROM messages WHERE queue=? AND receipt=?", (queue, receipt))
        return cursor.rowcount > 0

    def used_bytes(self) -> int:
        """The pages that hold messages (free pages a delete left are used again first)."""
        pages, free, size = (int(self._db.execute(f"PRAGMA {p}").fetchone()[0]) for p in ("page_count", "freelist_count", "page_size"))
        return (pages - free) * size

    def depth(self, queue: str | None = None) -> tuple[int, int]:
        """Messages stored (in ``queue``, or in all), and how many of them a receive hides now (in flight)."""
        now = self.clock()
        where, args = ("WHERE queue=?", (now, queue)) if queue is not None else ("", (now,))
        total, hidden = self._db.execute(f"SELECT COUNT(*), COALESCE(SUM(visible_at > ?), 0) FROM messages {where}", args).fetchone()
        return int(total), int(hidden)

    def close(self) -> None:
        self._db.close()


class AsyncMessageStore:
    def __init__(self, path: Path | str) -> None:
        self._worker = sqlite.Worker(lambda: MessageStore(path), "messages")
        self._store: MessageStore = self._worker.store

    async def send(self, queue: str, body: Any) -> int:
        return await self._worker.run(self._store.send, queue, body)

    async def receive(self, queue: str, most: int, visibility_s: float) -> list[dict[str, Any]]:
        return await self._worker.run(self._store.receive, queue, most, visibility_s)

    async def delete(self, queue: str, receipt: str) -> bool:
        return await self._worker.run(self._store.delete, queue, receipt)

    async def depth(self, queue: str | None = None) -> tuple[int, int]:
        return await self._worker.run(self._store.depth, queue)

    def close(self) -> None:
        self._worker.close(self._store.close)
