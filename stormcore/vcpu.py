"""The metadata service's virtual CPU: processor sharing over C cores (README, "What you are looking at").

Every job in flight gets an equal share of the cores, at most one core each, so with N
jobs each progresses at ``min(1, C / N)`` core-seconds per second. The model is pure: the
caller passes the time in and gets back which jobs finished; nothing here sleeps or reads
a clock, so a storm can be replayed in virtual time.

Equal shares mean every job's received service grows at the same rate, so one running
total (``_served``, service received by any job present since time zero) orders all
finishes: a job submitted when ``_served == s`` finishes when ``_served == s + work``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field

_EPS = 1e-12


@dataclass(order=True)
class _Job:
    finish_at: float
    seq: int
    job_id: Hashable = field(compare=False)
    started_at: float = field(compare=False)


class VirtualCpu:
    def __init__(self, cores: float, now: float = 0.0) -> None:
        if cores <= 0:
            raise ValueError("cores must be positive")
        self.cores = float(cores)
        self._now = now
        self._served = 0.0
        self._heap: list[_Job] = []
        self._jobs: dict[Hashable, _Job] = {}
        self._seq = itertools.count()
        self.busy_core_seconds = 0.0

    @property
    def inflight(self) -> int:
        return len(self._jobs)

    @property
    def busy_cores(self) -> float:
        return min(float(len(self._jobs)), self.cores)

    def rate(self) -> float:
        """Core-seconds per second each job in flight receives now."""
        n = len(self._jobs)
        return min(1.0, self.cores / n) if n else 1.0

    def submit(self, job_id: Hashable, work_s: float, now: float) -> list[Hashable]:
        """Start a job needing ``work_s`` core-seconds; returns jobs that finished before ``now``."""
        if job_id in self._jobs:
            raise ValueError(f"job {job_id!r} already in flight")
        if work_s < 0:
            raise ValueError("work must not be negative")
        done = self.advance(now)
        job = _Job(self._served + work_s, next(self._seq), job_id, self._served)
        self._jobs[job_id] = job
        heapq.heappush(self._heap, job)
        return done

    def cancel(self, job_id: Hashable, now: float) -> tuple[float, list[Hashable]]:
        """Drop a job; returns the work it had received (now wasted) and jobs finished meanwhile."""
        done = self.advance(now)
        job = self._jobs.pop(job_id, None)
        if job is None:
            return 0.0, done
        return self._served - job.started_at, done

    def set_cores(self, cores: float, now: float) -> list[Hashable]:
        if cores <= 0:
            raise ValueError("cores must be positive")
        done = self.advance(now)
        self.cores = float(cores)
        return done

    def next_completion(self) -> float | None:
        """The absolute time the next job finishes if nothing else arrives."""
        head = self._head()
        if head is None:
            return None
        return self._now + max(0.0, head.finish_at - self._served) / self.rate()

    def advance(self, now: float) -> list[Hashable]:
        """Move the model to ``now``; returns the ids of jobs that finished, in finish order."""
        if now < self._now:
            now = self._now  # the loop's clock is monotonic; tolerate equal-time rounding
        done: list[Hashable] = []
        while True:
            head = self._head()
            if head is None:
                self._now = now
                return done
            rate = self.rate()
            finish_time = self._now + max(0.0, head.finish_at - self._served) / rate
            if finish_time > now + _EPS:
                self._account(now - self._now, rate)
                self._served += (now - self._now) * rate
                self._now = now
                return done
            self._account(finish_time - self._now, rate)
            self._served = max(self._served, head.finish_at)
            self._now = max(self._now, finish_time)
            heapq.heappop(self._heap)
            del self._jobs[head.job_id]
            done.append(head.job_id)

    def _account(self, dt: float, rate: float) -> None:
        self.busy_core_seconds += dt * rate * len(self._jobs)

    def _head(self) -> _Job | None:
        # cancelled jobs stay in the heap until they reach the top (lazy deletion)
        while self._heap and self._jobs.get(self._heap[0].job_id) is not self._heap[0]:
            heapq.heappop(self._heap)
        return self._heap[0] if self._heap else None
