"""The docker backend's fault shells, run for real with `sh` on this host: harmless steps (files
made and removed) stand in for iptables and tc, and the fault files go to a temporary directory."""

import os
import signal
import subprocess
import time

import pytest

from chaos import docker_backend as db


@pytest.fixture
def where(tmp_path):
    return tmp_path, str(tmp_path / "stormlab-fault.")


def steps(tmp_path, *names, fail_at=None):
    out = [(f"touch {tmp_path}/{n}", f"rm -f {tmp_path}/{n}") for n in names]
    if fail_at is not None:
        out.insert(fail_at, ("false", "touch " + str(tmp_path / "never")))
    return out


def start(argv):
    return subprocess.Popen(list(argv), start_new_session=True)


def wait_for(check, limit_s=5.0):
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.02)


def run(argv):
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=10).stdout


def test_a_fault_shell_applies_holds_and_reverts_by_itself(where):
    tmp, prefix = where
    shell = start(db._armed("blip", steps(tmp, "a", "b"), 0.6, prefix))
    try:
        wait_for(lambda: os.path.exists(prefix + str(shell.pid)))
        assert (tmp / "a").exists() and (tmp / "b").exists()
        [line] = run(db.list_command(prefix)).splitlines()
        pid, fault, ends_at, state = line.split()
        assert (int(pid), fault, state) == (shell.pid, "blip", "held") and float(ends_at) > time.time() - 2
        assert shell.wait(timeout=5) == 0
        assert not (tmp / "a").exists() and not (tmp / "b").exists() and not os.path.exists(prefix + pid)
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)


def test_halt_reverts_a_held_fault_at_once(where):
    tmp, prefix = where
    shell = start(db._armed("partition", steps(tmp, "a"), 60, prefix))
    try:
        wait_for(lambda: os.path.exists(prefix + str(shell.pid)))
        assert run(db.halt_command(prefix)).strip() == "1"
        assert shell.wait(timeout=5) == 0
        assert not (tmp / "a").exists() and run(db.list_command(prefix)) == ""
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)


def test_a_step_that_fails_undoes_the_steps_before_it_and_leaves_nothing(where):
    tmp, prefix = where
    done = subprocess.run(list(db._armed("latency", steps(tmp, "a", "b", fail_at=1), 60, prefix)), timeout=10)
    assert done.returncode == 1
    assert not (tmp / "a").exists() and not (tmp / "b").exists() and not (tmp / "never").exists()
    assert run(db.list_command(prefix)) == ""  # nothing held: the CLI reports the fault did not apply


def test_a_fault_whose_holder_died_is_reverted_by_list(where):
    tmp, prefix = where
    shell = start(db._armed("blip", steps(tmp, "a", "b"), 60, prefix))
    wait_for(lambda: os.path.exists(prefix + str(shell.pid)))
    os.killpg(shell.pid, signal.SIGKILL)  # the holder dies with its rules in
    shell.wait(timeout=5)
    assert (tmp / "a").exists()
    [line] = run(db.list_command(prefix)).splitlines()
    assert line.split()[3] == "orphan"
    assert not (tmp / "a").exists() and not (tmp / "b").exists() and not os.path.exists(prefix + str(shell.pid))


def test_halt_never_signals_what_is_not_a_fault_shell(where):
    tmp, prefix = where
    bystander = start(["sleep", "30"])  # a live process that is not a fault shell
    try:
        for name in ("-1", "abc", "1", str(bystander.pid)):
            with open(prefix + name, "w") as f:
                f.write(f"blip 9999999999\ntouch {tmp}/undone-{name.strip('-')}\n")
        assert run(db.halt_command(prefix)).strip() == "2"  # pid 1 and the bystander's: orphans, reverted here
        assert bystander.poll() is None  # not signalled
        assert (tmp / f"undone-{bystander.pid}").exists() and (tmp / "undone-1").exists()
        assert not (tmp / "undone-abc").exists()  # a name that is not a pid is removed, its lines never run
        assert sorted(p.name for p in tmp.iterdir() if p.name.startswith("stormlab-fault.")) == []
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a file another user owns")
def test_a_fault_file_another_user_wrote_is_neither_run_nor_signalled(where):
    tmp, prefix = where
    planted = prefix + "1"
    with open(planted, "w") as f:
        f.write(f"blip 9999999999\ntouch {tmp}/ran-as-root\n")
    os.chown(planted, 65534, 65534)  # nobody: the service's user could write to /dev/shm
    assert run(db.halt_command(prefix)).strip() == "0" and run(db.list_command(prefix)) == ""
    assert not (tmp / "ran-as-root").exists() and os.path.exists(planted)
