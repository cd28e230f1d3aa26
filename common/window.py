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
        while self._samples and self._samples[0][0] < now - self.span_s:
            self._samples.popleft()
        return [v for _, v in self._samples]

    def quantile(self, q: float, now: float, within_s: float | None = None) -> float | None:
        values = self.values(now)
        if within_s is not None:
            values = [v for t, v in self._samples if t >= now - within_s]
        values = sorted(values)
        if not values:
            return None
        return values[min(len(values) - 1, int(q * len(values)))]

    def mean(self, now: float) -> float | None:
        values = self.values(now)
        return sum(values) / len(values) if values else None
