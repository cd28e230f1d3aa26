"""The scaling service's backlog (pure): partitioned across workers, pruned by the fix."""

from services.scaling.backlog import Activity, Backlog


def fill(backlog: Backlog, n: int, groups: int = 4) -> None:
    for i in range(n):
        backlog.add(Activity(i, f"g-{i % groups}", i, created_at=float(i)))


def test_one_worker_takes_every_activity_in_order():
    backlog = Backlog(workers=1, prune=False)
    fill(backlog, 10)
    order = []
    while (activity := backlog.next_for(0)) is not None:
        order.append(activity.id)
        backlog.done(0, activity)
    assert order == list(range(10)) and len(backlog) == 0


def test_the_backlog_is_partitioned_by_group_across_workers():
    backlog = Backlog(workers=4, prune=False)
    fill(backlog, 40, groups=8)
    for worker in range(4):
        owned = {a.group for a in backlog.queues[worker]}
        assert all(backlog.worker_of(g) == worker for g in owned)
    assert len(backlog) == 40 and backlog.oldest_age_s(50.0) == 50.0


def test_pruning_keeps_only_each_groups_newest_activity():
    backlog = Backlog(workers=1, prune=True)
    fill(backlog, 100, groups=4)
    assert len(backlog) == 4 and backlog.pruned == 96
    assert sorted(a.desired for a in backlog.queues[0]) == [96, 97, 98, 99]


def test_a_pruned_activity_being_worked_on_is_not_removed_twice():
    backlog = Backlog(workers=1, prune=True)
    first = Activity(1, "g-0", 1, 0.0)
    backlog.add(first)
    assert backlog.next_for(0) is first
    backlog.add(Activity(2, "g-0", 2, 1.0))  # supersedes the one in progress
    backlog.done(0, first)
    assert [a.id for a in backlog.queues[0]] == [2]


def test_an_activity_shared_out_again_by_a_resize_is_worked_by_one_worker_at_a_time():
    backlog = Backlog(workers=4, prune=False)
    for i, group in enumerate(["g-0", "g-1", "g-2", "g-3", "g-4", "g-5"]):
        backlog.add(Activity(i, group, 1, float(i)))
    taken = {w: backlog.take(w) for w in range(4)}
    busy = next(a for w, a in taken.items() if a is not None and w != 0)  # a worker beyond 0 on its activity
    for a in taken.values():
        if a is not None and a is not busy:
            backlog.release(a)  # the others had not started on theirs
    backlog.resize(1)  # every activity is worker 0's now, the busy one included
    seen = []
    while (a := backlog.take(0)) is not None:
        seen.append(a.id)
        backlog.done(0, a)
    assert busy.id not in seen and len(backlog) > 1  # worker 0 waits behind it instead of working it too
    backlog.done(9, busy)  # its old worker finishes it
    while (a := backlog.take(0)) is not None:
        seen.append(a.id)
        backlog.done(0, a)
    assert busy.id not in seen and len(backlog) == 0 and not backlog.busy
