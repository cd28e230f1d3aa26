import os
from pathlib import Path

import pytest


def _children() -> set[int]:
    me = str(os.getpid())
    kids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me and fields[0] != "Z":
            kids.add(int(stat.parent.name))
    return kids


@pytest.fixture(autouse=True)
def no_process_left_behind():
    """Fail a test that leaves a process of ours running (a lab not torn down)."""
    before = _children()
    yield
    leaked = _children() - before
    assert not leaked, f"processes left running: {sorted(leaked)}"
