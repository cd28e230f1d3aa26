"""The local lab's port plan: one port per process, never two processes on one port."""

import multiprocessing
import os
import time

import pytest

from stormcore import roster
from stormcore.errors import LabError
from stormcore.settings import LabSettings
from stormlab.engine import ports as ports_module
from stormlab.engine.ports import port_plan


def ports(plan):
    return [*plan.single.values(), *plan.racks, *plan.links, *(p for ps in plan.paths.values() for p in ps), *plan.cells]


@pytest.mark.parametrize("racks", [1, 10, 64])
def test_the_fixed_plan_gives_every_process_its_own_port(racks, monkeypatch):
    monkeypatch.setattr("stormlab.engine.ports.port_free", lambda port: True)
    every = ports(port_plan(LabSettings(racks=racks, cells=min(racks, 2)), 20_000, roster.CASCADE))
    assert len(every) == len(set(every))


def test_a_fleet_the_fixed_plan_cannot_hold_is_refused_not_given_shared_ports(monkeypatch):
    monkeypatch.setattr("stormlab.engine.ports.port_free", lambda port: True)
    with pytest.raises(LabError, match="no room for 65 racks.*--base-port 0"):
        port_plan(LabSettings(racks=65), 20_000, roster.CASCADE)


def test_free_ports_are_unique_for_the_largest_fleet():
    every = ports(port_plan(LabSettings(racks=128, cells=4), 0, roster.CASCADE))
    assert len(every) == len(set(every))


def _pick_in_a_child(n, conn):
    conn.send(ports_module._free_ports(n))
    conn.close()


def test_two_processes_choosing_free_ports_at_once_never_choose_the_same(tmp_path, monkeypatch):
    """Two test workers (or a room's teams) start labs at the same moment: each process's own
    promises do not see the other's, so both found the same unbound ports (a supervisor then died
    with 'address already in use'). Each port is claimed in a file first: the second takes others."""
    monkeypatch.setattr(ports_module, "claims_dir", lambda: tmp_path)
    monkeypatch.setattr(ports_module, "_HANDED_OUT", set())  # this process's own promises, apart from other tests'
    monkeypatch.setattr(ports_module.random, "randrange", lambda low, high: 20_000)  # the same start in both
    context = multiprocessing.get_context("fork")
    pipes = [context.Pipe(duplex=False) for _ in range(2)]
    children = [context.Process(target=_pick_in_a_child, args=(30, sender)) for _, sender in pipes]
    for child in children:
        child.start()
    picked = [receiver.recv() for receiver, _ in pipes]
    for child in children:
        child.join(10)
    assert all(len(p) == 30 for p in picked) and not set(picked[0]) & set(picked[1]), picked
    assert {int(p.name) for p in tmp_path.iterdir()} == set(picked[0]) | set(picked[1])  # the claims, on disk


def test_a_claim_holds_while_it_is_fresh_and_is_forgotten_after(tmp_path, monkeypatch):
    monkeypatch.setattr(ports_module, "claims_dir", lambda: tmp_path)
    monkeypatch.setattr(ports_module, "_HANDED_OUT", set())  # this process's own promises, apart from other tests'
    monkeypatch.setattr(ports_module.random, "randrange", lambda low, high: 21_000)
    for port in (21_000, 21_001):
        (tmp_path / str(port)).touch()  # another process's claims, fresh
    assert ports_module._free_ports(1) == [21_002]
    old = time.time() - ports_module.CLAIM_S - 1
    os.utime(tmp_path / "21000", (old, old))  # its lab has long bound it, or never will
    monkeypatch.setattr(ports_module, "_HANDED_OUT", set())
    (tmp_path / "21002").unlink()
    assert ports_module._free_ports(1) == [21_000]
    assert sorted(int(p.name) for p in tmp_path.iterdir()) == [21_000, 21_001]


def test_free_ports_leave_alone_the_ports_a_labs_rules_in_the_kernel_name(tmp_path, monkeypatch):
    """A killed lab's redirect left in the kernel (root, link_cut=kernel) would take a new lab's
    connections to that port elsewhere, and it would never come up healthy."""
    monkeypatch.setattr(ports_module, "claims_dir", lambda: tmp_path)
    monkeypatch.setattr(ports_module, "_HANDED_OUT", set())
    monkeypatch.setattr(ports_module.random, "randrange", lambda low, high: 20_000)
    monkeypatch.setattr(ports_module, "port_free", lambda port: True)
    monkeypatch.setattr(ports_module, "ports_in_kernel", lambda: {20_001, 20_003})
    assert ports_module._free_ports(4) == [20_000, 20_002, 20_004, 20_005]


def _temp_of_its_own(tmp_path, monkeypatch):
    shared = tmp_path / "tmp"
    shared.mkdir()
    monkeypatch.setattr(ports_module.tempfile, "tempdir", str(shared))
    return shared / f"stormlab-ports-{os.getuid()}"


def test_a_claim_folder_planted_as_a_symlink_is_refused_and_nothing_where_it_points_is_touched(tmp_path, monkeypatch):
    """Another local user could make the name first, pointing at a folder of the victim's: a lab's
    start would then delete every file older than five minutes there."""
    planted = _temp_of_its_own(tmp_path, monkeypatch)
    victim = tmp_path / "papers"
    victim.mkdir()
    (victim / "thesis.tex").touch()
    old = time.time() - ports_module.CLAIM_S - 1
    os.utime(victim / "thesis.tex", (old, old))
    planted.symlink_to(victim)
    with pytest.raises(LabError, match="not a folder of this user's"):
        ports_module._free_ports(1)
    assert (victim / "thesis.tex").exists()


def test_a_claim_folder_anyone_may_write_is_refused_with_a_message(tmp_path, monkeypatch):
    """A world-writable folder full of fresh claims would stop every lab that picks free ports."""
    planted = _temp_of_its_own(tmp_path, monkeypatch)
    planted.mkdir()
    planted.chmod(0o777)
    for port in range(10_000, 10_050):
        (planted / str(port)).touch()
    with pytest.raises(LabError, match="no one else can open; remove it"):
        ports_module._free_ports(1)


@pytest.mark.skipif(os.getuid() != 0, reason="giving a folder to another user needs root")
def test_a_claim_folder_another_user_owns_is_refused(tmp_path, monkeypatch):
    planted = _temp_of_its_own(tmp_path, monkeypatch)
    planted.mkdir(mode=0o700)
    os.chown(planted, 65534, 65534)
    with pytest.raises(LabError, match="belongs to uid 65534"):
        ports_module._free_ports(1)


def test_the_claim_folder_is_made_private_and_used(tmp_path, monkeypatch):
    made = _temp_of_its_own(tmp_path, monkeypatch)
    monkeypatch.setattr(ports_module, "_HANDED_OUT", set())
    [port] = ports_module._free_ports(1)
    assert made.stat().st_mode & 0o777 == 0o700 and [p.name for p in made.iterdir()] == [str(port)]


def test_forgetting_old_claims_touches_only_claim_files(tmp_path):
    old = time.time() - ports_module.CLAIM_S - 1
    (tmp_path / "notes").touch()
    (tmp_path / "20000").symlink_to(tmp_path / "notes")
    (tmp_path / "20001").touch()
    for name in ("notes", "20001"):
        os.utime(tmp_path / name, (old, old))
    ports_module._forget_old_claims(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["20000", "notes"]
