"""The supervisor's restart and log policy: a crashing child backs off, its log does not grow
without end."""

from stormlab.engine.supervisor import RESTART_MAX_DELAY_S, restart_delay, rotate


def test_a_child_that_keeps_crashing_is_restarted_less_and_less_often():
    delays = [restart_delay(n) for n in range(1, 9)]
    assert delays[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert delays[5:] == [RESTART_MAX_DELAY_S] * 3
    assert sum(delays) > 100  # eight quick crashes take minutes, not eight seconds


def test_a_log_past_its_limit_is_rotated_once_and_a_small_one_is_left(tmp_path):
    log = tmp_path / "rack-00.log"
    log.write_bytes(b"x" * 100)
    rotate(log, max_bytes=200)
    assert log.read_bytes() == b"x" * 100 and not (tmp_path / "rack-00.log.1").exists()
    log.write_bytes(b"y" * 300)
    rotate(log, max_bytes=200)
    assert not log.exists() and (tmp_path / "rack-00.log.1").read_bytes() == b"y" * 300
    log.write_bytes(b"z" * 300)
    rotate(log, max_bytes=200)  # the older copy is replaced: at most two files per component
    assert (tmp_path / "rack-00.log.1").read_bytes() == b"z" * 300
    rotate(tmp_path / "never-started.log")  # nothing to rotate is fine
