"""What a game's players see of their lab: its monitoring.

Direct (the default): the readings as the runner takes them. Shared fate (a scenario's
``monitoring: shared-fate``), as in 2015, when CloudWatch was itself a consumer of the failing
database: every reading is published to the lab's own metrics service (PutMetricData, each watched
probe in its own Auto Scaling group's series, timestamped with the reading), and the players see
what the metrics service gives back (GetMetricData). A datapoint it refused (the fleet held back:
PutMetricData fails) or stored without its group (the group's row on a disqualified node: a gap) is
missing from their view: they go partly blind when it does. The facilitator's console reads the
labs directly and sees everything.

``view`` and ``GROUP_OF`` only compute; ``SharedFate`` publishes and reads over HTTP."""

from __future__ import annotations

import asyncio
import bisect
from typing import Any

import aiohttp

from services.scaling.app import GROUPS
from stormlab.engine.reading import Reading

MONITORING = ("direct", "shared-fate")  # what the players' monitoring reads: the lab, or the lab's own metrics service

NAMESPACE = "Custom/stormlab"
WATCHED = (  # the probes the players' console charts: (probe, what it is, how it reads)
    ("customer_error_ratio", "customers failing", "ratio"),
    ("nodes_disqualified", "storage nodes disqualified", "count"),
    ("metadata_inflight", "metadata requests in flight", "count"),
    ("queue_error_ratio", "queue sends and receives failing", "ratio"),
    ("scaling_api_error_ratio", "scaling API calls failing", "ratio"),
)
GROUP_OF = {probe: GROUPS[i % len(GROUPS)] for i, (probe, _, _) in enumerate(WATCHED)}  # each its own group's series
SHOWN = 150  # readings on the console: the last minutes


def view(readings: list[tuple[float, float]], seen: dict[str, dict[float, float]], mode: str) -> dict[str, Any]:
    """The players' view: per watched probe, its series over ``readings`` (each reading's game time
    and its wall timestamp) as ``[t, value or None]`` from what ``seen`` holds (probe -> timestamp ->
    value): a reading whose datapoint is not there is a gap (None)."""
    assert mode in MONITORING, mode
    readings = readings[-SHOWN:]
    series = {probe: [[t, seen.get(probe, {}).get(round(at, 3))] for t, at in readings] for probe, _, _ in WATCHED}
    missing = sum(v is None for points in series.values() for _, v in points)
    total = sum(len(points) for points in series.values())
    return {
        "mode": mode,
        "probes": [{"probe": p, "what": what, "unit": unit, "group": GROUP_OF[p]} for p, what, unit in WATCHED],
        "series": series,
        "gaps": round(missing / total, 3) if total else 0.0,
    }


def direct(samples: list[Reading]) -> dict[str, Any]:
    """The view from the runner's own readings (nothing is lost on the way)."""
    readings = [(s.t, float(i)) for i, s in enumerate(samples)]
    seen = {p: {float(i): v for i, s in enumerate(samples) if (v := s.probe(p)) is not None} for p, _, _ in WATCHED}
    return view(readings, seen, "direct")


class SharedFate:
    """The players' monitoring through the lab's metrics service at ``url``."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.readings: list[tuple[float, float]] = []  # (game time, wall timestamp) of each reading once published
        self.published = self.refused = 0
        self._tasks: set[asyncio.Task] = set()
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2))
        return self._session

    def observe(self, sample: Reading, wall: float) -> None:
        """A reading taken: published in the background (the runner does not wait on CloudWatch)."""
        task = asyncio.get_running_loop().create_task(self.publish(sample, round(wall, 3)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def publish(self, sample: Reading, at: float) -> None:
        """Each watched probe of a reading as a datapoint; the reading joins the view once every one
        was answered (or refused): one still on its way is not shown as a gap."""
        for probe, _, _ in WATCHED:
            value = sample.probe(probe)
            if value is None:
                continue
            body = {"namespace": NAMESPACE, "name": probe, "group": GROUP_OF[probe], "value": float(value), "timestamp": at}
            try:
                async with self.session().post(f"{self.url}/data", json=body) as resp:
                    ok = resp.status == 201
            except (TimeoutError, aiohttp.ClientError):
                ok = False
            self.published += 1
            self.refused += not ok
        bisect.insort(self.readings, (sample.t, at))

    async def read(self) -> dict[str, Any]:
        """The view as the metrics service gives it back (a probe it cannot answer for: all gaps)."""
        since = self.readings[-SHOWN][1] - 0.001 if len(self.readings) >= SHOWN else 0.0
        seen: dict[str, dict[float, float]] = {}
        for probe, _, _ in WATCHED:
            query = {"namespace": NAMESPACE, "name": probe, "group": GROUP_OF[probe], "since": f"{since:.3f}", "limit": "1000"}
            try:
                async with self.session().get(f"{self.url}/data", params=query) as resp:
                    found = (await resp.json())["datapoints"] if resp.status == 200 else []
            except (TimeoutError, aiohttp.ClientError, ValueError, KeyError):
                found = []
            seen[probe] = {round(d["timestamp"], 3): d["value"] for d in found}
        return view(self.readings, seen, "shared-fate")

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._session is not None:
            await self._session.close()
