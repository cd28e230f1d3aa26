"""Live deploys as held values, the way the cascade's services hold their fixes.

A deploy lease does not change a rack and remember what ran before (two overlapping deploys,
ended in the other order, would put the older one back for good). It holds values: each rack
runs its start-up settings with, for every setting, the value of the newest live deploy that
has reached the rack. When a lease ends its values simply stop being held; the start-up value
returns once none holds, whatever order the leases end in.

`DeployBook` is that rule, pure and in the caller's time (a staged rollout reaches its racks
at given times). The supervisor's `Reconciler` pushes what the book says to every rack until
the rack says it runs it: a rack that is down, frozen or slow is simply behind, and catches up
when it answers (a restarted rack is handed what holds in its environment).
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

Held = dict[str, Any]


@dataclass(frozen=True)
class Rollout:
    """One deploy lease: what it sets, and when it reaches each rack (a staged rollout's steps)."""

    seq: int
    changes: Held
    reaches: dict[str, float]


def steps(racks: Sequence[str], staged: int, start: float, every_s: float) -> dict[str, float]:
    """When each rack is reached: the racks in order, in ``staged`` steps as even as they divide."""
    n = min(max(1, staged), len(racks))
    groups = [racks[i * len(racks) // n : (i + 1) * len(racks) // n] for i in range(n)]
    return {rack: start + i * every_s for i, group in enumerate(groups) for rack in group}


@dataclass
class DeployBook:
    """The live deploy leases and what they make each rack run."""

    racks: tuple[str, ...]
    _live: dict[int, Rollout] = field(default_factory=dict)
    _seq: itertools.count = field(default_factory=lambda: itertools.count(1))

    def add(self, changes: Held, staged: int, start: float, every_s: float) -> int:
        """A deploy from ``start``; returns its number (newer deploys have larger ones)."""
        seq = next(self._seq)
        self._live[seq] = Rollout(seq, dict(changes), steps(self.racks, staged, start, every_s))
        return seq

    def end(self, seq: int) -> None:
        self._live.pop(seq, None)

    def held(self, rack: str, now: float) -> Held:
        """What the live deploys hold on ``rack`` at ``now``: for each setting, the newest deploy's
        value among those that have reached it (empty: the rack runs its start-up settings)."""
        out: Held = {}
        for rollout in sorted(self._live.values(), key=lambda r: r.seq):
            if rollout.reaches.get(rack, math.inf) <= now:
                out.update(rollout.changes)
        return out

    def next_step(self, now: float) -> float | None:
        """The next time a live rollout reaches a rack, if one still has racks ahead of it."""
        ahead = [at for r in self._live.values() for at in r.reaches.values() if at > now]
        return min(ahead, default=None)

    def reached(self, seq: int, now: float) -> list[str]:
        """The racks deploy ``seq`` has reached by ``now``."""
        rollout = self._live.get(seq)
        return [] if rollout is None else [r for r in self.racks if rollout.reaches.get(r, math.inf) <= now]

    def live(self) -> list[int]:
        return sorted(self._live)


Push = Callable[[str, Held, int], Awaitable[Held]]  # a rack, what it should hold, the generation -> what it runs


class Stale(Exception):
    """The rack runs a newer generation (``generation``) than this push's: a push overtaken, or
    a generation from elsewhere (a direct POST); the next push goes above it."""

    def __init__(self, message: str, generation: int) -> None:
        super().__init__(message)
        self.generation = generation


@dataclass
class Reconciler:
    """Brings every rack to what the book holds for it, and keeps it there.

    ``push`` sends a rack the whole of what it should hold with a generation (a rack ignores an
    older one than it has taken, so a push that lands late cannot undo a newer one); ``ready``
    says whether a rack can take a push now (not frozen, not down). A push that fails is tried
    again at the next tick."""

    book: DeployBook
    push: Push
    ready: Callable[[str], bool]
    clock: Callable[[], float]
    tick_s: float = 0.25
    verify_s: float = 5.0  # a rack is pushed again this long after its last answer, behind or not
    running: dict[str, Held | None] = field(default_factory=dict)  # what each rack said it holds (None: unknown)
    generation: int = 0
    failures: dict[str, str] = field(default_factory=dict)  # a rack's last failed push, for /status
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _inflight: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _answered: dict[str, float] = field(default_factory=dict)  # when each rack last answered a push

    def behind(self, now: float | None = None) -> list[str]:
        """The racks not running what the book holds for them."""
        at = self.clock() if now is None else now
        return [r for r in self.book.racks if self.running.get(r, {}) != self.book.held(r, at)]

    def started(self, rack: str) -> tuple[int, Held]:
        """A rack is (re)starting: what it should hold from its first moment, and its generation."""
        self.generation += 1
        self.running[rack] = held = self.book.held(rack, self.clock())
        self._answered[rack] = self.clock()
        return self.generation, held

    def wake(self) -> None:
        self._wake.set()

    async def settle(self, racks: Iterable[str], timeout_s: float) -> bool:
        """Wait (up to ``timeout_s``) until ``racks`` run what the book holds for them."""
        wanted = set(racks)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        self.wake()
        while wanted & set(self.behind()):
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def run(self) -> None:
        while True:
            self.round()
            step = self.book.next_step(self.clock())
            wait = self.tick_s if step is None else max(0.0, min(self.tick_s, step - self.clock()))
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except TimeoutError:
                pass

    def round(self) -> None:
        """Start a push to every rack that is behind, or has not answered one for ``verify_s``
        (a rack changed behind the reconciler's back, by a POST of its own, is put back), ready
        and with none in flight."""
        now = self.clock()
        behind = set(self.behind(now))
        due = {r for r in self.book.racks if now - self._answered.get(r, -math.inf) >= self.verify_s}
        for rack in sorted(behind | due):
            if rack in self._inflight or not self.ready(rack):
                continue
            self.generation += 1
            task = asyncio.ensure_future(self._push(rack, self.book.held(rack, now), self.generation))
            self._inflight[rack] = task
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        for rack, t in list(self._inflight.items()):
            if t is task:
                del self._inflight[rack]

    async def _push(self, rack: str, held: Held, generation: int) -> None:
        try:
            self.running[rack] = await self.push(rack, held, generation)
            self._answered[rack] = self.clock()
            self.failures.pop(rack, None)
        except Stale as exc:  # what it runs is not ours to know: push again, above its generation
            self.generation = max(self.generation, exc.generation)
            self.running[rack] = None
        except Exception as exc:  # down, frozen, slow: behind for now, tried again at the next tick
            # a push that timed out may still land: what the rack runs is unknown until one is answered
            self.running[rack] = None
            self.failures[rack] = f"{type(exc).__name__}: {exc}"

    async def stop(self) -> None:
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
