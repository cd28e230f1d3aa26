"""The docker backend's fault shells, run for real with `sh` on this host: harmless steps (files
made and removed) stand in for iptables and tc, and the fault files go to a temporary directory."""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from chaos import docker_backend as db
from chaos import fault_shell as fs


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
    shell = start(fs._armed("blip", steps(tmp, "a", "b"), 0.6, prefix))
    try:
        wait_for(lambda: os.path.exists(prefix + str(shell.pid)))
        assert (tmp / "a").exists() and (tmp / "b").exists()
        [line] = run(fs.list_command(prefix)).splitlines()
        pid, fault, ends_at, state, count = line.split()
        assert (int(pid), fault, state, count) == (shell.pid, "blip", "held", "-") and float(ends_at) > time.time() - 2
        assert shell.wait(timeout=5) == 0
        assert not (tmp / "a").exists() and not (tmp / "b").exists() and not os.path.exists(prefix + pid)
        [line] = run(fs.list_command(prefix)).splitlines()  # its end, kept for the listing
        pid, fault, ended_at, state, count = line.split()
        assert (int(pid), fault, state, count) == (shell.pid, "blip", "ended", "-") and abs(float(ended_at) - time.time()) < 5
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)


def test_halt_reverts_a_held_fault_at_once(where):
    tmp, prefix = where
    shell = start(fs._armed("partition", steps(tmp, "a"), 60, prefix))
    try:
        wait_for(lambda: os.path.exists(prefix + str(shell.pid)))
        assert run(fs.halt_command(prefix)).strip() == "1"
        assert shell.wait(timeout=5) == 0
        assert not (tmp / "a").exists()
        assert [line.split()[3] for line in run(fs.list_command(prefix)).splitlines()] == ["ended"]  # nothing held
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)


def test_a_step_that_fails_undoes_the_steps_before_it_and_leaves_nothing(where):
    tmp, prefix = where
    done = subprocess.run(list(fs._armed("latency", steps(tmp, "a", "b", fail_at=1), 60, prefix)), timeout=10)
    assert done.returncode == 1
    assert not (tmp / "a").exists() and not (tmp / "b").exists() and not (tmp / "never").exists()
    assert run(fs.list_command(prefix)) == ""  # nothing held: the CLI reports the fault did not apply


def test_a_fault_shell_says_what_its_count_read_while_held_and_at_its_end(where):
    tmp, prefix = where
    counter = tmp / "count"
    counter.write_text("3")
    shell = start(fs._armed("blip", steps(tmp, "a"), 60, prefix, count=f"cat {counter}; echo {fs.PID} > {tmp}/pid-seen"))
    try:
        wait_for(lambda: os.path.exists(prefix + str(shell.pid)))
        [line] = run(fs.list_command(prefix)).splitlines()
        assert line.split()[3:] == ["held", "3"]
        assert (tmp / "pid-seen").read_text().strip() == str(shell.pid)  # the count names its own shell's rules
        counter.write_text("0")
        assert run(fs.halt_command(prefix)).strip() == "1"
        assert shell.wait(timeout=5) == 0
        [ended] = db.listed(LocalRunner(prefix), ["here"])
        assert (ended.pid, ended.state, ended.acted, ended.effect) == (shell.pid, "ended", 0, {"dropped_packets": 0})
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)


def test_an_ended_record_is_forgotten_after_ten_minutes_and_a_malformed_one_at_once(where):
    tmp, prefix = where
    ended = fs.ended_prefix(prefix)
    old, young = int(time.time()) - fs.ENDED_KEPT_S - 5, int(time.time()) - 5
    for name, text in (("11", f"blip {old} 4"), ("12", f"blip {young} 0"), ("13", "blip soon 0"), ("x", f"blip {young} 1")):
        with open(ended + name, "w") as f:
            f.write(text + "\n")
    assert run(fs.list_command(prefix)).splitlines() == [f"12 blip {young} ended 0"]
    assert sorted(p.name for p in tmp.iterdir()) == ["stormlab-ended.12"]


class LocalRunner:
    """The listing run on this host (the fault files under a temporary prefix)."""

    def __init__(self, prefix):
        self.prefix = prefix

    def exec(self, command):
        assert command.argv == fs.LIST
        return run(fs.list_command(self.prefix))


def test_a_fault_whose_holder_died_is_reverted_by_list(where):
    tmp, prefix = where
    shell = start(fs._armed("blip", steps(tmp, "a", "b"), 60, prefix))
    wait_for(lambda: os.path.exists(prefix + str(shell.pid)))
    os.killpg(shell.pid, signal.SIGKILL)  # the holder dies with its rules in
    shell.wait(timeout=5)
    assert (tmp / "a").exists()
    [line] = run(fs.list_command(prefix)).splitlines()
    assert line.split()[3:] == ["orphan", "-"]
    assert not (tmp / "a").exists() and not (tmp / "b").exists() and not os.path.exists(prefix + str(shell.pid))


