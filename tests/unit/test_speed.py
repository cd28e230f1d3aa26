"""Time dilation: the settings at a speed, their round trip through the environment, and how
`--speed auto` picks (pure: the runs that use it are measured in docs/benchmarks.md)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stormcore.health import HostCpu, between, parse_proc_stat, parse_schedstat
from stormcore.settings import LabSettings, Pace, SettingsError
from stormlab.engine.speed import LADDER, Baseline, afford, first_guess, next_slower, parse_speed, rung_at_most


def test_slow_motion_lengthens_every_duration_and_lowers_every_rate():
    slow = LabSettings().sped_up(0.25)
    assert slow.speed == 0.25
    assert slow.allowance_s == 4.0 and slow.renewal_period_s == 40.0 and slow.cost_per_entry_s == pytest.approx(0.018)
    assert slow.customer_rate == 50.0 and slow.activity_rate == 0.25
    assert slow.racks == 10 and slow.capacity_cores == 40.0  # counts are not times
    assert slow.profile_time() == LabSettings()


@given(speed=st.sampled_from([0.05, 0.1, 0.25, 0.3, 0.5, 1.0, 2.0, 7.0, 20.0]))
def test_the_environment_carries_the_profile_and_the_speed(speed):
    run = LabSettings(allowance_s=2.0, renewal_period_s=10.0).sped_up(speed)
    env = run.to_env()
    assert env["STORMLAB_ALLOWANCE_S"] == "2.0" and float(env["STORMLAB_SPEED"]) == pytest.approx(speed)
    back = LabSettings.from_env(env)
    assert back.speed == pytest.approx(speed)
    assert back.allowance_s == pytest.approx(run.allowance_s) and back.customer_rate == pytest.approx(run.customer_rate)


def test_compose_sets_a_speed_beside_the_profile_values():
    # what docker-compose.yml passes: the profile as people write it, and STORMLAB_SPEED
    settings = LabSettings.from_env({"STORMLAB_ALLOWANCE_S": "1s", "STORMLAB_SPEED": "0.5"})
    assert settings.allowance_s == 2.0 and settings.speed == 0.5


def test_a_speed_out_of_range_is_refused():
    with pytest.raises(SettingsError):
        LabSettings.from_env({"STORMLAB_SPEED": "0"})
    for text in ("0", "-1", "21", "fast", "nan"):
        with pytest.raises(SettingsError):
            parse_speed(text)
    assert parse_speed("auto") is None and parse_speed(" AUTO ") is None and parse_speed("0.25") == 0.25


def test_the_ladder():
    assert rung_at_most(1.0) == 1.0 and rung_at_most(0.7) == 0.5 and rung_at_most(0.01) == LADDER[-1]
    assert next_slower(1.0) == 0.5 and next_slower(0.3) == 0.25 and next_slower(LADDER[-1]) is None
    assert first_guess(1_000, cores=2) == 1.0
    assert first_guess(5_000, cores=2) == 1.0 and first_guess(7_000, cores=2) == 0.5 and first_guess(10_000, cores=2) == 0.5
    assert first_guess(20_000, cores=2) == 0.25
    assert first_guess(100_000, cores=16) == 0.25


def test_a_quiet_baseline_keeps_the_speed():
    speed, why = afford(1.0, Baseline(0.1, 0.5, 2, cpu_wait_s=0.001, loop_lag_s=0.003, allowance_s=1.0))
    assert speed == 1.0 and "room" in why


@pytest.mark.parametrize(
    ("baseline", "slower_than", "words"),
    [
        (Baseline(0.6, 0.8, 2, cpu_wait_s=0.0, loop_lag_s=0.0, allowance_s=1.0), 0.5, "of a core"),
        (Baseline(0.3, 1.4, 2, cpu_wait_s=0.0, loop_lag_s=0.0, allowance_s=1.0), 0.5, "of the host's cores"),
        (Baseline(0.1, 0.5, 2, cpu_wait_s=0.02, loop_lag_s=0.0, allowance_s=1.0), 0.5, "for a core"),
        (Baseline(0.1, 0.5, 2, cpu_wait_s=0.0, loop_lag_s=0.2, allowance_s=1.0), 0.25, "lag"),
    ],
)
def test_a_baseline_that_cannot_carry_the_herd_asks_for_slower(baseline, slower_than, words):
    speed, why = afford(1.0, baseline)
    assert speed <= slower_than and speed in LADDER and words in why


def test_the_same_lag_at_a_slower_speed_fits_its_larger_allowance():
    baseline = Baseline(0.1, 0.5, 2, cpu_wait_s=0.0, loop_lag_s=0.06, allowance_s=1.0)
    assert afford(1.0, baseline)[0] < 1.0
    assert afford(0.25, Baseline(**{**baseline.__dict__, "allowance_s": 4.0}))[0] == 0.25


def test_proc_readings():
    text = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\n"
    assert parse_proc_stat(text) == HostCpu(total=1000, idle=850, steal=0)
    assert parse_proc_stat("intr 1 2 3") is None
    assert parse_schedstat("2000000000 500000000 7\n") == (2.0, 0.5, 7)
    assert parse_schedstat("") is None
    reading = between(
        2.0, 1.0, ((1.0, 0.5, 10), (2.0, 0.9, 30)), (HostCpu(total=1000, idle=850, steal=0), HostCpu(total=1400, idle=1050, steal=40))
    )
    assert reading is not None
    assert reading.process == 0.5 and reading.wait == pytest.approx(0.02)  # 0.4 s of waiting over 20 runs
    assert reading.host_busy == pytest.approx(0.5) and reading.host_steal == pytest.approx(0.1)
    assert between(0.0, 1.0, (None, None), (None, None)) is None
    bare = between(1.0, 0.3, (None, None), (None, None))
    assert bare is not None and bare.wait is None and bare.host_busy is None


def test_one_pace_converts_profile_and_wall_time_both_ways():
    slow, fast = Pace(0.25), LabSettings().sped_up(2).pace
    assert slow.wall(5.0) == 20.0 and slow.profile(20.0) == 5.0  # slow motion: a profile second lasts four wall seconds
    assert fast.wall(10.0) == 5.0 and fast.profile(None) is None
    assert fast.per_wall(200.0) == 400.0 and fast.per_profile(0.5) == 0.25  # rates and CPU scale the other way
    s = LabSettings().sped_up(2)
    assert s.renewal_period_s == fast.wall(10.0) and s.customer_rate == fast.per_wall(200.0)  # sped_up is that conversion
