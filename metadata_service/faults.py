"""The metadata service's faults, held as leases by the service itself.

  pause-metadata   {"duration_s"}                              AWS's 5:06 AM move; resumes at the end
  resume-metadata  {"duration_s", "staged": N, "every_s": S}   readmit now, at once or in N steps
  capacity         {"duration_s", "cores", "break_glass"}      set cores through the shared admin
                   path (times out in a storm, as in 2015) or around it; restored at the end
  gsi-growth       {"duration_s", "tables", "factor", "ramp_s"}  customers adopt GSIs: memberships
                   of those tables grow by ``factor`` over ``ramp_s``; the GSIs go at the end
  stuck-partition  {"duration_s", "tables"}                    the Monday tail: the metadata partition
                   behind these tables stops taking its share; they recover at the end
"""
from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from chaos.control import LeaseRunner, Plan
from metadata_service import app as meta
from metadata_service.membership import MAX_GSIS
from services.common.web import BadRequest, number

FAULTS = ("pause-metadata", "resume-metadata", "capacity", "gsi-growth", "stuck-partition")


class MetadataFaults:
    def __init__(self, app: web.Application, runner: LeaseRunner) -> None:
        self.app, self.runner = app, runner
        self._overrides: dict[object, float] = {}  # active capacity leases, oldest first
        self._base_cores = 0.0

    def handlers(self) -> dict:
        return {"pause-metadata": self.pause, "resume-metadata": self.resume, "capacity": self.capacity,
                "gsi-growth": self.gsi_growth, "stuck-partition": self.stuck_partition}

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    async def pause(self, body: dict[str, Any]) -> Plan:
        admission = self.app[meta.STATE].admission
        epoch: list[int] = []

        def revert() -> None:
            if admission.paused and admission.epoch == epoch[0]:  # not already resumed by an operator
                admission.resume(self._now())

        return Plan("metadata", lambda: epoch.append(admission.pause()), revert, {})

    async def resume(self, body: dict[str, Any]) -> Plan:
        groups, every = meta.staging(body)
        admission = self.app[meta.STATE].admission
        return Plan("metadata", lambda: admission.resume(self._now(), groups, every), lambda: None,
                    {"staged": groups, "every_s": every})

    async def capacity(self, body: dict[str, Any]) -> Plan:
        cores = number(body, "cores", 0.1, 100_000)
        bypass = meta.break_glass(body)
        scheduler = self.app[meta.STATE].scheduler
        key = object()

        async def apply() -> None:
            before = scheduler.cpu.cores
            await meta.set_capacity(self.app, cores, bypass)
            if not self._overrides:
                self._base_cores = before
            self._overrides[key] = cores

        def revert() -> None:
            # overlapping leases: the newest one still running wins, else the capacity before them all
            self._overrides.pop(key, None)
            scheduler.set_cores(list(self._overrides.values())[-1] if self._overrides else self._base_cores)

        return Plan("metadata", apply, revert, {"cores": cores, "break_glass": bypass})

    async def gsi_growth(self, body: dict[str, Any]) -> Plan:
        store = self.app[meta.STORE]
        tables = body.get("tables")
        if not isinstance(tables, list) or not tables or not all(t in store.tables for t in tables):
            raise BadRequest(f"tables must be a list of tables among {', '.join(store.tables)}")
        factor = number(body, "factor", 1, 21)
        ramp = number(body | {"ramp_s": body.get("ramp_s", 0)}, "ramp_s", 0, 3600)
        if ramp > body.get("duration_s", 0):
            raise BadRequest("ramp_s must not be longer than duration_s")
        adds = {t: round((factor - 1) * (1 + len(store.tables[t].gsis))) for t in tables}
        if any(len(store.tables[t].gsis) + n > MAX_GSIS for t, n in adds.items()):
            raise BadRequest(f"that factor would take a table past {MAX_GSIS} GSIs")
        added: dict[str, list[str]] = {t: [] for t in tables}
        timers: list[asyncio.TimerHandle] = []
        steps = [t for t, n in adds.items() for _ in range(n)]

        def grow(table: str) -> None:
            store.add_gsis(table, 1)
            added[table].append(store.tables[table].gsis[-1])
            self.app[meta.METRICS].version.set(store.version)

        def apply() -> None:
            loop = asyncio.get_running_loop()
            for i, table in enumerate(steps):
                at = ramp * (i + 1) / len(steps)
                if at > 0:
                    timers.append(loop.call_later(at, grow, table))
                else:
                    grow(table)

        def revert() -> None:
            for timer in timers:
                timer.cancel()
            for table, names in added.items():
                store.remove_gsis(table, names)
            self.app[meta.METRICS].version.set(store.version)

        return Plan("metadata", apply, revert, {"tables": tables, "factor": factor, "ramp_s": ramp,
                                                "gsis_added": sum(adds.values())})

    async def stuck_partition(self, body: dict[str, Any]) -> Plan:
        store = self.app[meta.STORE]
        tables = body.get("tables")
        if not isinstance(tables, list) or not tables or not all(t in store.tables for t in tables):
            raise BadRequest(f"tables must be a list of tables among {', '.join(store.tables)}")
        if set(tables) & store.stuck:
            raise BadRequest(f"already stuck: {', '.join(sorted(set(tables) & store.stuck))}")

        def apply() -> None:
            store.stick(tables)
            self.app[meta.METRICS].version.set(store.version)

        def revert() -> None:
            store.unstick(tables)
            self.app[meta.METRICS].version.set(store.version)

        return Plan("metadata", apply, revert, {"tables": tables})
