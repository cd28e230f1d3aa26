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


def connect(path: Path | str, schema: tuple[str, ...]) -> sqlite3.Connection:
    """A WAL database with ``schema`` applied (statements run once, idempotent)."""
    old = os.umask(0o077)
    try:
        db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
    finally:
        os.umask(old)
    db.execute("PRAGMA synchronous=NORMAL")
    for statement in schema:
        db.execute(statement)
    return db


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
