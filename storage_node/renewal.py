"""What a node does after each renewal attempt (pure): the one decision the rack's renewal loop
and the reference model both make.

A renewal starts at a scheduled slot (or at once when the rack's link comes back). After each
attempt the node tells its refusal state machine (disqualify on a miss, requalify on a success),
tells the retry policy (a budget counts the outcome; a policy that counts attempts in flight
was told when it left, ``sending``), and then either waits for its next slot
(success, or the policy gives up) or retries. A retry never comes sooner than the allowance
after the attempt began: a fast failure (refused at a paused service's door, unreachable) waits
out its allowance, so a dead or paused metadata service is not hit in a tight loop; a timeout
has used the allowance up already, so an immediate retry stays immediate.

The retry budget's scope is the rack: one policy per rack process (``rack_policy``), shared by
its nodes, in the lab and in the model alike.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from storage_node.refusal import NodeState, Refusal, RenewalMissed, RenewalSucceeded
from stormcore import policies, retry
from stormcore.settings import LabSettings

OK = "ok"
KEPT_BACK = "breaker"  # an attempt the rack's breaker kept back: never sent


@dataclass(frozen=True)
class Attempt:
    started: float
    ended: float
    outcome: str  # "ok", or why it missed: "timeout", "unreachable", "paused", "overloaded", "breaker", "error"
    entries: int = 0


@dataclass(frozen=True)
class Decision:
    state: NodeState
    disqualified_now: bool  # this attempt took the node out of service
    retry_at: float | None  # None: wait for the next scheduled slot


@dataclass
class Renewal:
    """One node's renewal state: its refusal state machine and the misses of this renewal."""

    refusal: Refusal
    misses: int = 0
    last_delay: float = 0.0
    began: float | None = None  # when this renewal's first attempt began
    outcomes: tuple[str, ...] = ()  # this renewal's misses so far

    def start(self) -> None:
        """A new renewal (a scheduled slot, or the link came back): misses count from zero."""
        self.misses, self.last_delay, self.began, self.outcomes = 0, 0.0, None, ()

    def sending(self, policy: retry.RetryPolicy, now: float) -> None:
        """An attempt of this renewal leaves (after the policy admitted it): the policy is told."""
        policy.sent(self.misses > 0, now)

    def after(self, attempt: Attempt, policy: retry.RetryPolicy, rng: random.Random, allowance_s: float) -> Decision:
        ok = attempt.outcome == OK
        if attempt.outcome != KEPT_BACK:
            policy.finished(self.misses > 0, attempt.ended)
        policy.record(ok, attempt.ended)
        before = self.refusal.state
        if ok:
            self.misses, self.last_delay, self.began, self.outcomes = 0, 0.0, None, ()
            return Decision(self.refusal.handle(RenewalSucceeded(attempt.ended, attempt.entries)), False, None)
        self.misses += 1
        if self.began is None:
            self.began = attempt.started
        self.outcomes += (attempt.outcome,)
        after = self.refusal.handle(RenewalMissed(attempt.ended, attempt.outcome))
        newly = after is NodeState.DISQUALIFIED and before is not NodeState.DISQUALIFIED
        miss = retry.Miss(self.misses, attempt.outcome, attempt.ended - self.began, self.last_delay, self.outcomes)
        delay = policy.next_delay(miss, rng)
        if delay is None:
            return Decision(after, newly, None)
        self.last_delay = delay
        return Decision(after, newly, max(attempt.ended + delay, attempt.started + allowance_s))


def rack_policy(s: LabSettings, strict: bool = True, told: policies.Told | None = None) -> retry.RetryPolicy:
    """The retry policy of one rack (a budget, if any, is shared by the rack's nodes). A user's
    policy (stormcore/policies) runs in profile seconds, converted at the run's speed; a call
    into it that raises or breaks the protocol raises (``strict``: the model) or is answered by the
    protocol's default and told to ``told`` (a live rack)."""
    return policies.named(s.retry_policy, s, strict, told)