def test_halt_never_signals_what_is_not_a_fault_shell(where):
    tmp, prefix = where
    bystander = start(["sleep", "30"])  # a live process that is not a fault shell
    try:
        for name in ("-1", "abc", "1", str(bystander.pid)):
            with open(prefix + name, "w") as f:
                f.write(f"blip 9999999999\n:\ntouch {tmp}/undone-{name.strip('-')}\n")
        assert run(fs.halt_command(prefix)).strip() == "2"  # pid 1 and the bystander's: orphans, reverted here
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
        f.write(f"blip 9999999999\n:\ntouch {tmp}/ran-as-root\n")
    os.chown(planted, 65534, 65534)  # nobody: the service's user could write to /dev/shm
    assert run(fs.halt_command(prefix)).strip() == "0" and run(fs.list_command(prefix)) == ""
    assert not (tmp / "ran-as-root").exists() and os.path.exists(planted)


def _netns_ok() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("iptables") is not None


@pytest.fixture
def netns():
    """A network namespace of this test's own, its loopback up."""
    name = f"stormlab-test-{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
        pytest.skip("cannot make a network namespace here")
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.mark.skipif(not _netns_ok(), reason="needs root, ip and iptables (CI runs as root; Debian's iptables)")
def test_a_real_partition_counts_the_packets_its_own_rules_dropped(where, netns):
    tmp, prefix = where
    inside = ["ip", "netns", "exec", netns]
    [cut] = fs.partition("here", ["127.0.0.9"], 60, "out", "blip")
    shell = subprocess.Popen([*inside, *cut.argv], start_new_session=True)
    try:
        wait_for(lambda: os.path.exists(fs.FAULT_FILE + str(shell.pid)) or shell.poll() is not None)
        assert shell.poll() is None, "the rules did not go in"
        send = (
            "import contextlib, socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nfor _ in range(3):\n"
            "    with contextlib.suppress(OSError):\n        s.sendto(b'x', ('127.0.0.9', 9))"  # a dropped send fails (EPERM)
        )
        subprocess.run([*inside, sys.executable, "-c", send], capture_output=True)
        [held] = [h for h in db.listed(NetnsRunner(inside), ["here"]) if h.pid == shell.pid]
        assert (held.state, held.effect) == ("held", {"dropped_packets": 3})
        assert subprocess.run([*inside, *fs.HALT], capture_output=True, text=True).stdout.strip() == "1"
        assert shell.wait(timeout=5) == 0
        [ended] = [h for h in db.listed(NetnsRunner(inside), ["here"]) if h.pid == shell.pid]
        assert (ended.state, ended.acted) == ("ended", 3)
        rules = subprocess.run([*inside, "iptables", "-S", "OUTPUT"], capture_output=True, text=True).stdout
        assert "stormlab" not in rules  # reverted
    finally:
        stop_and_clean(shell)


def stop_and_clean(shell):
    """A real fault shell stopped if it still runs, and its files in /dev/shm gone."""
    if shell.poll() is None:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()
    for leftover in (fs.FAULT_FILE + str(shell.pid), fs.ended_prefix(fs.FAULT_FILE) + str(shell.pid)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leftover)


class NetnsRunner:
    def __init__(self, inside):
        self.inside = inside

    def exec(self, command):
        return subprocess.run([*self.inside, *command.argv], capture_output=True, text=True, timeout=10).stdout


@pytest.mark.skipif(not _netns_ok(), reason="needs root, ip and iptables (CI runs as root; Debian's iptables)")
def test_the_reaper_reverts_the_rules_of_a_shell_that_died_and_leaves_a_live_ones_alone(where, netns):
    inside = ["ip", "netns", "exec", netns]
    [dead], [live] = fs.partition("here", ["127.0.0.7"], 60, "out", "blip"), fs.partition("here", ["127.0.0.8"], 60, "in", "blip")
    shells = [subprocess.Popen([*inside, *cmd.argv], start_new_session=True) for cmd in (dead, live)]
    try:
        for shell in shells:
            wait_for(lambda shell=shell: os.path.exists(fs.FAULT_FILE + str(shell.pid)))
        os.killpg(shells[0].pid, signal.SIGKILL)  # the holder dies with its rule in
        shells[0].wait()
        os.unlink(fs.FAULT_FILE + str(shells[0].pid))  # and its file is not where a listing would look
        assert subprocess.run([*inside, *fs.REAP], capture_output=True, text=True).stdout.strip() == "1"
        rules = subprocess.run([*inside, "iptables-save"], capture_output=True, text=True).stdout
        assert "127.0.0.7" not in rules and f"stormlab-{shells[1].pid}" in rules  # the live shell's rule stays
        assert subprocess.run([*inside, *fs.REAP], capture_output=True, text=True).stdout.strip() == "0"
    finally:
        for shell in shells:
            stop_and_clean(shell)
