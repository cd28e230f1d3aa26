import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stormcore.vcpu import VirtualCpu


def run_until_idle(cpu: VirtualCpu) -> dict:
    finished = {}
    while (t := cpu.next_completion()) is not None:
        for job in cpu.advance(t):
            finished[job] = t
    return finished


def test_single_job_uses_at_most_one_core():
    cpu = VirtualCpu(cores=40)
    cpu.submit("big", 0.63, now=0.0)
    assert run_until_idle(cpu) == {"big": pytest.approx(0.63)}


def test_processor_sharing_slows_every_job_equally():
    cpu = VirtualCpu(cores=2)
    for i in range(4):
        cpu.submit(i, 1.0, now=0.0)
    # 4 jobs on 2 cores: half a core each, so 1 core-second takes 2 s
    assert run_until_idle(cpu) == {i: pytest.approx(2.0) for i in range(4)}


def test_small_jobs_leave_and_big_jobs_speed_up():
    cpu = VirtualCpu(cores=40)
    for i in range(255):
        cpu.submit(("small", i), 0.095, now=0.0)
    for i in range(45):
        cpu.submit(("big", i), 0.635, now=0.0)
    finished = run_until_idle(cpu)
    # the herd after a blip of 3 racks: small renewals fit in the 1 s allowance, big ones do not
    assert max(t for (kind, _), t in finished.items() if kind == "small") == pytest.approx(0.095 * 300 / 40)
    assert min(t for (kind, _), t in finished.items() if kind == "big") > 1.0


def test_cancel_returns_wasted_work_and_frees_the_share():
    cpu = VirtualCpu(cores=1)
    cpu.submit("a", 1.0, now=0.0)
    cpu.submit("b", 1.0, now=0.0)
    wasted, done = cpu.cancel("a", now=1.0)
    assert wasted == pytest.approx(0.5)
    assert done == []
    assert run_until_idle(cpu) == {"b": pytest.approx(1.5)}


def test_cancel_unknown_job_is_harmless():
    cpu = VirtualCpu(cores=1)
    assert cpu.cancel("ghost", now=1.0) == (0.0, [])


def test_capacity_change_applies_from_now():
    cpu = VirtualCpu(cores=1)
    for i in range(2):
        cpu.submit(i, 1.0, now=0.0)
    cpu.set_cores(2, now=1.0)  # each had 0.5 done; now a full core each
    assert run_until_idle(cpu) == {0: pytest.approx(1.5), 1: pytest.approx(1.5)}


def test_busy_core_seconds_counts_work_done():
    cpu = VirtualCpu(cores=4)
    for i in range(10):
        cpu.submit(i, 0.2, now=0.0)
    run_until_idle(cpu)
    assert cpu.busy_core_seconds == pytest.approx(2.0)


def test_rejects_bad_input():
    with pytest.raises(ValueError):
        VirtualCpu(cores=0)
    cpu = VirtualCpu(cores=1)
    with pytest.raises(ValueError):
        cpu.submit("x", -1, now=0)
    cpu.submit("x", 1, now=0)
    with pytest.raises(ValueError):
        cpu.submit("x", 1, now=0)


@settings(max_examples=200, deadline=None)
@given(
    cores=st.floats(0.5, 8),
    jobs=st.lists(st.tuples(st.floats(0, 5), st.floats(0.001, 2)), min_size=1, max_size=30),
)
def test_work_is_conserved_and_no_job_beats_one_core(cores, jobs):
    cpu = VirtualCpu(cores=cores)
    finished = {}
    for i, (arrival, work) in sorted(enumerate(jobs), key=lambda x: x[1][0]):
        for job in cpu.advance(arrival):
            finished[job] = None
        cpu.submit(i, work, now=max(arrival, 0.0))
    finished.update(run_until_idle(cpu))
    assert len(finished) == len(jobs)
    assert cpu.busy_core_seconds == pytest.approx(sum(w for _, w in jobs), rel=1e-6)
    for i, (arrival, work) in enumerate(jobs):
        if finished[i] is not None:
            assert finished[i] >= arrival + work - 1e-9
