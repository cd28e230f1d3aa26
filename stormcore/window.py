"""Sliding time windows of samples: "the last 10 s" for status and the demo (pure)."""

from __future__ import annotations

from collections import deque


class Window:
    def __init__(self, span_s: float, max_samples: int = 100_000) -> None:
        self.span_s = span_s
        self._samples: deque[tuple[float, float]] = deque(maxlen=max_samples)

    def add(self, now: float, value: float) -> None:
        self._samples.append((now, value))

    def values(self, now: float) -> list[float]:
        self._expire(now)
        return [v for _, v in self._samples]

    def quantile(self, q: float, now: float, within_s: float | None = None) -> float | None:
        """The ``q`` quantile of the samples of the last ``within_s`` (default: the whole span).
        Only those samples are visited, newest first: a 10 s question costs 10 s of samples
        however long the window is."""
        values = self.recent(now, within_s)
        if not values:
            return None
        values.sort()
        return values[min(len(values) - 1, int(q * len(values)))]

    def recent(self, now: float, within_s: float | None = None) -> list[float]:
        """The samples of the last ``within_s`` (default: the whole span), newest first."""
        self._expire(now)
        cutoff = now - (self.span_s if within_s is None else min(within_s, self.span_s))
        values = []
        for t, v in reversed(self._samples):
            if t < cutoff:
                break
            values.append(v)
        return values

    def _expire(self, now: float) -> None:
        while self._samples and self._samples[0][0] < now - self.span_s:
            self._samples.popleft()

    def mean(self, now: float) -> float | None:
        values = self.values(now)
        return sum(values) / len(values) if values else None
