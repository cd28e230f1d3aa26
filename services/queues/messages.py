"""The queues' messages: the service's own data, in SQLite (WAL) off the event loop, so a
message is acknowledged only once it is committed and survives the process being killed. A
received message is deleted in the same transaction that returns it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stormcore import sqlite

SCHEMA = ("CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, body TEXT NOT NULL)",)


class MessageStore:
    def __init__(self, path: Path | str) -> None:
        self._db = sqlite.connect(path, SCHEMA)

    def send(self, queue: str, body: Any) -> int:
        cursor = self._db.execute("INSERT INTO messages (queue, body) VALUES (?, ?)", (queue, json.dumps(body)))
        return int(cursor.lastrowid or 0)

    def receive(self, queue: str, most: int) -> list[dict[str, Any]]:
        with self._db:  # one transaction: what is returned is gone
            self._db.execute("BEGIN IMMEDIATE")
            rows = self._db.execute("SELECT id, body FROM messages WHERE queue=? ORDER BY id LIMIT ?", (queue, most)).fetchall()
            self._db.executemany("DELETE FROM messages WHERE id=?", [(i,) for i, _ in rows])
        return [{"id": i, "body": json.loads(b)} for i, b in rows]

    def depth(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM messages").fetchone()[0])

    def close(self) -> None:
        self._db.close()


class AsyncMessageStore:
    def __init__(self, path: Path | str) -> None:
        self._worker = sqlite.Worker(lambda: MessageStore(path), "messages")
        self._store: MessageStore = self._worker.store

    async def send(self, queue: str, body: Any) -> int:
        return await self._worker.run(self._store.send, queue, body)

    async def receive(self, queue: str, most: int) -> list[dict[str, Any]]:
        return await self._worker.run(self._store.receive, queue, most)

    async def depth(self) -> int:
        return await self._worker.run(self._store.depth)

    def close(self) -> None:
        self._worker.close(self._store.close)
