"""A rack's watch on its link to the metadata service (pure): cheap probes, every
``probe_interval_s``; ``probe_failures`` failures in a row mean the link is down (so one slow
probe cannot fake a disruption); the first good probe after that means it is back, and every
node of the rack renews at once: the herd."""

from __future__ import annotations

DOWN, RESTORED = "down", "restored"


class LinkWatch:
    def __init__(self, failures_to_down: int) -> None:
        self.failures_to_down = failures_to_down
        self.up = True
        self._failures = 0

    def probe(self, ok: bool) -> str | None:
        """Feed one probe's result; returns DOWN or RESTORED when the link changes, else None."""
        self._failures = 0 if ok else self._failures + 1
        if self.up and self._failures >= self.failures_to_down:
            self.up = False
            return DOWN
        if ok and not self.up:
            self.up = True
            return RESTORED
        return None
