"""Fault leases at run time, and the control API every fault-holding process serves.

    POST   /faults  {"fault": NAME, "duration_s": D, …}   apply; 201 with the lease
    GET    /faults                                        active leases and their time left
    DELETE /faults                                        halt: revert every lease now

A process registers its faults as handlers that validate the request and return what to
apply and what to revert; the runner applies, opens the lease, and arms the revert on this
process's event loop at the same moment. Every start and end is recorded: the
``stormlab_chaos_*`` metrics, a JSON-lines event log, and a Grafana annotation when a Grafana
URL and token are configured.

A fault that acts on traffic says what it did (its plan's ``effect``: the bytes it dropped or
held back so far), counted where it acts. A lease that ends having done nothing is marked
``no_effect`` in its end event, in the listing of recently ended leases and in
``stormlab_chaos_no_effect_total``: a blip that cut nothing is a finding, not a blip.

Recording never stands between a fault and its revert: a revert that raises, or an event log
that cannot be written (disk full, state directory gone), is logged and counted, and every other
lease is still reverted and the timer re-armed. Each applied lease is reverted exactly once.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge

from chaos import catalog
from chaos.fault_lease import FaultLease, FaultLeaseBook, FaultLeaseError
from stormcore import jsonlog, openapi
from stormcore.auth import grafana_auth
from stormcore.documents import is_decimal
from stormcore.openapi import ERROR, Answer, Operation, obj
from stormcore.settings import max_duration_s as lease_max_duration_s
from stormcore.web import BadRequest, json_error, read_object

log = logging.getLogger(__name__)
OUTCOMES = ("applied", "reverted", "halted")


Effect = dict[str, int]  # what a fault did so far, by what it counts ("dropped_bytes": 1200)


@dataclass
class Plan:
    """What a fault request amounts to: the target, how to apply it and how to revert it, and
    (for a fault on traffic) what it has done so far."""

    target: str
    apply: Callable[[], Awaitable[None] | None]
    revert: Callable[[], None]
    detail: dict[str, Any]
    effect: Callable[[], Effect] | None = None


def no_effect(effect: Effect | None) -> bool:
    """A measured fault that did nothing (an unmeasured one, None, is not judged)."""
    return effect is not None and not any(effect.values())


ENDED_KEPT = 200  # recently ended leases a holder remembers for `chaos list`


Handler = Callable[[dict[str, Any]], Awaitable[Plan]]  # gets the request as the catalog checked it


class Recorder:
    def __init__(self, registry: CollectorRegistry, faults: tuple[str, ...], component: str) -> None:
        self.component = component
        self.active = Gauge("stormlab_chaos_fault_active", "1 while a fault holds a target", ["fault", "target"], registry=registry)
        self.events = Counter("stormlab_chaos_faults_total", "Fault leases by fault and outcome", ["fault", "outcome"], registry=registry)
        self.failures = Counter(
            "stormlab_chaos_record_failures_total", "Reverts that raised and event-log writes that failed", ["what"], registry=registry
        )
        self.no_effect = Counter(
            "stormlab_chaos_no_effect_total",
            "Leases of a fault on traffic that ended having dropped or held back nothing",
            ["fault"],
            registry=registry,
        )
        for what in ("revert", "event_log"):
            self.failures.labels(what)
        for fault in faults:
            self.no_effect.labels(fault)
            for outcome in OUTCOMES:
                self.events.labels(fault, outcome)
        self.event_log = Path(os.environ["STORMLAB_EVENT_LOG"]) if os.environ.get("STORMLAB_EVENT_LOG") else None
        self.grafana = (os.environ.get("STORMLAB_GRAFANA_URL", "").rstrip("/"), grafana_auth())
        self._tasks: set[asyncio.Task] = set()

    def record(self, outcome: str, lease: FaultLease, book: FaultLeaseBook, effect: Effect | None = None) -> None:
        self.events.labels(lease.fault, outcome).inc()
        if outcome != "applied" and no_effect(effect):
            self.no_effect.labels(lease.fault).inc()
        for target in lease.targets:  # one series per rack or process: labels stay bounded
            self.active.labels(lease.fault, target).set(1 if book.holding(target, lease.fault) else 0)
        event = {
            "at": time.time(),
            "event": "start" if outcome == "applied" else "end",
            "outcome": outcome,
            "component": self.component,
            "id": lease.id,
            "fault": lease.fault,
            "target": lease.target,
            "duration_s": round(lease.ends_at - lease.started_at, 3),
            **lease.detail,
            **({"effect": effect, "no_effect": no_effect(effect)} if outcome != "applied" and effect is not None else {}),
        }
        log.info("fault %s", json.dumps(event))
        if self.event_log is not None:
            try:
                jsonlog.append(self.event_log, event, make_parents=False)  # a state directory removed stays removed
            except OSError as exc:  # the fault still applies and reverts; the log line is lost
                self.failures.labels("event_log").inc()
                log.error("fault event not written to %s: %s", self.event_log, exc)
        url, auth = self.grafana
        if url and auth:
            task = asyncio.ensure_future(self._annotate(url, auth, event))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _annotate(self, url: str, auth: str, event: dict) -> None:
        body = {
            "time": int(event["at"] * 1000),
            "tags": ["stormlab", "chaos", event["fault"], event["event"]],
            "text": f"{event['fault']} {event['event']} on {event['target']} ({event['outcome']}"
            + (", NO EFFECT: it dropped nothing" if event.get("no_effect") else "")
            + ")",
        }
        try:
            async with (
                aiohttp.ClientSession() as s,
                s.post(
                    f"{url}/api/annotations", json=body, headers={"Authorization": auth}, timeout=aiohttp.ClientTimeout(total=2)
                ) as resp,
            ):
                await resp.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.warning("grafana annotation not written: %s", exc)


class LeaseRunner:
    def __init__(self, recorder: Recorder, max_duration_s: float | None = None) -> None:
        self.book = FaultLeaseBook(max_duration_s or lease_max_duration_s())
        self.recorder = recorder
        self._reverts: dict[int, Callable[[], None]] = {}
        self._effects: dict[int, Callable[[], Effect]] = {}
        self.ended: collections.deque[dict[str, Any]] = collections.deque(maxlen=ENDED_KEPT)
        self._timer: asyncio.TimerHandle | None = None

    async def apply(self, fault: str, duration_s: Any, plan: Plan) -> FaultLease:
        self.book.check_duration(duration_s)  # refuse before anything changes
        applied = plan.apply()  # all or nothing: a plan's apply that raises has changed nothing
        if inspect.isawaitable(applied):
            await applied
        loop = asyncio.get_running_loop()
        lease = self.book.open(fault, plan.target, duration_s, loop.time(), **plan.detail)
        self._reverts[lease.id] = plan.revert
        if plan.effect is not None:
            self._effects[lease.id] = plan.effect
        self._arm()  # armed before anything else can fail
        self._record("applied", lease)
        return lease

    def halt(self, fault: str | None = None, lease_id: int | None = None) -> int:
        """Ends every lease now (or every lease of ``fault``, or lease ``lease_id``), each reverted; how many."""
        leases = self.book.halt(fault, lease_id)
        try:
            for lease in leases:
                self._end(lease, "halted")
        finally:
            self._arm()
        return len(leases)

    def effect(self, lease_id: int) -> Effect | None:
        """What a lease in force has done so far (None: its fault is not measured)."""
        measure = self._effects.get(lease_id)
        try:
            return None if measure is None else dict(measure())
        except Exception:  # a count that fails says nothing; it never stops a revert
            log.exception("effect of lease #%s not read", lease_id)
            return None

    def active(self, now: float) -> list[dict[str, Any]]:
        """The leases in force, with what each has done so far."""
        out = []
        for row in self.book.active(now):
            effect = self.effect(row["id"])
            out.append(row if effect is None else row | {"effect": effect})
        return out

    def recently_ended(self, now: float) -> list[dict[str, Any]]:
        """The last leases to end, newest first, each with its effect and how long ago it ended."""
        return [
            {k: v for k, v in e.items() if k != "ended_at"} | {"ended_s_ago": round(now - e["ended_at"], 3)} for e in reversed(self.ended)
        ]

    def _end(self, lease: FaultLease, outcome: str) -> None:
        """Read what it did, revert and record; never raises (the caller still has other leases to end)."""
        effect = self.effect(lease.id)  # before the revert, which forgets the counts
        self._effects.pop(lease.id, None)
        try:
            self._reverts.pop(lease.id)()
        except Exception:  # a revert must not stop the others
            self.recorder.failures.labels("revert").inc()
            log.exception("revert of %s #%s failed", lease.fault, lease.id)
        ended = {"id": lease.id, "fault": lease.fault, "target": lease.target, "outcome": outcome, "effect": effect}
        self.ended.append(ended | {"no_effect": no_effect(effect), "ended_at": _loop_time()})
        self._record(outcome, lease, effect)

    def _record(self, outcome: str, lease: FaultLease, effect: Effect | None = None) -> None:
        try:
            self.recorder.record(outcome, lease, self.book, effect)
        except Exception:  # metrics or logging failing must not strand a lease
            log.exception("fault %s #%s %s, not recorded", lease.fault, lease.id, outcome)

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        next_end = self.book.next_end()
        if next_end is not None:
            self._timer = asyncio.get_running_loop().call_at(next_end, self._expire)

    def _expire(self) -> None:
        self._timer = None
        try:
            for lease in self.book.due(asyncio.get_running_loop().time()):
                self._end(lease, "reverted")
        finally:
            self._arm()


def _loop_time() -> float:
    """The event loop's clock (a halt at shutdown runs outside the loop: the same monotonic clock)."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


