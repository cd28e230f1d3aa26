"""A rack: many virtual storage nodes in one process, each with its own renewal loop.

The loops here only move bytes and wait; what to do is decided by the pure cores: the
refusal state machine, the retry policy and the fixed-rate schedule. A rack reaches the
metadata service through its own link (in the local lab, a port of the fault proxy), and
watches that link with a cheap probe: when the link fails and comes back, every node of the
rack re-fetches its membership at once. That re-fetch is what turns a blip into a herd.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time

import aiohttp

from storage_node.client import RenewalClient
from storage_node.link import RESTORED, LinkWatch
from storage_node.metrics import ATTEMPTS, RENEWAL_OUTCOMES, RackMetrics
from storage_node.refusal import NodeState, Refusal
from storage_node.renewal import KEPT_BACK, OK, Attempt, Renewal, rack_policy
from storage_node.schedule import RenewalSchedule
from stormcore.fleet import grid_slot, node_id, startup_phases
from stormcore.settings import LabSettings, SettingsError, deployable_policy
from stormcore.window import Window
from stormcore.wire import DEADLINE_HEADER, REFUSAL_HEADER, REFUSALS, Membership, WireError

log = logging.getLogger(__name__)
Owned = frozenset[tuple[str, str | None, int]]
DEPLOYABLE = ("retry_policy", "allowance_s", "renewal_period_s")  # what a live deploy may change


class StaleDeploy(Exception):
    """A deploy push older than the one the rack runs (``generation``)."""

    def __init__(self, message: str, generation: int) -> None:
        super().__init__(message)
        self.generation = generation


DUE, LINK, RESCHEDULED = "due", "link", "rescheduled"  # why a node's wait ended
WAKE_SLICE = 50  # sleeping nodes woken per loop iteration when the link returns (the herd)


def uses_protocol(settings: LabSettings, rack: int) -> bool:
    """Whether a rack renews with the plain client (else the general one): ``renewal_client``."""
    return settings.renewal_client == "protocol" or (settings.renewal_client == "half" and rack % 2 == 0)


def _due(waiter: asyncio.Future[str]) -> None:
    if not waiter.done():
        waiter.set_result(DUE)


def next_slot(slot: float, now: float, period: float) -> float:
    """A node's next slot under a new renewal period: the one it had, when it comes within the new
    period; else as far into the new period as it was from now, modulo (its phase kept spread)."""
    return slot if slot - now <= period else now + (slot - now) % period


class Node:
    def __init__(self, rack: Rack, index: int, now: float, phase: float) -> None:
        s = rack.settings
        self.rack, self.id = rack, node_id(rack.index, index)
        self.rng = random.Random(f"{s.seed}/{self.id}")
        self.start_at = grid_slot(rack.schedule_origin, s.renewal_period_s, phase, now)  # racks sharing an origin interleave as one fleet
        self.schedule = RenewalSchedule(self.start_at, s.renewal_period_s, s.renewal_jitter, self.rng)
        self.renewal = Renewal(Refusal(now))
        self.owned: Owned = frozenset()
        self.version = 0
        self._answer = b""  # the last membership bytes accepted: the same bytes again are not decoded again
        self._request, self._request_for = b"", -1  # the request's bytes, built once per rack deploy

    @property
    def refusal(self) -> Refusal:
        return self.renewal.refusal

    def owns(self, table: str, index: str | None, partition: int) -> bool:
        return (table, index, partition) in self.owned

    async def run(self) -> None:
        await self.rack.wait_until(self.start_at, wake_on_link=False)
        while True:
            await self.renew()
            # until the next slot, or the link's return (renew now); a deploy that moved the slots wakes it to wait for the new one
            while await self.rack.wait_until(self.schedule.next_after(self.rack.now()), wake_on_deploy=True) == RESCHEDULED:
                continue

    async def renew(self) -> None:
        """Renew until it succeeds or the renewal core says to wait for the next slot."""
        rack = self.rack
        self.renewal.start()
        while True:
            started = rack.now()
            outcome = await self._attempt("retry" if self.renewal.misses else "first")
            decision = self.renewal.after(
                Attempt(started, rack.now(), outcome, len(self.owned)), rack.policy, self.rng, rack.settings.allowance_s
            )
            if decision.disqualified_now:
                rack.metrics.disqualifications.labels(rack.label).inc()
            if decision.retry_at is None:
                return
            await rack.wait_until(decision.retry_at)

    async def _attempt(self, attempt: str) -> str:
        """One renewal request; returns its outcome: ok, or why it missed."""
        rack = self.rack
        started = rack.now()
        if not rack.policy.admits(started):  # the rack's circuit breaker is open: nothing is sent
            rack.counted(attempt, KEPT_BACK).inc()
            return KEPT_BACK
        self.renewal.sending(rack.policy, started)
        reason = "error"
        try:
            if rack.client is not None:
                reason = await self._exchange(rack.client, started + rack.settings.allowance_s)
            else:
                reason = await self._session_exchange()
        except TimeoutError:
            reason = "timeout"
        except (aiohttp.ClientError, OSError):
            reason = "unreachable"
        except ValueError:
            reason = "error"
        elapsed = rack.now() - started
        rack.counted(attempt, reason).inc()
        rack.renewal_seconds.observe(elapsed)
        rack.renewal_latency.add(rack.now(), elapsed)
        return reason

    async def _exchange(self, client: RenewalClient, deadline: float) -> str:
        rack = self.rack
        if self._request_for != rack.deploys:
            self._request = client.request(f"/membership/{self.id}", rack.deadline)
            self._request_for = rack.deploys
        answer = await client.get(self._request, deadline)
        return self._outcome(answer.status, answer.refusal, answer.body)

    async def _session_exchange(self) -> str:
        """The same request through a general HTTP client (``renewal_client=session``)."""
        rack = self.rack
        async with rack.session.get(f"{rack.link_url}/membership/{self.id}", timeout=rack.renewal_timeout, headers=rack.deadline) as resp:
            body = await resp.read()
            return self._outcome(resp.status, resp.headers.get(REFUSAL_HEADER, ""), body)

    def _outcome(self, status: int, refusal: str, body: bytes) -> str:
        if status == 200:
            self._accept(body)
            return OK
        if status == 503:  # turned away at the door: the header says why
            return refusal if refusal in REFUSALS else "error"
        return "error"

    def _accept(self, body: bytes) -> None:
        if body == self._answer:  # unchanged since the last renewal: nothing to decode
            return
        membership = Membership.decode(body)
        if membership.node != self.id:
            raise WireError("membership for another node")
        if membership.version != self.version or not self.owned:
            self.owned = membership.owned()
            self.version = membership.version
        self._answer = body

    def status(self) -> dict:
        return {
            "id": self.id,
            "state": self.refusal.state.value,
            "reason": None if self.refusal.serving else self.refusal.reason,
            "entries": len(self.owned),
            "misses": self.renewal.misses,
            "disqualifications": self.refusal.disqualifications,
        }


class Rack:
    def __init__(
        self,
        settings: LabSettings,
        index: int,
        link_url: str,
        metrics: RackMetrics,
        schedule_origin: float | None = None,
    ) -> None:
        self.settings, self.index, self.link_url, self.metrics = settings, index, link_url.rstrip("/"), metrics
        self.label = str(index)
        self.policy = rack_policy(settings, strict=False, told=self._policy_broke)
        self.renewal_timeout = aiohttp.ClientTimeout(total=settings.allowance_s)
        self.deadline = {DEADLINE_HEADER: f"{settings.allowance_s:g}"}  # sent with every renewal, built once
        self.renewal_latency = Window(span_s=10.0)
        self.link_up = True
        self._loop = asyncio.get_running_loop()
        # the nodes asleep until a slot, woken early when the link returns or a deploy moves the slots
        self._sleepers: set[asyncio.Future[str]] = set()
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None))  # the link probe's
        self.client = RenewalClient(self.link_url, REFUSAL_HEADER) if uses_protocol(settings, index) else None
        self.deploys = 0  # bumped by every deploy: a node rebuilds its request's bytes once after one
        self._counters: dict[tuple[str, str], object] = {}  # (attempt, outcome) -> its counter, looked up once
        self.renewal_seconds = metrics.renewal_seconds.labels(self.label)
        now, phases = self.now(), startup_phases(settings)
        # where the nodes' slots are counted from: the lab's shared origin when the launcher gave
        # one (every rack's schedule then interleaves with the others', as in the reference
        # model), else now; on the wall clock for others to read, on the loop's for the nodes
        wall = time.time()
        self.schedule_origin_unix = schedule_origin if schedule_origin is not None else wall
        self.schedule_origin = now - (wall - self.schedule_origin_unix)
        nodes = (Node(self, i, now, phases[node_id(index, i)]) for i in range(settings.nodes_per_rack))
        self.nodes = {n.id: n for n in nodes}
        self._tasks: list[asyncio.Task] = []
        self.startup = self.deployed()  # what the rack runs when no deploy holds a setting
        self.held: dict[str, object] = {}
        self.generation = 0

    def _policy_broke(self, call: str) -> None:
        """A call into a user's retry policy raised (answered by the protocol's default): counted."""
        self.metrics.policy_broken.labels(self.label, call).inc()

    def now(self) -> float:
        return self._loop.time()

    def deployed(self) -> dict[str, object]:
        """The deployable settings in force, in profile time (as people give them)."""
        s = self.settings
        return {
            "retry_policy": s.retry_policy,
            "allowance_s": s.pace.profile(s.allowance_s),
            "renewal_period_s": s.pace.profile(s.renewal_period_s),
        }

    def hold(self, held: dict[str, object], generation: int) -> dict[str, object]:
        """Run the start-up settings with ``held`` over them: what the live deploy leases hold on
        this rack now, sent whole by the supervisor with a generation. A generation older than
        the one the rack runs is refused (StaleDeploy: a push that landed late must not undo a
        newer one). Raises SettingsError (nothing changed) for a value out of range."""
        if generation < self.generation:
            raise StaleDeploy(f"generation {generation} is older than the {self.generation} this rack runs", self.generation)
        unknown = sorted(set(held) - set(DEPLOYABLE))
        if unknown:
            raise SettingsError(f"a deploy holds {', '.join(DEPLOYABLE)}, not {', '.join(unknown)}")
        policy = held.get("retry_policy")
        if isinstance(policy, str):
            deployable_policy(policy)  # no code from the wire
        self.deploy(self.startup | held)
        self.held, self.generation = dict(held), generation
        return dict(self.held)

    def deploy(self, changes: dict[str, object]) -> dict[str, object]:
        """Set deployable settings on every node of the rack (profile-time values, as `stormlab ops
        deploy` gives them): each node's next decision uses the new retry policy and allowance; a
        new renewal period starts from each node's next slot, its phase kept. Returns what was in
        force before. Raises SettingsError (nothing changed) for a value out of range."""
        before = self.deployed()
        s = self.settings
        new = s.deployed(changes)
        if new == s:
            return before
        self.settings, self.policy = new, rack_policy(new, strict=False, told=self._policy_broke)
        self.renewal_timeout = aiohttp.ClientTimeout(total=new.allowance_s)
        self.deadline = {DEADLINE_HEADER: f"{new.allowance_s:g}"}
        self.deploys += 1
        self.metrics.allowance.labels(self.label).set(new.allowance_s)
        if not math.isclose(new.renewal_period_s, s.renewal_period_s):
            now = self.now()
            for node in self.nodes.values():
                node.schedule = RenewalSchedule(
                    next_slot(node.schedule.next_after(now), now, new.renewal_period_s), new.renewal_period_s, new.renewal_jitter, node.rng
                )
            self._wake(RESCHEDULED)  # a node asleep until a slot of the old period waits for its new one
        log.info("rack %s deployed %s (was %s)", self.index, changes, before)
        return before

    def counted(self, attempt: str, outcome: str):
        """The renewals counter of this rack for ``attempt`` and ``outcome``."""
        counter = self._counters.get((attempt, outcome))
        if counter is None:
            counter = self._counters[attempt, outcome] = self.metrics.renewals.labels(self.label, attempt, outcome)
        return counter

    def attempts_total(self) -> dict[str, float]:
        """Renewal attempts so far, first attempts and retries (from the rack's own counter)."""
        registry = self.metrics.registry
        return {
            attempt: sum(
                registry.get_sample_value("stormlab_renewals_total", {"rack": self.label, "attempt": attempt, "outcome": o}) or 0.0
                for o in RENEWAL_OUTCOMES
            )
            for attempt in ATTEMPTS
        }

    async def wait_until(self, at: float, wake_on_link: bool = True, wake_on_deploy: bool = False) -> str:
        """Sleep until ``at`` (DUE), or until the link comes back after a disruption (LINK), or, with
        ``wake_on_deploy``, until a deploy moves the renewal slots (RESCHEDULED)."""
        while True:
            delay = at - self.now()
            if delay <= 0:
                return DUE
            if not wake_on_link and not wake_on_deploy:
                await asyncio.sleep(delay)
                return DUE
            waiter = self._loop.create_future()  # a plain timer and a future: no task per sleep
            timer = self._loop.call_at(at, _due, waiter)
            self._sleepers.add(waiter)
            try:
                reason = await waiter
            finally:
                timer.cancel()
                self._sleepers.discard(waiter)
            if reason == DUE or (reason == LINK and wake_on_link) or (reason == RESCHEDULED and wake_on_deploy):
                return reason  # otherwise woken for what this wait does not care about: on with it

    def _wake(self, reason: str) -> None:
        """Wake every sleeping node, ``WAKE_SLICE`` a loop iteration: the nodes' requests go out one
        after another either way (one loop), and between slices the loop runs what else is due (a
        timeout, an answer, a timer) instead of after the whole herd."""
        sleepers, self._sleepers = list(self._sleepers), set()
        self._wake_slice(sleepers, 0, reason)

    def _wake_slice(self, sleepers: list[asyncio.Future[str]], start: int, reason: str) -> None:
        for waiter in sleepers[start : start + WAKE_SLICE]:
            if not waiter.done():
                waiter.set_result(reason)
        if start + WAKE_SLICE < len(sleepers):
            self._loop.call_soon(self._wake_slice, sleepers, start + WAKE_SLICE, reason)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(n.run(), name=n.id) for n in self.nodes.values()]
        self._tasks.append(asyncio.create_task(self._watch_link(), name="link-probe"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.client is not None:
            self.client.close()
        await self.session.close()

    async def _watch_link(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.settings.probe_timeout_s)
        watch = LinkWatch(self.settings.probe_failures)
        while True:
            started = self.now()
            try:
                async with self.session.get(f"{self.link_url}/healthz", timeout=timeout) as resp:
                    await resp.read()
                    ok = resp.status == 200
            except (TimeoutError, aiohttp.ClientError, OSError):
                ok = False
            change = watch.probe(ok)
            if change is not None:
                self._set_link(change == RESTORED)
            await asyncio.sleep(max(0.0, started + self.settings.probe_interval_s - self.now()))

    def _set_link(self, up: bool) -> None:
        self.link_up = up
        self.metrics.link_up.labels(self.label).set(1 if up else 0)
        log.info("rack %s link %s", self.index, "restored: every node renews now" if up else "down")
        if up:
            self.metrics.link_restores.labels(self.label).inc()
            self._wake(LINK)

    def count(self) -> dict[str, int]:
        counts = {state.value: 0 for state in NodeState}
        for node in self.nodes.values():
            counts[node.refusal.state.value] += 1
        return counts

    def sync_metrics(self) -> None:
        for state, n in self.count().items():
            self.metrics.nodes.labels(self.label, state).set(n)
