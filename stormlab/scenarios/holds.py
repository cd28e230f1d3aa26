"""The facilitator's holds. While one lasts the game's clock stands still: the scenario's next
steps, its injects, the operator phase's time limit and the score wait, and the players' moves
are refused; the lab runs on (a storm does not wait for a debrief). Pure: spans of the run's wall
clock (seconds since it started) and the game's clock they leave.

A page, an ack or a note that comes in while the game is held is put at the moment the hold
began; the journal keeps each hold (``holds``: when, on the game's clock, and how long)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Holds:
    spans: list[tuple[float, float | None]] = field(default_factory=list)  # (began, ended) on the wall clock since the start

    @property
    def on(self) -> bool:
        return bool(self.spans) and self.spans[-1][1] is None

    def begin(self, wall: float) -> bool:
        """Hold from ``wall``; False if the game is held already (nothing changes)."""
        if self.on:
            return False
        self.spans.append((wall, None))
        return True

    def end(self, wall: float) -> bool:
        """The game goes on from ``wall``; False if it was not held."""
        if not self.on:
            return False
        self.spans[-1] = (self.spans[-1][0], max(wall, self.spans[-1][0]))
        return True

    def held_before(self, wall: float) -> float:
        """Seconds the game stood still before ``wall`` (a hold still on counts up to ``wall``)."""
        return sum(max(0.0, min(wall, wall if end is None else end) - began) for began, end in self.spans)

    def game(self, wall: float) -> float:
        """The game's clock at ``wall``: the wall clock less the time held before it (a moment inside
        a hold is the moment it began)."""
        return wall - self.held_before(wall)

    def record(self, wall: float) -> list[dict[str, Any]]:
        """Each hold for the journal: when it began on the game's clock and how long it lasted (so far,
        for one still on at ``wall``)."""
        return [
            {"at_s": round(self.game(began), 3), "held_s": round((wall if end is None else end) - began, 3), "on": end is None}
            for began, end in self.spans
        ]
