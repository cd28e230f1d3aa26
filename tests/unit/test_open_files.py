"""A lab's processes may open the files its fleet needs: the launcher raises the limit they inherit,
and refuses a fleet the user's hard limit cannot hold (a rack of 1,000 nodes at a shell's 1,024
failed its herd's connections in the rack and the 10,000-node storm did not form)."""

from __future__ import annotations

import resource
import subprocess
import sys

from stormcore.procs import FILES_SPARE, files_needed, files_wanted


def test_a_rack_needs_two_files_a_node_and_the_busiest_process_one_a_node_of_the_fleet():
    assert files_needed(1_000) == 2_000 + FILES_SPARE  # the herd: a renewal and a dropped one per node
    assert files_wanted(1_000, 100) == 1_000 + FILES_SPARE  # the metadata service: every node's connection
    assert files_wanted(10_000, 1_000) == 10_000 + FILES_SPARE
    assert files_wanted(2_000, 2_000) == 4_000 + FILES_SPARE  # one big rack


def _in_a_child(soft: int, hard: int, needed: int) -> str:
    """raise_open_files run in a child whose limits start at (soft, hard): its answer and its limits after."""
    code = (
        "import resource; from stormcore.procs import raise_open_files; "
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard})); "
        f"print(raise_open_files({needed}), resource.getrlimit(resource.RLIMIT_NOFILE))"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_the_soft_limit_is_raised_to_what_the_fleet_needs_within_the_hard_one():
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = min(hard, 8_192) if hard != resource.RLIM_INFINITY else 8_192
    assert _in_a_child(1_024, top, 2_000) == f"(2000, {top}) (2000, {top})"  # a shell's 1,024, raised
    assert _in_a_child(3_000, top, 2_000) == f"(3000, {top}) (3000, {top})"  # enough already: untouched
    assert _in_a_child(1_024, 1_500, 1_400) == "(1400, 1500) (1400, 1500)"


def test_a_hard_limit_below_the_need_is_raised_only_where_the_process_may():
    said = _in_a_child(1_024, 1_500, 4_000)
    # root with CAP_SYS_RESOURCE raises its hard limit too; anyone else (and root in many containers)
    # stops at the hard limit, and the launcher refuses a rack that needs more
    assert said in ("(4000, 4000) (4000, 4000)", "(1500, 1500) (1500, 1500)")
