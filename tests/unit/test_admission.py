from metadata_service.admission import Admission, shed

NODES = [f"r{r:02d}n{i:03d}" for r in range(10) for i in range(100)]


def admitted(a: Admission, now: float) -> int:
    return sum(a.admits(n, now) for n in NODES)


def test_pause_turns_everyone_away_and_resume_readmits_everyone_at_once():
    a = Admission()
    assert admitted(a, 0.0) == 1000
    a.pause()
    assert admitted(a, 1.0) == 0 and a.describe(1.0) == {"paused": True}
    a.resume(2.0)
    assert admitted(a, 2.0) == 1000


def test_staged_resume_readmits_the_fleet_in_steps():
    a = Admission()
    a.pause()
    a.resume(now=100.0, groups=4, every_s=10.0)
    steps = [admitted(a, 100.0 + t) for t in (0, 9.9, 10, 20, 30, 45)]
    assert steps[0] == steps[1] and 150 < steps[0] < 350
    assert steps[0] < steps[2] < steps[3] < steps[4] == 1000 == steps[5]
    assert a.describe(145.0) == {"paused": False}


def test_a_node_once_admitted_stays_admitted_while_staging():
    a = Admission()
    a.resume(now=0.0, groups=5, every_s=1.0)
    first = {n for n in NODES if a.admits(n, 0.0)}
    assert first <= {n for n in NODES if a.admits(n, 2.5)}


def test_epochs_tell_whose_pause_it_is():
    a = Admission()
    mine = a.pause()
    a.resume(0.0, groups=3, every_s=5)
    assert a.epoch != mine


def test_admission_control_is_off_in_2015():
    assert shed(10_000, 40.0, 0.6, 1.0, limit=0, deadline_aware=False) is None


def test_a_concurrency_limit_turns_away_what_is_past_it():
    assert shed(79, 40.0, 0.6, 1.0, limit=80, deadline_aware=False) is None
    assert shed(80, 40.0, 0.6, 1.0, limit=80, deadline_aware=False) == "overloaded"


def test_deadline_aware_shedding_never_starts_work_that_would_be_abandoned():
    # 40 cores: up to 39 in flight a big renewal (0.626 core-s) gets a whole core and finishes in time
    assert shed(39, 40.0, 0.626, 1.0, limit=0, deadline_aware=True) is None
    # 99 in flight: 0.4 of a core each, the big renewal would take 1.57 s > its 1 s allowance
    assert shed(99, 40.0, 0.626, 1.0, limit=0, deadline_aware=True) == "overloaded"
    assert shed(99, 40.0, 0.095, 1.0, limit=0, deadline_aware=True) is None  # a small one still fits
    assert shed(99, 40.0, 0.626, 2.0, limit=0, deadline_aware=True) is None  # a longer deadline fits it too
