"""Live deploys as held values: the newest live deploy that has reached a rack decides each
setting, the start-up value returns once none holds, whatever order the leases end in; and the
reconciler brings every rack there through racks that are down, frozen, slow or restarted."""

import asyncio

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from stormlab.engine.deploys import DeployBook, Reconciler, Stale, steps

RACKS = ("rack-00", "rack-01", "rack-02", "rack-03")
STARTUP = {"retry_policy": "immediate", "allowance_s": 1.0, "renewal_period_s": 10.0}


def test_a_staged_rollout_reaches_the_racks_in_order_in_even_steps():
    assert steps(RACKS, 2, 100.0, 5.0) == {"rack-00": 100.0, "rack-01": 100.0, "rack-02": 105.0, "rack-03": 105.0}
    assert steps(RACKS, 1, 0.0, 5.0) == dict.fromkeys(RACKS, 0.0)
    assert steps(RACKS, 99, 0.0, 1.0) == {"rack-00": 0.0, "rack-01": 1.0, "rack-02": 2.0, "rack-03": 3.0}  # no more steps than racks


def test_overlapping_deploys_ended_oldest_first_leave_nothing_behind():
    """The bug the fuzzer found: two deploys each saved "before" as what ran then; the older one
    ended first and the newer one's end put the older back for good."""
    book = DeployBook(RACKS)
    old = book.add({"allowance_s": 2.0}, 1, 0.0, 0.0)
    new = book.add({"allowance_s": 5.0, "retry_policy": "full-jitter"}, 1, 1.0, 0.0)
    assert book.held("rack-00", 2.0) == {"allowance_s": 5.0, "retry_policy": "full-jitter"}
    book.end(old)
    assert book.held("rack-00", 3.0) == {"allowance_s": 5.0, "retry_policy": "full-jitter"}
    book.end(new)
    assert book.held("rack-00", 4.0) == {}  # the start-up settings


def test_the_newest_deploy_decides_each_setting_the_older_keeps_the_rest():
    book = DeployBook(RACKS)
    old = book.add({"allowance_s": 2.0, "renewal_period_s": 20.0}, 1, 0.0, 0.0)
    new = book.add({"allowance_s": 5.0}, 2, 1.0, 10.0)  # reaches racks 2 and 3 at t=11
    assert book.held("rack-00", 2.0) == {"allowance_s": 5.0, "renewal_period_s": 20.0}
    assert book.held("rack-03", 2.0) == {"allowance_s": 2.0, "renewal_period_s": 20.0}  # not reached yet
    assert book.next_step(2.0) == 11.0 and book.reached(new, 2.0) == ["rack-00", "rack-01"]
    assert book.held("rack-03", 11.0) == {"allowance_s": 5.0, "renewal_period_s": 20.0}
    book.end(new)
    assert book.held("rack-03", 12.0) == {"allowance_s": 2.0, "renewal_period_s": 20.0}
    book.end(old)
    assert [book.held(r, 12.0) for r in RACKS] == [{}] * 4 and book.next_step(12.0) is None


class FakeRack:
    """A rack process as the reconciler sees it: it takes a whole push of held values unless it
    runs a newer generation (the rule storage_node.rack.Rack.hold keeps; tested on the real rack
    in test_rack_deploy.py)."""

    def __init__(self) -> None:
        self.held: dict = {}
        self.generation = 0

    def take(self, held: dict, generation: int) -> dict:
        if generation < self.generation:
            raise Stale(f"{generation} < {self.generation}", self.generation)
        self.held, self.generation = dict(held), generation
        return dict(held)

    def runs(self) -> dict:
        return STARTUP | self.held


