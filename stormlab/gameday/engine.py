"""Runs a scenario's timeline against a lab, in its own time: real or virtual.

Every wait goes through one tick that also takes a sample, so the journal holds a metric
series at a steady rate and a unit test can run a whole game day in virtual time against a
fake lab. Rollbacks run whatever happens (a failed step, an error, Ctrl-C).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from stormlab.gameday.scenario import Check, Planned, Scenario, Step


class Lab(Protocol):
    async def sample(self) -> dict[str, Any]: ...

    async def fault(self, fault: str, args: dict, speed: float) -> dict[str, Any]: ...

    async def action(self, action: str, args: dict, speed: float) -> dict[str, Any]: ...

    async def rollback(self) -> None: ...

    def player_actions(self) -> list[dict[str, Any]]: ...


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


def probe(sample: dict[str, Any], check: Check) -> float | None:
    """The value a check looks at, from one sample of the lab."""
    if check.probe == "table_error_ratio":
        return sample.get("table_error_ratio", {}).get(check.table)
    if check.probe == "worst_table_error_ratio":
        ratios = [v for v in sample.get("table_error_ratio", {}).values() if v is not None]
        return max(ratios) if ratios else None
    if check.probe == "disqualified_fraction":
        total = sample.get("nodes_total") or 0
        return sample["nodes_disqualified"] / total if total else None
    if check.probe == "margin":
        p99, allowance = sample.get("metadata_processing_p99_s"), sample.get("allowance_s")
        return p99 / allowance if p99 is not None and allowance else None
    if check.probe == "metadata_paused":
        return 1.0 if sample.get("metadata_paused") else 0.0
    return sample.get(check.probe)


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
    ) -> None:
        self.scenario, self.plan, self.lab, self.clock = scenario, plan, lab, clock
        self.autopilot, self.speed, self.tick_s, self.echo = autopilot, speed, tick_s / speed, echo
        self.t0 = 0.0
        self.samples: list[dict[str, Any]] = []
        self.steps: list[dict[str, Any]] = []
        self.rollbacks: list[dict[str, Any]] = []

    def elapsed(self) -> float:
        return self.clock.now() - self.t0

    async def tick(self) -> dict[str, Any]:
        await self.clock.sleep(self.tick_s)
        return await self.take_sample()

    async def take_sample(self) -> dict[str, Any]:
        sample = {"t": round(self.elapsed(), 3), **await self.lab.sample()}
        self.samples.append(sample)
        return sample

    async def run(self) -> dict[str, Any]:
        self.t0 = self.clock.now()
        outcome = "interrupted"
        try:
            await self.take_sample()
            steady = [await self.steady(c) for c in self.scenario.steady_state]
            if not all(r["passed"] for r in steady):
                self.steps.extend(steady)
                outcome = "failed"
                return self.journal(outcome)
            self.steps.extend(steady)
            for planned in self.plan:
                await self.step(planned)
            outcome = "passed" if all(s["passed"] for s in self.steps) else "failed"
            return self.journal(outcome)
        finally:
            # Ctrl-C or SIGTERM cancels this task once: the rollbacks below still run to the end.
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

    async def step(self, planned: Planned) -> dict[str, Any]:
        step = planned.step
        if planned.at_s is not None:
            while self.elapsed() < planned.at_s:
                await self.tick()
        elif step.after_s:
            await self.wait(step.after_s / self.speed)
        record = await self.do(step, planned.args)
        self.steps.append(record)
        mark = "ok" if record["passed"] else "FAILED"
        self.echo(f"[{record['ended_s']:7.1f}s] {mark:6} {step.name}: {record.get('detail', '')}")
        return record

    async def wait(self, seconds: float) -> None:
        end = self.elapsed() + seconds
        while self.elapsed() < end:
            await self.tick()

    async def do(self, step: Step, args: dict[str, Any]) -> dict[str, Any]:
        record: dict[str, Any] = {"name": step.name, "kind": step.kind, "line": step.line, "at_s": round(self.elapsed(), 3)}
        if step.kind in ("fault", "action"):
            record |= await self.move(step, args)
        elif step.kind == "wait":
            await self.wait(step.wait_s / self.speed)
            record |= {"passed": True, "detail": f"waited {step.wait_s / self.speed:g}s"}
        elif step.kind == "expect" and step.check:
            record |= await self.expect(step.check)
        else:
            record |= await self.operator(step)
        record["ended_s"] = round(self.elapsed(), 3)
        return record

    async def move(self, step: Step, args: dict[str, Any]) -> dict[str, Any]:
        """A fault or an operator's action, and whether it went as the step expected."""
        if step.fault:
            result = await self.lab.fault(step.fault, args, self.speed)
            own = {"fault": step.fault, "duration_s": result.get("duration_s"), "passed": result["ok"]}
        else:
            assert step.action is not None, "the reader gives every action step its action"
            result = await self.lab.action(step.action, args, self.speed)
            passed = result["ok"] != step.expect_failure
            own = {"action": step.action, "ok": result["ok"], "expect_failure": step.expect_failure, "passed": passed}
        return {"args": args, "detail": result["message"], **own}

    async def expect(self, check: Check, within_s: float | None = None) -> dict[str, Any]:
        """Wait until the check holds (for ``for`` seconds in a row), at most ``within``."""
        start = self.elapsed()
        deadline = start + (check.within_s / self.speed if within_s is None else within_s)
        hold = check.for_s / self.speed
        since: float | None = None
        values: list[float] = []
        while True:
            value = probe(self.samples[-1], check)
            if value is not None and check.holds(value):
                since = self.elapsed() if since is None else since
                values.append(value)
                if self.elapsed() - since >= hold:
                    met = round(since - start, 3)
                    return {
                        "passed": True,
                        "expect": check.describe(),
                        "met_after_s": met,
                        "value": value,
                        "mean": sum(values) / len(values),
                        "detail": f"{_fmt(value)} after {met:g}s",
                    }
            else:
                since, values = None, []
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
        limit = step.time_limit_s / self.speed
        if self.autopilot:
            self.echo(f"[{start:7.1f}s] autopilot plays the 2015 runbook")
            auto = []
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
        result = await self.expect(step.check, within_s=max(0.0, start + limit - watching))
        # recovered when the condition began to hold (as for any expectation), not when its hold ended
        result["recovered_after_s"] = round(watching + result["met_after_s"] - start, 3) if result["passed"] else None
        return result | {"autopilot": auto, "passed": result["passed"] and all(a["passed"] for a in auto), "started_s": round(start, 3)}

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
            "samples": self.samples,
            "player_actions": self.lab.player_actions(),
        }


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"
