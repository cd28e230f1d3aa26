"""Runs requests on the virtual CPU in real (event-loop) time.

The pure :class:`VirtualCpu` decides; this binding only keeps one timer set for the next
finish and wakes the awaiting handlers. A handler cancelled because its client went away
either cancels its work (``abandoned_work=cancel``) or leaves it running to completion as
wasted work (``continue``), up to ``abandoned_cap`` such requests at once: past it the oldest
is dropped, as a real server's bounded queue would (without a bound, any client that gives up
on big renewals could make it hold work without end).
"""

from __future__ import annotations

import asyncio
import itertools

from stormcore.vcpu import VirtualCpu

CLOCK_TICK_S = 0.001


class CpuScheduler:
    def __init__(self, cpu: VirtualCpu, abandoned_work: str, abandoned_cap: int = 10_000) -> None:
        self.cpu = cpu
        self.abandoned_work = abandoned_work
        self.abandoned_cap = abandoned_cap
        self.wasted_s = 0.0
        self._ids = itertools.count()
        self._waiting: dict[int, asyncio.Future] = {}
        self._abandoned: dict[int, float] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()

    async def run(self, work_s: float) -> None:
        """Return once ``work_s`` core-seconds have been served to this request."""
        job = next(self._ids)
        done = self._waiting[job] = self._loop.create_future()
        self._settle(self.cpu.submit(job, work_s, self._loop.time()))
        try:
            await done
        except asyncio.CancelledError:
            self._waiting.pop(job, None)
            if self.abandoned_work == "cancel":
                self._drop(job)
            else:
                self._abandoned[job] = work_s  # oldest first
                while len(self._abandoned) > self.abandoned_cap:
                    oldest = next(iter(self._abandoned))
                    del self._abandoned[oldest]
                    self._drop(oldest)
            raise

    def _drop(self, job: int) -> None:
        wasted, finished = self.cpu.cancel(job, self._loop.time())
        self.wasted_s += wasted
        self._settle(finished)

    @property
    def abandoned(self) -> int:
        """Requests whose clients left, still being worked on (``continue``)."""
        return len(self._abandoned)

    def set_cores(self, cores: float) -> None:
        self._settle(self.cpu.set_cores(cores, self._loop.time()))

    def _settle(self, finished: list) -> None:
        for job in finished:
            future = self._waiting.pop(job, None)
            if future is not None and not future.done():
                future.set_result(None)
            self.wasted_s += self._abandoned.pop(job, 0.0)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        at = self.cpu.next_completion()
        if at is not None:
            # one clock tick past it: the loop's clock counts milliseconds (libuv's), so a timer set
            # for the exact moment can fire while the clock still reads before it, find nothing
            # due, and re-arm at once, spinning the loop until the millisecond turns
            self._timer = self._loop.call_at(at + CLOCK_TICK_S, self._tick)

    def poll(self) -> None:
        """Bring the model up to now (finishing whatever is due)."""
        self._settle(self.cpu.advance(self._loop.time()))

    def _tick(self) -> None:
        self._timer = None
        self.poll()
