"""The scaling service's background scheduler (pure): launch and terminate activities waiting
for a worker, the way Auto Scaling's backlog built up in 2015.

Activities arrive whatever the table does (instances to replace, scheduled capacity changes);
a worker finishes one only by writing it to the lab's tables. While those writes fail, the
backlog grows; once they succeed again it drains at the workers' pace: in 2015 from 7:10 to
10:52, long after the API was back. AWS's fixes, as switches: more workers, each owning a share
of the groups (the backlog partitioned, so one slow group holds up only its own share), and
pruning superseded activities (a group's newer desired capacity makes its older pending
activities pointless).
"""

from __future__ import annotations

import zlib
from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Activity:
    id: int
    group: str
    desired: int
    created_at: float


@dataclass
class Backlog:
    workers: int
    prune: bool
    queues: list[deque[Activity]] = field(init=False)
    pruned: int = 0
    busy: set[int] = field(default_factory=set)  # activities a worker is on (kept in place until done)

    def __post_init__(self) -> None:
        self.queues = [deque() for _ in range(self.workers)]

    def worker_of(self, group: str) -> int:
        return zlib.crc32(group.encode()) % self.workers

    def add(self, activity: Activity) -> None:
        queue = self.queues[self.worker_of(activity.group)]
        if self.prune:  # the newer desired capacity supersedes what the group still waited for
            kept = [a for a in queue if a.group != activity.group]
            self.pruned += len(queue) - len(kept)
            queue.clear()
            queue.extend(kept)
        queue.append(activity)

    def next_for(self, worker: int) -> Activity | None:
        """The oldest activity this worker owns, left in place until it is done."""
        queue = self.queues[worker]
        return queue[0] if queue else None

    def take(self, worker: int) -> Activity | None:
        """The oldest activity this worker owns, marked busy; None if there is none, or if another
        worker is still on it (shared out again by a resize while it worked: one worker at a time)."""
        activity = self.next_for(worker)
        if activity is None or activity.id in self.busy:
            return None
        self.busy.add(activity.id)
        return activity

    def release(self, activity: Activity) -> None:
        """A worker gave up on it for now (its write failed): another take may have it."""
        self.busy.discard(activity.id)

    def done(self, worker: int, activity: Activity) -> None:
        self.busy.discard(activity.id)
        queue = self.queues[worker] if worker < self.workers else deque()
        if queue and queue[0] is activity:
            queue.popleft()
            return
        for other in self.queues:  # shared out again by a resize meanwhile, or pruned: then nothing to remove
            if activity in other:
                other.remove(activity)
                return

    def resize(self, workers: int) -> None:
        """Share the waiting activities out among ``workers`` (each group's keep their order)."""
        waiting = sorted((a for q in self.queues for a in q), key=lambda a: (a.created_at, a.id))
        self.workers = workers
        self.queues = [deque() for _ in range(workers)]
        for activity in waiting:
            self.queues[self.worker_of(activity.group)].append(activity)

    def __len__(self) -> int:
        return sum(len(q) for q in self.queues)

    def oldest_age_s(self, now: float) -> float:
        return max((now - q[0].created_at for q in self.queues if q), default=0.0)
