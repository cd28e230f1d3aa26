"""The lease runner in virtual time: every applied fault is reverted exactly once, whatever
fails around it (a revert that raises, an event log that cannot be written, a halt midway)."""

from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from prometheus_client import CollectorRegistry

from chaos.control import LeaseRunner, Plan, Recorder
from tests.virtual_loop import VirtualLoop


def runner_with(event_log=None):
    recorder = Recorder(CollectorRegistry(), ("blip",), "test")
    recorder.event_log = event_log
    return LeaseRunner(recorder, max_duration_s=600)


def test_an_event_log_that_cannot_be_written_stops_no_revert(tmp_path):
    loop = VirtualLoop()
    runner = runner_with(tmp_path / "gone" / "events.jsonl")  # its directory does not exist
    reverted = []

    async def apply(name, seconds):
        return await runner.apply("blip", seconds, Plan(name, lambda: None, lambda: reverted.append(name), {}))

    try:
        for name, seconds in (("rack-0", 5), ("rack-1", 5), ("rack-2", 50)):
            loop.run_until_complete(apply(name, seconds))
        loop.advance(6)
        assert reverted == ["rack-0", "rack-1"] and len(runner.book) == 1
        assert runner._timer is not None  # re-armed for the third
        loop.advance(50)
        assert reverted == ["rack-0", "rack-1", "rack-2"] and len(runner.book) == 0
        assert runner.recorder.failures.labels("event_log")._value.get() == 6  # 3 applied + 3 reverted, none written
    finally:
        loop.close()


def test_a_halt_reverts_every_lease_even_when_one_revert_raises():
    loop = VirtualLoop()
    runner = runner_with()
    reverted = []

    def boom():
        reverted.append("bad")
        raise RuntimeError("revert failed")

    try:
        for name, revert in (("a", lambda: reverted.append("a")), ("bad", boom), ("c", lambda: reverted.append("c"))):
            loop.run_until_complete(runner.apply("blip", 30, Plan(name, lambda: None, revert, {})))
        assert runner.halt() == 3
        assert reverted == ["a", "bad", "c"] and len(runner.book) == 0 and runner._timer is None
        assert runner.recorder.failures.labels("revert")._value.get() == 1
    finally:
        loop.close()


class LeaseRunnerMachine(RuleBasedStateMachine):
    """Apply, overlap, expire, halt, with reverts and the event log failing at random."""

    def __init__(self):
        super().__init__()
        self.loop = VirtualLoop()
        self.runner = runner_with()
        self.reverts: dict[str, int] = {}
        self.applied: list[str] = []
        self.failing_revert: set[str] = set()
        self.bad_log = None

    def teardown(self):
        self.runner.halt()
        assert all(self.reverts[name] == 1 for name in self.applied), self.reverts
        self.loop.close()

    @rule(seconds=st.floats(min_value=0.01, max_value=60), revert_raises=st.booleans())
    def apply(self, seconds, revert_raises):
        name = f"lease-{len(self.applied)}"
        self.reverts[name] = 0

        def revert():
            self.reverts[name] += 1
            if revert_raises:
                raise RuntimeError("revert failed")

        self.loop.run_until_complete(self.runner.apply("blip", seconds, Plan(name, lambda: None, revert, {})))
        self.applied.append(name)

    @rule(seconds=st.floats(min_value=0, max_value=30))
    def time_passes(self, seconds):
        self.loop.advance(seconds)

    @precondition(lambda self: self.applied)
    @rule()
    def halt(self):
        self.runner.halt()

    @rule(broken=st.booleans())
    def event_log(self, broken):
        self.runner.recorder.event_log = Path("/nonexistent/stormlab/events.jsonl") if broken else None

    @invariant()
    def each_lease_is_held_or_reverted_exactly_once(self):
        held = {lease.target for lease in self.runner.book._leases.values()}
        for name in self.applied:
            assert self.reverts[name] == (0 if name in held else 1), (name, self.reverts[name], held)
        if held:
            assert self.runner._timer is not None  # something will end them

    @invariant()
    def nothing_due_is_still_held(self):
        assert all(lease.ends_at > self.loop.now for lease in self.runner.book._leases.values())


LeaseRunnerMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
TestLeaseRunner = LeaseRunnerMachine.TestCase
