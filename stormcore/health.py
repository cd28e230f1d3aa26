"""What the host gives a process: its CPU, its wait for a core, the host's busy and stolen time.

A run is the model's only while the host keeps up. Event-loop lag shows a stall after the fact;
these show its causes: a process using a whole core (saturated), a process kept waiting for a
core each time it wakes (its mean run-queue delay, from ``/proc/self/schedstat``: other work,
or the lab itself, oversubscribing the cores), and a hypervisor taking the cores away (steal,
from ``/proc/stat``). The parsing is pure; the :class:`CpuSampler` reads the files once a
second. Where a file is missing (not Linux), its readings are None and nothing is judged on them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from stormcore.window import Window

SCHEDSTAT = Path("/proc/self/schedstat")
PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class HostCpu:
    """The host's CPU counters (``/proc/stat``'s first line, in ticks): all, idle, steal."""

    total: int
    idle: int
    steal: int


def parse_proc_stat(text: str) -> HostCpu | None:
    """``cpu  user nice system idle iowait irq softirq steal guest guest_nice`` (guest time is
    already counted in user). None if the line is not there."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            ticks = [int(x) for x in fields[1:]]
            ticks += [0] * (8 - len(ticks))
            total = sum(ticks[:8])
            return HostCpu(total=total, idle=ticks[3] + ticks[4], steal=ticks[7])
    return None


def parse_schedstat(text: str) -> tuple[float, float, int] | None:
    """``/proc/self/schedstat``: (seconds on a CPU, seconds waiting in the run queue, times run)."""
    fields = text.split()
    if len(fields) < 3:
        return None
    return int(fields[0]) / 1e9, int(fields[1]) / 1e9, int(fields[2])


@dataclass(frozen=True)
class CpuReading:
    """Over one interval: the share of one core this process used, its mean wait for a core
    each time it was run (seconds), and the share of the host's CPU that was busy and stolen."""

    process: float
    wait: float | None
    host_busy: float | None
    host_steal: float | None


Sched = tuple[float, float, int]


def between(
    wall_s: float,
    process_s: float,
    sched: tuple[Sched | None, Sched | None],
    host: tuple[HostCpu | None, HostCpu | None],
) -> CpuReading | None:
    """A reading from two sets of counters ``wall_s`` apart (None if no time passed)."""
    if wall_s <= 0:
        return None
    (s0, s1), (h0, h1) = sched, host
    wait = None
    if s0 and s1:
        runs = s1[2] - s0[2]
        wait = (s1[1] - s0[1]) / runs if runs > 0 else 0.0
    busy = steal = None
    if h0 and h1 and h1.total > h0.total:
        ticks = h1.total - h0.total
        busy = 1.0 - (h1.idle - h0.idle) / ticks
        steal = (h1.steal - h0.steal) / ticks
    return CpuReading(max(0.0, process_s / wall_s), None if wait is None else max(0.0, wait), busy, steal)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


class CpuSampler:
    """Takes a :class:`CpuReading` each time :meth:`sample` is called (once a second) and keeps
    them, so a status can give the mean over its window."""

    def __init__(self, span_s: float = 24 * 3600.0) -> None:
        self.windows = {name: Window(span_s=span_s, max_samples=100_000) for name in ("process", "wait", "host_busy", "host_steal")}
        self._last = self._counters()

    @staticmethod
    def _counters() -> tuple[float, float, Sched | None, HostCpu | None]:
        return time.monotonic(), time.process_time(), parse_schedstat(_read(SCHEDSTAT)), parse_proc_stat(_read(PROC_STAT))

    def sample(self) -> CpuReading | None:
        """One reading since the last call."""
        current = self._counters()
        (w0, p0, s0, h0), (w1, p1, s1, h1) = self._last, current
        self._last = current
        reading = between(w1 - w0, p1 - p0, (s0, s1), (h0, h1))
        if reading is not None:
            for name, window in self.windows.items():
                value = getattr(reading, name)
                if value is not None:
                    window.add(w1, value)
        return reading

    def mean(self, name: str, within_s: float) -> float | None:
        """One reading's mean over the last ``within_s`` (None if there is none)."""
        values = self.windows[name].recent(time.monotonic(), within_s)
        return sum(values) / len(values) if values else None

    def means(self, within_s: float) -> dict[str, float | None]:
        """Each reading's mean over the last ``within_s`` (None where there is none; the wait
        is the mean of the per-second means, close enough for a budget of milliseconds)."""
        return {name: self.mean(name, within_s) for name in self.windows}
