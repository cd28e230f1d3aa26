import pytest
from hypothesis import given
from hypothesis import strategies as st

from stormlab.engine.story import Sample, ratio_between, rolling, summarize


def run_of(error_at, seconds=300, rate=200, disq=lambda t: 0):
    """Samples of a lab that fails ``error_at(t)`` of its customer requests each second."""
    samples, requests, failures = [], 0, 0
    for t in range(seconds + 1):
        samples.append(Sample(t, requests, failures, disq(t), 10, 0.63, 0.63, 0.004))
        requests += rate
        failures += round(rate * error_at(t))
    return samples


def test_ratio_between_uses_the_requests_finished_in_the_window():
    samples = run_of(lambda t: 0.5 if t >= 100 else 0.0)
    assert ratio_between(samples, 0, 100) == 0.0
    assert ratio_between(samples, 100, 200) == pytest.approx(0.5)
    assert ratio_between(samples, 400, 500) is None


def test_rolling_needs_enough_history():
    samples = run_of(lambda t: 0.1)
    assert rolling(samples, 5.0)[0][0] >= 4
    assert all(r == pytest.approx(0.1) for _, r in rolling(samples, 5.0))


def test_a_storm_that_holds():
    # healthy until the blip at 60 s, the plateau from ~75 s, held to the end
    samples = run_of(lambda t: 0.0 if t < 60 else (0.3 if t < 75 else 0.55), disq=lambda t: 150 if t > 70 else 0)
    summary = summarize(samples, settle_start=0, blip_start=60, blip_end=65, allowance_s=1.0)
    assert summary["baseline_error_ratio"] == 0.0
    assert summary["plateau_error_ratio"] == pytest.approx(0.55)
    assert summary["storm_holds"] is True
    assert 10 <= summary["onset_s"] <= 25
    assert summary["recovery_s"] is None
    assert summary["disqualified_peak"] == 150 and summary["valid"] is True


def test_a_blip_that_heals():
    samples = run_of(lambda t: 0.3 if 60 <= t < 70 else 0.0)
    summary = summarize(samples, settle_start=0, blip_start=60, blip_end=65, allowance_s=1.0)
    assert summary["storm_holds"] is False
    assert summary["onset_s"] is None
    assert summary["plateau_error_ratio"] == 0.0
    assert 0 <= summary["recovery_s"] <= 15


def test_a_run_on_an_overloaded_host_is_not_valid():
    samples = [Sample(t, t * 200, 0, 0, 0, None, None, 0.08) for t in range(100)]
    assert summarize(samples, 0, 50, 55, allowance_s=1.0)["valid"] is False


def test_validity_uses_the_whole_run_lag_when_given():
    samples = [Sample(t, t * 200, 0, 0, 0, None, None, 0.08 if t == 70 else 0.004) for t in range(100)]
    one_stall = summarize(samples, 0, 50, 55, allowance_s=1.0, run_lag_p99_s=0.006)
    assert one_stall["valid"] is True and one_stall["loop_lag_worst_10s_p99_s"] == 0.08
    assert summarize(samples, 0, 50, 55, allowance_s=1.0)["valid"] is False


def test_window_quantile_within_a_span():
    from stormcore.window import Window

    w = Window(span_s=100.0)
    for t in range(100):
        w.add(float(t), 1.0 if t < 50 else 0.0)
    assert w.quantile(0.99, 99.0) == 1.0
    assert w.quantile(0.99, 99.0, within_s=40.0) == 0.0


@given(
    samples=st.lists(st.tuples(st.floats(0, 100), st.floats(0, 5)), max_size=200),
    q=st.floats(0, 1),
    within=st.one_of(st.none(), st.floats(0.1, 200)),
)
def test_window_quantile_is_the_quantile_of_the_samples_in_its_span(samples, q, within):
    from stormcore.window import Window

    window = Window(span_s=50.0)
    for t, v in sorted(samples):
        window.add(t, v)
    now = 100.0
    cutoff = now - min(50.0, within if within is not None else 50.0)
    inside = sorted(v for t, v in samples if t >= cutoff)
    expected = inside[min(len(inside) - 1, int(q * len(inside)))] if inside else None
    assert window.quantile(q, now, within) == expected


