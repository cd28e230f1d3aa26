"""SQLite off the event loop: one worker thread does every call of one database, in order.

WAL mode with ``synchronous=NORMAL``: a committed write survives the process being killed
(SIGKILL), since the commit is in the WAL file in the OS before the caller is answered. A WAL
checkpoint (an fsync) can take a few hundred milliseconds on a slow disk; on the event loop it
would stall every timer of the process, so it runs here instead. Files are created readable
by their owner only.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class StoreFull(Exception):
    """The database is at its size on disk (``max_bytes``): the write is refused, nothing
    written; reads go on (a 507 to the caller)."""


def connect(path: Path | str, schema: tuple[str, ...], max_bytes: int | None = None) -> sqlite3.Connection:
    """A WAL database with ``schema`` applied (statements run once, idempotent), held to
    ``max_bytes`` on disk when given: its pages, keys, rows and indexes all count (the WAL
    adds at most its checkpoint size, about 4 MB, on top)."""
    old = os.umask(0o077)
    try:
        db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
    finally:
        os.umask(old)
    db.execute("PRAGMA synchronous=NORMAL")
    for statement in schema:
        db.execute(statement)
    if max_bytes is not None:
        page = int(db.execute("PRAGMA page_size").fetchone()[0])
        db.execute(f"PRAGMA max_page_count = {max(1, max_bytes // page)}")
    return db


def full(exc: BaseException) -> bool:
    """Is this SQLite's "database or disk is full" (SQLITE_FULL)?"""
    return isinstance(exc, sqlite3.OperationalError) and "full" in str(exc)


def writing(db: sqlite3.Connection, sql: str, args: tuple[Any, ...] | list[tuple[Any, ...]], many: bool = False) -> sqlite3.Cursor:
    """One write; StoreFull (nothing written) if the database is at its size."""
    try:
        return db.executemany(sql, args) if many else db.execute(sql, args)
    except sqlite3.OperationalError as exc:
        if full(exc):
            raise StoreFull(f"the store is full ({exc})") from None
        raise


class Worker(Generic[T]):
    """Runs a store's calls on its own thread; ``make`` builds the store on that thread."""

    def __init__(self, make: Callable[[], T], name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self.store = self._executor.submit(make).result()

    async def run(self, fn: Callable[..., R], *args: Any) -> R:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def close(self, closer: Callable[[], None]) -> None:
        self._executor.submit(closer).result()
        self._executor.shutdown()
