"""The refusal rule as a state machine: no confirmed membership, no serving.

A storage node that does not get its membership within the allowance disqualifies itself
(refuses customer requests) until a renewal succeeds again. Disqualify on the first miss,
requalify on the first success: the 2015 rule. Transitions are data.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class NodeState(str, enum.Enum):
    STARTING = "starting"  # no membership yet: refuses, like a disqualified node
    SERVING = "serving"
    DISQUALIFIED = "disqualified"


@dataclass(frozen=True)
class RenewalSucceeded:
    at: float
    entries: int


@dataclass(frozen=True)
class RenewalMissed:
    at: float
    reason: str  # "timeout", "unreachable", "paused", "error"


Event = RenewalSucceeded | RenewalMissed

TRANSITIONS: dict[tuple[NodeState, type], NodeState] = {
    (NodeState.STARTING, RenewalSucceeded): NodeState.SERVING,
    (NodeState.STARTING, RenewalMissed): NodeState.DISQUALIFIED,
    (NodeState.SERVING, RenewalSucceeded): NodeState.SERVING,
    (NodeState.SERVING, RenewalMissed): NodeState.DISQUALIFIED,
    (NodeState.DISQUALIFIED, RenewalSucceeded): NodeState.SERVING,
    (NodeState.DISQUALIFIED, RenewalMissed): NodeState.DISQUALIFIED,
}


class Refusal:
    """One node's qualification: what it is, since when, and why it refuses."""

    def __init__(self, now: float) -> None:
        self.state = NodeState.STARTING
        self.since = now
        self.reason = "membership not fetched yet"
        self.disqualifications = 0

    @property
    def serving(self) -> bool:
        return self.state is NodeState.SERVING

    def handle(self, event: Event) -> NodeState:
        new = TRANSITIONS[(self.state, type(event))]
        if isinstance(event, RenewalMissed):
            self.reason = f"membership renewal missed ({event.reason})"
        if new is not self.state:
            if new is NodeState.DISQUALIFIED:
                self.disqualifications += 1
            self.state, self.since = new, event.at
        return new