RUNNER = web.AppKey("lease_runner", LeaseRunner)
EFFECT_SCHEMA: dict[str, Any] = {
    "type": ["object", "null"],
    "additionalProperties": {"type": "integer", "minimum": 0},
    "description": "what a fault on traffic did (bytes dropped or held back); null where not measured",
}
ENDED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "fault", "target", "outcome", "effect", "no_effect", "ended_s_ago"],
    "properties": {
        "id": {"type": "integer"},
        "fault": {"type": "string"},
        "target": {"type": "string"},
        "outcome": {"enum": ["reverted", "halted"]},
        "effect": EFFECT_SCHEMA,
        "no_effect": {"type": "boolean", "description": "a measured fault that did nothing"},
        "ended_s_ago": {"type": "number", "minimum": 0},
    },
}
LEASE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "fault", "target", "left_s"],
    "properties": {"id": {"type": "integer"}, "fault": {"type": "string"}, "target": {"type": "string"}, "left_s": {"type": "number"}},
}


def add_fault_routes(
    app: web.Application, runner: LeaseRunner, handlers: dict[str, Handler], racks_total: int | None = None, conflict: str | None = None
) -> None:
    """Serve /faults for these handlers (rack numbers checked against ``racks_total`` when given;
    ``conflict`` says when a handler answers 409); every lease is halted when the app shuts down."""
    app[RUNNER] = runner

    async def apply(request: web.Request) -> web.Response:
        body = await read_object(request)
        fault = body.get("fault")
        if not isinstance(fault, str) or fault not in handlers:
            raise BadRequest(f"fault must be one of {', '.join(sorted(handlers))}")
        try:
            values = catalog.check(fault, body, racks_total)
            runner.book.check_duration(values.get("duration_s"))
            plan = await handlers[fault](values)
            lease = await runner.apply(fault, values["duration_s"], plan)
        except (FaultLeaseError, catalog.ChaosError) as exc:
            raise BadRequest(str(exc)) from None
        return web.json_response(lease.describe(asyncio.get_running_loop().time()) | {"duration_s": values["duration_s"]}, status=201)

    async def listing(request: web.Request) -> web.Response:
        now = asyncio.get_running_loop().time()
        return web.json_response({"faults": runner.active(now), "ended": runner.recently_ended(now)})

    async def halt(request: web.Request) -> web.Response:
        unknown, given = sorted(set(request.query) - {"fault", "id"}), list(request.query.items())
        if unknown or len(given) > 1:  # a misspelt filter must not end every lease
            raise BadRequest(
                "DELETE /faults takes at most one query parameter, fault=NAME or id=LEASE "
                f"(not {', '.join(unknown) or ' and '.join(k for k, _ in given)})"
            )
        fault = request.query.get("fault")
        if fault is not None and fault not in handlers:
            raise BadRequest(f"fault must be one of {', '.join(sorted(handlers))}")
        lease_id = None
        if "id" in request.query:
            raw = request.query["id"]
            if not is_decimal(raw):
                raise BadRequest(f"id is a lease's number, as GET /faults lists it, got {raw[:40]!r}")
            lease_id = int(raw)
        halted = runner.halt(fault, lease_id)
        if lease_id is not None and not halted:
            return json_error(404, "not_found", f"no lease #{lease_id} in force here (it may have ended)")
        return web.json_response({"halted": halted})

    async def halt_on_shutdown(app: web.Application) -> None:
        runner.halt()

    lease = {**LEASE_SCHEMA, "additionalProperties": True}
    body = catalog.body_schema(tuple(handlers), racks_total)
    openapi.add(app, Operation("POST", "/faults", "apply a fault for a lease; its revert is armed before the answer", {
        201: Answer("the lease: applied, and reverted when it ends", {**lease, "required": [*lease["required"], "duration_s"]}),
        400: Answer("the request is refused (unknown fault, an argument out of range): nothing changed", ERROR),
        **({409: Answer(conflict, ERROR)} if conflict else {}),
    }, body=body, body_required=True, protected=True, tag="faults"), apply)  # fmt: skip
    ended = {**ENDED_SCHEMA, "additionalProperties": True}
    openapi.add(app, Operation("GET", "/faults", "the leases in force, and the last ones to end with what they did", {
        200: Answer("every lease this process holds, and the last ones it ended",
                    obj(faults={"type": "array", "items": lease}, ended={"type": "array", "items": ended})),
    }, protected=True, tag="faults"), listing)  # fmt: skip
    only = {"name": "fault", "in": "query", "description": "end only the leases of this fault (a responder's move that ends one)",
            "schema": {"enum": sorted(handlers)}}  # fmt: skip
    one = {"name": "id", "in": "query", "description": "end only this lease (its number, as GET /faults lists it)",
           "schema": {"type": "string", "pattern": "^[0-9]{1,18}$"}}  # fmt: skip
    openapi.add(app, Operation("DELETE", "/faults", "end every lease now (or every lease of one fault, or one lease), each reverted", {
        200: Answer("how many leases were ended", obj(halted={"type": "integer", "minimum": 0})),
        400: Answer("no such fault here, a malformed id, or a query parameter other than one fault or one id: nothing ended", ERROR),
        404: Answer("no lease of that id in force here: nothing ended", ERROR),
    }, parameters=(only, one), protected=True, tag="faults"), halt)  # fmt: skip
    app.on_shutdown.append(halt_on_shutdown)
