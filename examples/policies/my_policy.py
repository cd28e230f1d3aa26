"""A retry policy of your own: `stormlab certify ./my_policy.py:CappedJitter`.

The protocol (docs/policies.md): ``next_delay(miss, rng)`` returns the seconds to wait before
the next attempt, or None to give up until the next scheduled renewal. ``record`` and
``admits`` are optional. Draw jitter from ``rng`` (the node's seeded generator).
"""

import random


class CappedJitter:
    """Full jitter on an exponential ceiling, at most four retries per renewal."""

    base_s = 0.5
    cap_s = 10.0
    max_retries = 4

    def next_delay(self, miss, rng: random.Random) -> float | None:
        if miss.attempt > self.max_retries:
            return None
        return rng.uniform(0.0, min(self.cap_s, self.base_s * 2 ** (miss.attempt - 1)))
