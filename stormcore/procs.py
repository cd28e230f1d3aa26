"""A process the lab started, known by more than its pid: its pid and its start time.

A pid written to a file outlives its process; once the process is gone the kernel gives the pid
to another, and anything that signals "the pid in game.json" may stop an editor, a shell or a
stranger's job. So a child is recorded with its start time (``/proc/PID/stat``'s 22nd field, in
clock ticks since boot), and signalled through a pidfd opened on it and checked against that start
time: a pid reused since, even between the check and the signal, is never touched.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
from dataclasses import dataclass
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command's name (which may hold spaces), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_ticks(pid: int) -> int | None:
    """When the process ``pid`` started, in clock ticks since boot; None if there is none."""
    fields = _stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


@dataclass(frozen=True)
class Child:
    """A process we started: its pid and start time, as written to a state file and read back."""

    pid: int
    started: int

    @classmethod
    def of(cls, pid: int) -> Child:
        started = start_ticks(pid)
        if started is None:
            raise ProcessLookupError(f"no process {pid}")
        return cls(pid, started)

    @classmethod
    def read(cls, entry: object) -> Child | None:
        """From a state file's ``{"pid": ..., "started": ...}``; None for anything else (a file
        written before start times were kept names nobody we can be sure of)."""
        if not isinstance(entry, dict):
            return None
        pid, started = entry.get("pid"), entry.get("started")
        if isinstance(pid, bool) or isinstance(started, bool) or not isinstance(pid, int) or not isinstance(started, int):
            return None
        return cls(pid, started) if pid > 0 else None

    def record(self) -> dict[str, int]:
        return {"pid": self.pid, "started": self.started}

    def alive(self) -> bool:
        """This very process still runs (not gone, not a zombie, its pid not handed to another)."""
        fields = _stat(self.pid)
        return fields is not None and len(fields) > 19 and fields[0] != "Z" and int(fields[19]) == self.started

    def send(self, sig: int) -> bool:
        """``sig`` to this very process: whether it was sent (False: it is gone, or its pid is
        another's now)."""
        try:
            fd = os.pidfd_open(self.pid)
        except OSError:
            return False
        try:
            if not self.alive():  # checked after the pidfd was opened: the pidfd is the process checked
                return False
            signal.pidfd_send_signal(fd, sig)
            return True
        except ProcessLookupError:
            return False
        finally:
            os.close(fd)


def resident_bytes(pid: int) -> int | None:
    """The memory the process ``pid`` holds in RAM (its resident set, ``/proc/PID/statm``), or None."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return None


FILES_SPARE = 256  # a process's own files beyond its connections: logs, the item store, listening sockets


def files_needed(nodes_per_rack: int) -> int:
    """Open files a rack must be able to hold at once: two per node (its renewal and its dropped
    one closing, the herd's case) and its own. Below this the herd fails in the rack."""
    return 2 * nodes_per_rack + FILES_SPARE


def files_wanted(nodes_total: int, nodes_per_rack: int) -> int:
    """Open files the busiest lab process may hold at once: the metadata service one connection
    per node renewing (kept alive, or the herd's fresh ones), or a rack's."""
    return max(nodes_total + FILES_SPARE, files_needed(nodes_per_rack))


def raise_open_files(needed: int) -> tuple[int, int]:
    """Raise this process's limit of open files (its children inherit it) to ``needed`` if it is
    below: the soft limit up to the hard one, as any process may, and the hard one too where the
    process may (root); (soft, hard) after. A user's shell commonly starts at 1,024: a rack of
    1,000 nodes met it in the herd and its connections failed in the rack (EMFILE), not on the
    link, which shaped the storm (a 10,000-node lab recovered where it should have stormed)."""
    infinity = resource.RLIM_INFINITY
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == infinity or soft >= needed:
        return soft, hard
    if hard != infinity and hard < needed:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, needed))  # root (CAP_SYS_RESOURCE) may
            return needed, needed
        except (ValueError, OSError):
            pass
    soft = hard if hard != infinity and hard < needed else needed
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft, hard


PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child before it runs (``preexec_fn``): the kernel kills it when its parent dies
    (Linux's parent-death signal), so a lab killed outright leaves nothing behind."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:  # not Linux: down still stops every child by pid
        pass
