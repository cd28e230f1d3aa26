from metadata_service.admission import Admission

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
