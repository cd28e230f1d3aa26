"""What one game takes, at most: its players' moves and posts, its pages, its injects, and
how often a tokenless view is made.

A role's token is a player's, and a player may be anyone in a class: without a bound, one token
posting in a loop (1,200 posts of 48 kB were taken here) made the public status page 58 MB, and
every tokenless read of ``/game.json`` serialised it all again. So each game has a budget per kind
of record, in count and in bytes, and a record past it is refused (413: one record too large, 429:
the game's budget spent), with nothing taken; and the views anyone may open are made at most once
a second (and after each write the game takes) and served from that copy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


class OverBudget(Exception):
    """A record the game will not take: ``status`` 413 (too large on its own) or 429 (the game's
    budget for its kind is spent)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Budget:
    """At most ``count`` records of one kind in a game, ``each_bytes`` each and ``total_bytes`` in all."""

    kind: str
    count: int
    each_bytes: int
    total_bytes: int
    taken: int = 0
    taken_bytes: int = 0

    def take(self, size: int, records: int = 1) -> None:
        """Counts ``records`` of ``size`` bytes in all, or raises OverBudget and counts nothing."""
        if size > self.each_bytes * records:
            raise OverBudget(413, f"{self.kind}: {size:,} bytes; at most {self.each_bytes:,} each")
        if self.taken + records > self.count or self.taken_bytes + size > self.total_bytes:
            raise OverBudget(
                429,
                f"{self.kind}: this game has taken {self.taken:,} ({self.taken_bytes:,} bytes); at most {self.count:,} "
                f"({self.total_bytes:,} bytes) a game",
            )
        self.taken += records
        self.taken_bytes += size


def budgets() -> dict[str, Budget]:
    """One game's budgets. A two-hour game of five players moving every five seconds is 7,200
    moves; Alertmanager re-sends a firing alert every few minutes; a facilitator's injects are tens."""
    return {
        "moves": Budget("moves", count=10_000, each_bytes=4_096, total_bytes=4 << 20),
        "pages": Budget("pages", count=20_000, each_bytes=8_192, total_bytes=16 << 20),
        "injects": Budget("injects", count=500, each_bytes=4_096, total_bytes=1 << 20),
    }


@dataclass
class Cached(Generic[T]):
    """A view made at most once every ``every_s`` (by the clock ``now``), served from that copy
    meanwhile, unless a write made it stale (``forget``); a view asked while it is being made waits
    for that one."""

    make: Callable[[], Awaitable[T]]
    now: Callable[[], float]
    every_s: float = 1.0
    _value: T | None = None
    _at: float = float("-inf")
    _making: asyncio.Future[T] | None = field(default=None, repr=False)
    made: int = 0  # how many times it was made (a test's count)

    async def get(self) -> T:
        if self._value is not None and self.now() - self._at < self.every_s:
            return self._value
        if self._making is None or self._making.done():
            self._making = asyncio.ensure_future(self._fresh())
        return await asyncio.shield(self._making)  # one asker giving up does not cancel the others' copy

    def forget(self) -> None:
        """The copy is stale (a write changed what it shows): the next view is made afresh."""
        self._value, self._at = None, float("-inf")

    async def _fresh(self) -> T:
        value = await self.make()
        self._value, self._at, self.made = value, self.now(), self.made + 1
        return value