class Deploys(RuleBasedStateMachine):
    """Deploys, overlaps, leases ending in any order, halts; racks down, frozen, slow (a push
    that timed out lands later, in any order), restarted; the clock moving through staged steps.
    Whenever every rack answers again and the reconciler has had its rounds, every rack runs
    exactly what the live leases say, and its start-up settings once none holds."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.now = 0.0
        self.racks = {r: FakeRack() for r in RACKS}
        self.mode = dict.fromkeys(RACKS, "up")  # up, down, frozen, slow
        self.late: list[tuple[str, FakeRack, dict, int]] = []  # pushes that timed out and are still on their way
        self.leases: list[tuple[int, dict, dict[str, float]]] = []  # the model: seq, changes, when each rack is reached
        self.book = DeployBook(RACKS)
        self.rec = Reconciler(self.book, self.push, lambda r: self.mode[r] != "frozen", lambda: self.now)

    async def push(self, rack: str, held: dict, generation: int) -> dict:
        if self.mode[rack] == "down":
            raise ConnectionRefusedError("connection refused")
        if self.mode[rack] == "slow":
            self.late.append((rack, self.racks[rack], held, generation))
            raise TimeoutError("no answer within the push timeout")
        return self.racks[rack].take(held, generation)

    def rounds(self, n: int = 3) -> None:
        async def go() -> None:
            for _ in range(n):
                self.rec.round()
                for _ in range(3):
                    await asyncio.sleep(0)

        self.loop.run_until_complete(go())

    def expected(self, rack: str) -> dict:
        out = dict(STARTUP)
        for _, changes, reaches in sorted(self.leases, key=lambda lease: lease[0]):
            if reaches[rack] <= self.now:
                out.update(changes)
        return out

    @initialize()
    def start(self) -> None:
        self.rounds(1)

    @rule(
        changes=st.fixed_dictionaries(
            {},
            optional={
                "allowance_s": st.sampled_from([0.5, 2.0, 5.0]),
                "renewal_period_s": st.sampled_from([5.0, 20.0]),
                "retry_policy": st.sampled_from(["full-jitter", "immediate+budget"]),
            },
        ).filter(bool),
        staged=st.integers(1, 4),
        every_s=st.sampled_from([0.0, 1.0, 5.0]),
    )
    def deploy(self, changes, staged, every_s):
        seq = self.book.add(changes, staged, self.now, every_s)
        self.leases.append((seq, changes, steps(RACKS, staged, self.now, every_s)))
        self.rounds(1)

    @precondition(lambda self: self.leases)
    @rule(which=st.integers(0, 100))
    def a_lease_ends(self, which):  # expired, or ended by `chaos halt`
        seq, _, _ = self.leases.pop(which % len(self.leases))
        self.book.end(seq)
        self.rounds(1)

    @rule()
    def halt(self):
        for seq, _, _ in self.leases:
            self.book.end(seq)
        self.leases.clear()
        self.rounds(1)

    @rule(dt=st.sampled_from([0.5, 1.0, 5.0]))
    def time_passes(self, dt):
        self.now += dt
        self.rounds(1)

    @rule(rack=st.sampled_from(RACKS), mode=st.sampled_from(["up", "down", "frozen", "slow"]))
    def rack_becomes(self, rack, mode):
        self.mode[rack] = mode
        self.rounds(1)

    @rule(rack=st.sampled_from(RACKS))
    def rack_restarts(self, rack):
        """Killed and started again by the supervisor: a new process, handed what holds at its start
        (a push on its way to the old process dies with it)."""
        self.racks[rack] = fresh = FakeRack()
        generation, held = self.rec.started(rack)
        fresh.take(held, generation)
        self.mode[rack] = "up"
        self.rounds(1)

    @precondition(lambda self: self.late)
    @rule(which=st.integers(0, 100))
    def a_late_push_lands(self, which):
        rack, process, held, generation = self.late.pop(which % len(self.late))
        try:
            process.take(held, generation)  # the rack acts on it; nobody hears the answer
        except Stale:
            pass

    @rule(rack=st.sampled_from(RACKS), generation=st.sampled_from([10**6, 2**53 - 1]))
    def a_push_from_elsewhere(self, rack, generation):
        """A direct POST to the rack with the lab token (the fuzzer does this): a generation far
        above the supervisor's, and values no lease holds."""
        try:
            self.racks[rack].take({"allowance_s": 9.0}, generation)
        except Stale:
            pass

    @rule()
    def every_rack_answers_again(self):
        for rack in RACKS:
            self.mode[rack] = "up"
        self.now += self.rec.verify_s  # long enough for a rack changed behind its back to be pushed again
        self.rounds(4)
        for rack in RACKS:
            assert self.racks[rack].runs() == self.expected(rack), rack
        assert self.rec.behind() == []

    def teardown(self) -> None:
        try:
            for rack in RACKS:
                self.mode[rack] = "up"
            self.late.clear()
            self.now += self.rec.verify_s
            self.rounds(4)
            for rack in RACKS:
                assert self.racks[rack].runs() == self.expected(rack), rack
            self.loop.run_until_complete(self.rec.stop())
        finally:
            self.loop.close()


Deploys.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_deploys_state_machine = Deploys.TestCase


@pytest.mark.parametrize("order", ["oldest first", "newest first"])
def test_the_end_order_does_not_matter(order):
    book = DeployBook(RACKS)
    a = book.add({"allowance_s": 2.0}, 1, 0.0, 0.0)
    b = book.add({"allowance_s": 5.0}, 1, 0.0, 0.0)
    for seq in (a, b) if order == "oldest first" else (b, a):
        book.end(seq)
    assert book.held("rack-02", 1.0) == {}