def _host_run(**at_70):
    """A quiet run (blip at 50 s) whose reading at t=70 s has ``at_70``'s values."""
    quiet = dict(
        loop_lag_p99_s=0.004,
        lag_by="rack-0",
        cpu_ratio=0.3,
        cpu_by="metadata",
        cpu_wait_s=0.001,
        wait_by="rack-1",
        lab_cpu_cores=0.8,
        host_cores=2,
    )
    return [Sample(t, t * 200, 0, 0, 0, None, None, **(quiet | (at_70 if t == 70 else {}))) for t in range(200)]


def test_a_stall_at_the_herd_is_invalid_though_the_run_p99_is_small():
    # one 10 s window of 150 ms lag, 20 s after the blip: 1% of the run, inside the herd
    summary = summarize(_host_run(loop_lag_p99_s=0.15, lag_by="rack-2"), 0, 50, 55, allowance_s=1.0, run_lag_p99_s=0.006)
    assert summary["valid"] is False
    assert len(summary["invalid_reasons"]) == 1 and "at the herd" in summary["invalid_reasons"][0]
    assert "rack-2" in summary["invalid_reasons"][0] and "150 ms" in summary["invalid_reasons"][0]


def test_the_same_stall_after_the_herd_is_judged_on_the_wider_budget():
    late = _host_run()
    late[150] = Sample(**{**late[150].__dict__, "loop_lag_p99_s": 0.15, "lag_by": "rack-2"})
    assert summarize(late, 0, 50, 55, allowance_s=1.0, run_lag_p99_s=0.006)["valid"] is True
    late[150] = Sample(**{**late[150].__dict__, "loop_lag_p99_s": 0.25})
    (reason,) = summarize(late, 0, 50, 55, allowance_s=1.0, run_lag_p99_s=0.006)["invalid_reasons"]
    assert "t=+100s from the blip" in reason and "20% of the allowance" in reason


def test_a_slower_run_gets_a_proportionally_larger_budget():
    # speed 0.25: the allowance is 4 s, so 150 ms at the herd is under 10% of it
    assert summarize(_host_run(loop_lag_p99_s=0.15), 0, 50, 55, allowance_s=4.0, period_s=40.0, run_lag_p99_s=0.006)["valid"] is True


@pytest.mark.parametrize(
    ("at_70", "words"),
    [
        ({"cpu_ratio": 0.97, "cpu_by": "metadata"}, "metadata used 97% of a core"),
        ({"cpu_wait_s": 0.025, "wait_by": "rack-3"}, "rack-3 waited 25 ms for a core each time it ran"),
        ({"lab_cpu_cores": 1.85}, "used 1.85 of the host's 2 cores"),
        ({"host_steal_ratio": 0.12}, "stole 12%"),
    ],
)
def test_the_host_s_cpu_makes_a_run_invalid_and_says_which(at_70, words):
    summary = summarize(_host_run(**at_70), 0, 50, 55, allowance_s=1.0, run_lag_p99_s=0.004)
    assert summary["valid"] is False
    assert [r for r in summary["invalid_reasons"] if words in r], summary["invalid_reasons"]


def test_a_quiet_host_is_valid_and_its_figures_are_reported():
    summary = summarize(_host_run(), 0, 50, 55, allowance_s=1.0, run_lag_p99_s=0.004)
    assert summary["valid"] is True and summary["invalid_reasons"] == []
    assert summary["cpu_busiest_ratio"] == 0.3 and summary["cpu_wait_worst_s"] == 0.001 and summary["lab_cpu_worst_cores"] == 0.8


def test_the_storm_holds_is_judged_on_the_last_period():
    # a storm that fades 90 s after the blip: the old 60 s window would still have said "holds"
    fades = run_of(lambda t: 0.0 if t < 60 else (0.55 if t < 155 else 0.0))
    summary = summarize(fades, settle_start=0, blip_start=60, blip_end=65, allowance_s=1.0)
    assert summary["storm_holds"] is False and summary["last_period_error_ratio"] == 0.0
    held = summarize(run_of(lambda t: 0.0 if t < 60 else 0.55), settle_start=0, blip_start=60, blip_end=65, allowance_s=1.0)
    assert held["storm_holds"] is True
