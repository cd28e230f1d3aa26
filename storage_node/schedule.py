"""Fixed-rate renewal slots with jitter that does not accumulate.

Slot ``k`` is at ``phase + k * period + jitter_k`` with ``jitter_k`` drawn once in
``[-j * period, +j * period]``: the next renewal is scheduled from the previous *schedule*,
not from when the last renewal finished, so slow renewals do not drift the fleet into step.
"""

from __future__ import annotations

import random


class RenewalSchedule:
    def __init__(self, phase: float, period: float, jitter: float, rng: random.Random) -> None:
        self.phase, self.period, self.jitter = phase, period, jitter
        self._rng = rng
        self._k = 0
        self._slot = self._draw(0)

    def _draw(self, k: int) -> float:
        return self.phase + k * self.period + self._rng.uniform(-self.jitter, self.jitter) * self.period

    def next_after(self, now: float) -> float:
        """The first slot strictly after ``now`` (slots missed while busy are skipped)."""
        while self._slot <= now:
            self._k += 1
            self._slot = self._draw(self._k)
        return self._slot
