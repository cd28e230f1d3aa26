"""The metadata service's faults, held as leases by the service itself.

Their arguments and ranges are declared in the fault catalog (``chaos/catalog.py``); a handler
gets a request the catalog has checked, and returns what to apply and what to revert:

  pause-metadata   AWS's 5:06 AM move; at the end everyone is readmitted at once
  resume-metadata  readmit now, at once or in N steps
  capacity         set cores through the shared admin path (times out in a storm, as in 2015)
                   or around it; restored at the end
  gsi-growth       customers adopt GSIs: memberships of those tables grow by ``factor`` over
                   ``ramp_s``; the GSIs go at the end
  stuck-partition  the Monday tail: the metadata partition behind these tables stops taking its
                   share; they recover at the end
"""

from __future__ import annotations

import asyncio
from typing import Any

from chaos.control import Handler, LeaseRunner, Plan
from metadata_service.membership import MAX_GSIS
from metadata_service.service import MetadataService
from stormcore.web import BadRequest


class MetadataFaults:
    def __init__(self, service: MetadataService, runner: LeaseRunner) -> None:
        self.service, self.runner = service, runner
        self._overrides: dict[object, float] = {}  # active capacity leases, oldest first
        self._base_cores = 0.0
        self._pauses: set[object] = set()  # active pause-metadata leases
        self._pause_epoch = -1  # the admission epoch the latest of them paused

    def handlers(self) -> dict[str, Handler]:
        return {
            "pause-metadata": self.pause,
            "resume-metadata": self.resume,
            "capacity": self.capacity,
            "gsi-growth": self.gsi_growth,
            "stuck-partition": self.stuck_partition,
        }

    async def pause(self, values: dict[str, Any]) -> Plan:
        """Overlapping pauses: the fleet is readmitted when the last of them ends, unless an
        operator resumed (or paused again) meanwhile."""
        service, key = self.service, object()

        def revert() -> None:
            self._pauses.discard(key)
            if not self._pauses and service.admission.paused and service.admission.epoch == self._pause_epoch:
                service.resume()

        def apply() -> None:
            self._pauses.add(key)
            self._pause_epoch = service.pause()

        return Plan("metadata", apply, revert, {})

    async def resume(self, values: dict[str, Any]) -> Plan:
        """A readmission, at once or staged; its lease lasts until the last step, and a lease
        ended early (halted) lets the rest in at once, unless a pause or resume came since."""
        groups, every = values["staged"], values["every_s"]
        epoch = -1

        def apply() -> None:
            nonlocal epoch
            epoch = self.service.resume(groups, every)

        def revert() -> None:
            self.service.admission.readmit_all(epoch)

        return Plan("metadata", apply, revert, {"staged": groups, "every_s": every})

    async def capacity(self, values: dict[str, Any]) -> Plan:
        cores, bypass = values["cores"], values["break_glass"]
        service = self.service
        key = object()

        async def apply() -> None:
            before = service.cpu.cores
            await service.set_capacity(cores, bypass)
            if not self._overrides:
                self._base_cores = before
            self._overrides[key] = cores

        def revert() -> None:
            # overlapping leases: the newest one still running wins, else the capacity before them all
            self._overrides.pop(key, None)
            assert service.scheduler is not None
            service.scheduler.set_cores(list(self._overrides.values())[-1] if self._overrides else self._base_cores)

        return Plan("metadata", apply, revert, {"cores": cores, "break_glass": bypass})

    def _tables(self, values: dict[str, Any]) -> list[str]:
        store = self.service.store
        tables: list[str] = values["tables"]
        if not all(t in store.tables for t in tables):
            raise BadRequest(f"tables must be among {', '.join(store.tables)}")
        return tables

    async def gsi_growth(self, values: dict[str, Any]) -> Plan:
        service, store = self.service, self.service.store
        tables, factor, ramp = self._tables(values), values["factor"], values["ramp_s"]
        adds = {t: round((factor - 1) * (1 + len(store.tables[t].gsis))) for t in tables}
        if any(len(store.tables[t].gsis) + n > MAX_GSIS for t, n in adds.items()):
            raise BadRequest(f"that factor would take a table past {MAX_GSIS} GSIs")
        added: dict[str, list[str]] = {t: [] for t in tables}
        timers: list[asyncio.TimerHandle] = []
        steps = [t for t, n in adds.items() for _ in range(n)]

        def grow(table: str) -> None:
            store.add_gsis(table, 1)
            added[table].append(store.tables[table].gsis[-1])
            service.store_changed()

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
            service.store_changed()

        return Plan("metadata", apply, revert, {"tables": tables, "factor": factor, "ramp_s": ramp, "gsis_added": sum(adds.values())})

    async def stuck_partition(self, values: dict[str, Any]) -> Plan:
        service, store = self.service, self.service.store
        tables = self._tables(values)
        if set(tables) & store.stuck:
            raise BadRequest(f"already stuck: {', '.join(sorted(set(tables) & store.stuck))}")

        def apply() -> None:
            store.stick(tables)
            service.store_changed()

        def revert() -> None:
            store.unstick(tables)
            service.store_changed()

        return Plan("metadata", apply, revert, {"tables": tables})
