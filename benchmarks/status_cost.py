"""What one `/status` lag figure costs when the lag window is full (200,000 samples, a day at
10 per second) against when it holds only the last 10 s.

    .venv/bin/python benchmarks/status_cost.py

Prints milliseconds per p99 for the 10 s window and for a 5-minute `?lag_window_s=` question;
the validity budget of a run is 50 ms of lag, so a status must cost a small part of it.
"""

from __future__ import annotations

import time

from stormcore.window import Window


def per_call_ms(window: Window, now: float, within_s: float, calls: int = 50) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        window.quantile(0.99, now, within_s)
    return 1000 * (time.perf_counter() - start) / calls


def main() -> None:
    full, short = Window(span_s=24 * 3600.0, max_samples=200_000), Window(span_s=24 * 3600.0, max_samples=200_000)
    for i in range(200_000):
        full.add(i * 0.1, (i % 97) / 1000)
    now = 200_000 * 0.1
    for i in range(100):
        short.add(now - 10 + i * 0.1, (i % 97) / 1000)
    for within in (10.0, 300.0):
        print(
            f"p99 of the last {within:g} s: {per_call_ms(full, now, within):.3f} ms with 200,000 samples kept, "
            f"{per_call_ms(short, now, within):.3f} ms with 100"
        )


if __name__ == "__main__":
    main()
