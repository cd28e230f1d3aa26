"""Runs a scenario's timeline against a lab, in its own time: real or virtual.

Every wait goes through one tick that also takes a sample, so the journal holds a metric
series at a steady rate and a unit test can run a whole game day in virtual time against a
fake lab. Rollbacks run whatever happens (a failed step, an error, Ctrl-C). While the
facilitator holds the game (``hold``) that tick waits, and so does everything behind it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from stormcore.settings import Pace
from stormlab.engine.reading import Journaled, Reading
from stormlab.scenarios.autopilot import Autopilot, Rules
from stormlab.scenarios.holds import Holds
from stormlab.scenarios.replay import Script
from stormlab.scenarios.scenario import Check, Inject, Planned, Scenario, Step, live_inject


class Lab(Protocol):
    async def sample(self) -> Reading: ...

    async def fault(self, fault: str, args: dict, speed: float) -> dict[str, Any]: ...

    async def action(self, action: str, args: dict, speed: float) -> dict[str, Any]: ...

    async def rollback(self) -> None: ...

    def player_actions(self) -> list[dict[str, Any]]: ...


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


def probe(sample: Reading, check: Check) -> float | None:
    """The value a check looks at, from one sample of the lab."""
    return sample.probe(check.probe, check.table, check.expr)


class Runner:
    def __init__(
        self,
        scenario: Scenario,
        plan: list[Planned],
        lab: Lab,
        clock: Clock,
        *,
        autopilot: bool,
        speed: float = 1.0,
        tick_s: float = 1.0,
        echo: Callable[[str], None] = print,
        observers: tuple[Callable[[Reading], None], ...] = (),
        progress: Callable[[dict[str, Any]], None] | None = None,
        progress_every_s: float = 5.0,
        on_inject: Callable[[dict[str, Any]], None] = lambda inject: None,
        script: Script | None = None,
    ) -> None:
        self.scenario, self.plan, self.lab, self.clock = scenario, plan, lab, clock
        self.autopilot, self.speed, self.echo = autopilot, speed, echo
        self.pace = Pace(speed)
        self.tick_s = self.pace.wall(tick_s)
        self.observers, self.progress, self.progress_every_s = observers, progress, progress_every_s
        self.t0 = 0.0
        self.samples: list[Reading] = []
        self.journaled: list[Journaled] = []  # the same samples as the journal keeps them, each made once
        self.steps: list[dict[str, Any]] = []
        self.rollbacks: list[dict[str, Any]] = []
        self.waiting: dict[str, Any] = {}  # what the run waits for now: step, condition, probe, deadline
        self._last_progress = float("-inf")
        self._stop_since: dict[int, float] = {}
        self._pilot: tuple[Autopilot, Step, list[dict[str, Any]]] | None = None  # the rules' autopilot in an operator phase
        self._watches: list[Watch] = []  # what an operator phase's moves set off, watched on every sample
        self.on_inject = on_inject  # hears each inject as it fires (the desk delivers it)
        self.script = script  # a replay's recorded moves, made at their times
        self.injected: list[dict[str, Any]] = []
        self._due = [Due(i, self.pace) for i in scenario.injects]
        self.holds = Holds()
        self.started = False  # the timeline has begun (t0 is its start)

    def elapsed(self) -> float:
        """The game's clock: seconds since the start, less the time it was held."""
        return self.holds.game(self.clock.now() - self.t0)

    def on_game_clock(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Entries timed on the wall clock since the start (``t``: pages, moves) on the game's clock."""
        return [e | {"t": round(self.holds.game(e["t"]), 3)} for e in entries]

    def hold(self, on: bool) -> dict[str, Any]:
        """The facilitator holds the game (``on``) or lets it go on: whether that changed anything,
        whether it is held now, and the game's time."""
        if not self.started:
            return {"changed": False, "held": False, "t": 0.0, "started": False}
        wall = self.clock.now() - self.t0
        changed = self.holds.begin(wall) if on else self.holds.end(wall)
        if changed and on:
            self.echo(f"[{self.elapsed():7.1f}s] HELD by the facilitator: the game's clock stands still (the lab runs on)")
        elif changed:
            self.echo(f"[{self.elapsed():7.1f}s] the game goes on after {self.holds.record(wall)[-1]['held_s']:g}s held")
        return {"changed": changed, "held": self.holds.on, "t": round(self.elapsed(), 3), "started": True}

    async def tick(self) -> Reading:
        await self.clock.sleep(self.tick_s)
        while self.holds.on:  # every wait, deadline and inject of the game waits with it
            await self.clock.sleep(self.tick_s)
        sample = await self.take_sample()
        self.tell_progress(sample)
        await self.pilot_moves(sample)
        if self.script is not None:
            await self.script.due(sample.t)
        return sample

    async def pilot_moves(self, sample: Reading) -> None:
        """The rules' autopilot sees this reading and makes the move it calls for, if any."""
        if self._pilot is None:
            return
        pilot, phase, made = self._pilot
        move = pilot.decide(sample, self.pace.profile(self.elapsed()))
        if move is None:
            return
        step = Step(move.name, "action", phase.line, action=move.action, args=move.args, expect_failure=move.expect_failure)
        record = await self.do(step, step.args)
        made.append(record)
        pilot.told(move, bool(record.get("ok")), self.pace.profile(self.elapsed()))
        self.echo(f"[{record['at_s']:7.1f}s]   {'ok' if record['passed'] else 'FAILED':6} {move.name}: {record.get('detail', '')}")

    async def take_sample(self) -> Reading:
        sample = (await self.lab.sample()).but(t=round(self.elapsed(), 3))
        self.samples.append(sample)
        self.journaled.append(Journaled(sample))
        for observe in self.observers:
            observe(sample)
        for watch in self._watches:
            watch.see(sample)
        self.fire_injects(sample)
        self.check_stop(sample)
        return sample

    def fire_injects(self, sample: Reading) -> None:
        """Each inject whose time has come, or whose condition has held for its ``for``, fires once."""
        for due in [d for d in self._due if d.now(sample)]:
            self._due.remove(due)
            self.fire(due.inject, sample.t, due.at, self.pace.wall(due.inject.within_s))

    def fire(self, i: Inject, t: float, at: float | None, within: float) -> dict[str, Any]:
        """Send an inject now (``t``: the run's time; ``within``: wall seconds), recorded for its score."""
        record = {
            "name": i.name,
            "to": i.to,
            "message": i.message,
            "answer": i.answer,
            "names_tables": i.names_tables,
            "at_s": at,
            "fired_s": round(t, 3),
            "within_s": within,
            "due_s": round(t + within, 3),
        }
        self.injected.append(record)
        self.on_inject(record)
        return record

    def inject_now(self, body: dict[str, Any]) -> dict[str, Any]:
        """An inject typed live (the facilitator's console, through the desk): sent at once, scored
        as the scenario's are; ScenarioError if it is not one."""
        taken = {r["name"] for r in self.injected} | {i.name for i in self.scenario.injects}
        number = next(n for n in range(1, len(taken) + 2) if f"live-{n}" not in taken)
        live = live_inject(body, f"live-{number}")
        return self.fire(live, self.elapsed(), None, live.within_s)

    def check_stop(self, sample: Reading) -> None:
        """A stop condition that has held for its ``for`` ends the run (the rollbacks run)."""
        for i, check in enumerate(self.scenario.stop_when):
            value = probe(sample, check)
            if not check.holds(value):
                self._stop_since.pop(i, None)
                continue
            since = self._stop_since.setdefault(i, sample.t)
            if sample.t - since >= self.pace.wall(check.for_s):
                raise Aborted(f"stop condition {check.describe()} held (value {_fmt(value)})")

    def tell_progress(self, sample: Reading) -> None:
        """Every few seconds: which step, what it waits for, the value now and the time left."""
        if self.progress is None or not self.waiting or sample.t - self._last_progress < self.pace.wall(self.progress_every_s):
            return
        self._last_progress = sample.t
        w = self.waiting
        value = probe(sample, w["check"]) if w.get("check") else None
        self.progress(
            {
                "t": sample.t,
                "step": w["step"],
                "waiting_for": w["for"],
                "probe": w["check"].probe if w.get("check") else None,
                "value": value,
                "left_s": None if w.get("until") is None else round(max(0.0, w["until"] - sample.t), 1),
                "customer_error_ratio": sample.customer_error_ratio,
                "launch_error_ratio": sample.launch_error_ratio,  # the lease manager's lab (aws-2025-10)
            }
        )

    async def run(self) -> dict[str, Any]:
        self.t0, self.started = self.clock.now(), True
        outcome = "interrupted"
        try:
            await self.take_sample()
            steady = [await self.steady(c) for c in self.scenario.steady_state]
            self.steps.extend(steady)
            if not all(r["passed"] for r in steady):
                outcome = "failed"
                return self.journal(outcome)
            for planned in self.plan:
                await self.step(planned)
            after = [await self.steady_after(c) for c in self.scenario.steady_state]
            self.steps.extend(after)
            outcome = (
                "passed"
                if all(s["passed"] for s in self.steps)
                else "deviated"
                if all(s["passed"] for s in self.steps if s["kind"] != "steady-after")
                else "failed"
            )
            return self.journal(outcome)
        except Aborted as stop:
            self.steps.append({"name": str(stop), "kind": "stop", "at_s": round(self.elapsed(), 3), "passed": False, "detail": str(stop)})
            self.echo(f"[{self.elapsed():7.1f}s] ABORTED {stop}: rolling back")
            outcome = "aborted"
            return self.journal(outcome)
        finally:
            # Ctrl-C or SIGTERM cancels this task once: the rollbacks below still run to the end.
            self.waiting = {}
            await self.roll_back()

    async def roll_back(self) -> None:
        for step in self.scenario.rollback:
            self.rollbacks.append(await self.do(step, step.args))
        await self.lab.rollback()
        self.rollbacks.append({"name": "halt every fault", "kind": "rollback", "at_s": round(self.elapsed(), 3), "passed": True})

    async def steady(self, check: Check) -> dict[str, Any]:
        value = probe(self.samples[-1], check)
        return {
            "name": f"steady state: {check.describe()}",
            "kind": "steady",
            "at_s": round(self.elapsed(), 3),
            "passed": check.holds(value),
            "value": value,
        }

    async def steady_after(self, check: Check) -> dict[str, Any]:
        """The steady state again once the method has run (chaostoolkit's second look), allowed
        ``steady_state_within`` to come back."""
        within = self.pace.wall(self.scenario.steady_state_within_s)
        result = await self.expect(check, within_s=within, step="steady state after the run")
        record = {"name": f"steady state after the run: {check.describe()}", "kind": "steady-after", "at_s": round(self.elapsed(), 3)}
        self.echo(f"[{self.elapsed():7.1f}s] {'ok' if result['passed'] else 'DEVIATED':6} {record['name']}: {result['detail']}")
        return record | result

    async def step(self, planned: Planned) -> dict[str, Any]:
        step = planned.step
        if planned.at_s is not None:
            self.waiting = {"step": step.name, "for": f"its time ({planned.at_s:g}s)", "until": planned.at_s}
            while self.elapsed() < planned.at_s:
                await self.tick()
        elif step.after_s:
            await self.wait(self.pace.wall(step.after_s), step.name)
        record = await self.do(step, planned.args)
        self.steps.append(record)
        mark = "ok" if record["passed"] else "FAILED"
        self.echo(f"[{record['ended_s']:7.1f}s] {mark:6} {step.name}: {record.get('detail', '')}")
        return record

    async def wait(self, seconds: float, step: str = "") -> None:
        end = self.elapsed() + seconds
        self.waiting = {"step": step, "for": f"{seconds:g}s to pass", "until": end}
        while self.elapsed() < end:
            await self.tick()

    async def do(self, step: Step, args: dict[str, Any]) -> dict[str, Any]:
        record: dict[str, Any] = {"name": step.name, "kind": step.kind, "line": step.line, "at_s": round(self.elapsed(), 3)}
        if step.kind in ("fault", "action"):
            record |= await self.move(step, args)
        elif step.kind == "wait":
            await self.wait(self.pace.wall(step.wait_s), step.name)
            record |= {"passed": True, "detail": f"waited {self.pace.wall(step.wait_s):g}s"}
        elif step.kind == "expect" and step.check:
            record |= await self.expect(step.check, step=step.name)
        else:
            record |= await self.operator(step)
        record["ended_s"] = round(self.elapsed(), 3)
        return record

    async def move(self, step: Step, args: dict[str, Any]) -> dict[str, Any]:
        """A fault or an operator's action, and whether it went as the step expected."""
        if step.fault:
            result = await self.lab.fault(step.fault, args, self.speed)
            own = {"fault": step.fault, "duration_s": result.get("duration_s"), "passed": result["ok"], "lease": result.get("lease")}
        else:
            assert step.action is not None, "the reader gives every action step its action"
            result = await self.lab.action(step.action, args, self.speed)
            passed = result["ok"] != step.expect_failure
            own = {"action": step.action, "ok": result["ok"], "expect_failure": step.expect_failure, "passed": passed}
        return {"args": args, "detail": result["message"], **own}

    async def expect(self, check: Check, within_s: float | None = None, step: str = "") -> dict[str, Any]:
        """Wait until the check holds (for ``for`` seconds in a row), at most ``within``."""
        start = self.elapsed()
        deadline = start + (self.pace.wall(check.within_s) if within_s is None else within_s)
        self.waiting = {"step": step, "for": check.describe(), "check": check, "until": deadline}
        held = Hold(check, self.pace.wall(check.for_s))
        while True:
            value = probe(self.samples[-1], check)
            if held.see(value, self.elapsed()):
                assert held.since is not None, "a check met has held since a moment"
                met = round(held.since - start, 3)
                return {
                    "passed": True,
                    "expect": check.describe(),
                    "met_after_s": met,
                    "value": value,
                    "mean": held.mean(),
                    "detail": f"{_fmt(value)} after {met:g}s",
                }
            if self.elapsed() >= deadline:
                return {
                    "passed": False,
                    "expect": check.describe(),
                    "value": value,
                    "detail": f"not met within {deadline - start:g}s (last value {_fmt(value)})",
                }
            await self.tick()

    async def operator(self, step: Step) -> dict[str, Any]:
        assert step.check is not None, "the reader gives every operator step its recovery check"
        start = self.elapsed()
        limit = self.pace.wall(step.time_limit_s)
        self._watches = [Watch(w, start, self.pace) for w in step.watch]
        try:
            result, auto = await self.respond(step, start, limit)
        finally:
            self._pilot, watches, self._watches = None, self._watches, []
        watched = [w.record() for w in watches]
        for w in watched:
            at, mark = w["at_s"] + (w.get("met_after_s") or 0), "ok" if w["passed"] else "MISSED"
            self.echo(f"[{at:7.1f}s]   {mark:6} {w['name']}: {w['detail']}")
        done = sorted([*auto, *watched], key=lambda r: r["at_s"] + (r.get("met_after_s") or 0))
        # what the moves set off is the autopilot's to meet; players who recover another way are not failed for it
        passed = result["passed"] and all(a["passed"] for a in done if self.autopilot or not a.get("watched"))
        return result | {"autopilot": done, "passed": passed, "started_s": round(start, 3)}

    async def respond(self, step: Step, start: float, limit: float) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The players' moves, the autopilot's steps, or its rules' moves; then the recovery,
        measured: when the recovered condition began to hold."""
        assert step.check is not None, "the reader gives every operator step its recovery check"
        auto: list[dict[str, Any]] = []
        if self.autopilot and step.rules is not None:
            self.echo(f"[{start:7.1f}s] autopilot plays the 2015 runbook by its rules (it moves when what it sees calls for it)")
            self._pilot = (Autopilot(Rules.from_args(step.rules)), step, auto)
        elif self.autopilot:
            self.echo(f"[{start:7.1f}s] autopilot plays the runbook's steps")
            for sub in step.autopilot:
                record = await self.do(sub, sub.args)
                auto.append(record)
                self.echo(f"[{record['at_s']:7.1f}s]   {'ok' if record['passed'] else 'FAILED':6} {sub.name}: {record.get('detail', '')}")
        else:
            self.echo(
                f"[{start:7.1f}s] YOUR TURN: stop the storm with `stormlab ops …` in another terminal "
                f"(recovered when {step.check.describe()}; time limit {limit:g}s)"
            )
            auto = []
        watching = self.elapsed()
        result = await self.expect(step.check, within_s=max(0.0, start + limit - watching), step=step.name)
        # recovered when the condition began to hold (as for any expectation), not when its hold ended
        result["recovered_after_s"] = round(watching + result["met_after_s"] - start, 3) if result["passed"] else None
        return result, auto

    def journal(self, outcome: str) -> dict[str, Any]:
        return {
            "title": self.scenario.title,
            "outcome": outcome,
            "speed": self.speed,
            "autopilot": self.autopilot,
            "schedule": [
                {"name": p.step.name, "kind": p.step.kind, "at_s": p.at_s, "fault": p.step.fault, "action": p.step.action, "args": p.args}
                for p in self.plan
            ],
            "steps": self.steps,
            "rollbacks": self.rollbacks,
            "samples": self.journaled,
            "player_actions": self.on_game_clock(self.lab.player_actions()),
            "injects": self.injected,
            "holds": self.holds.record(self.clock.now() - self.t0) if self.started else [],
        }


class Due:
    """An inject waiting for its moment: its time of the run (wall seconds), or its condition held
    for its ``for``."""

    def __init__(self, inject: Inject, pace: Pace) -> None:
        self.inject = inject
        self.at = None if inject.at_s is None else pace.wall(inject.at_s)
        self.held = None if inject.when is None else Hold(inject.when, pace.wall(inject.when.for_s))

    def now(self, sample: Reading) -> bool:
        if self.held is None:
            assert self.at is not None, "the reader gives every inject a time or a condition"
            return sample.t >= self.at
        return self.held.see(probe(sample, self.held.check), sample.t)


class Hold:
    """A check held ``hold_s`` seconds in a row: since when it holds, and its values meanwhile."""

    def __init__(self, check: Check, hold_s: float) -> None:
        self.check, self.hold_s = check, hold_s
        self.since: float | None = None
        self.values: list[float] = []

    def see(self, value: float | None, t: float) -> bool:
        """One reading at ``t``: whether the check has now held long enough."""
        if value is None or not self.check.holds(value):
            self.since, self.values = None, []
            return False
        self.since = t if self.since is None else self.since
        self.values.append(value)
        return t - self.since >= self.hold_s

    def mean(self) -> float:
        return sum(self.values) / len(self.values)


class Watch:
    """One expectation of an operator phase, met whenever it holds (for its ``for``) while the
    phase lasts: what the moves set off (the queues failing once the fleet is held back), at the
    time the lab makes it happen rather than after a fixed step."""

    def __init__(self, step: Step, start: float, pace: Pace) -> None:
        assert step.check is not None, "the reader gives every watched step its check"
        self.step, self.start = step, start
        self.held = Hold(step.check, pace.wall(step.check.for_s))
        self.met: float | None = None
        self.mean: float | None = None
        self.last: float | None = None

    def see(self, sample: Reading) -> None:
        if self.met is not None:
            return
        self.last = probe(sample, self.held.check)
        if self.held.see(self.last, sample.t):
            self.met, self.mean = self.held.since, self.held.mean()

    def record(self) -> dict[str, Any]:
        base = {
            "name": self.step.name,
            "kind": "expect",
            "watched": True,
            "line": self.step.line,
            "at_s": round(self.start, 3),
            "expect": self.held.check.describe(),
        }
        if self.met is None or self.mean is None:
            return base | {"passed": False, "value": self.last, "detail": f"not met while the phase lasted (last value {_fmt(self.last)})"}
        met = round(self.met - self.start, 3)
        detail = f"{_fmt(self.mean)} after {met:g}s"
        return base | {"passed": True, "met_after_s": met, "value": self.last, "mean": self.mean, "detail": detail}


class Aborted(Exception):
    """A stop condition held: the run ends here and rolls back."""


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"
