"""The cascade services' partition-map reads: each service shifted to its own moment, so a changed
map (3 MB at 10,000 nodes) is not fetched and decoded by all of them at once; its lists checked
for strings without a Python loop over 300,000 entries."""

import asyncio

import pytest

from services import storage as storage_module
from services.storage import keep_map_fresh
from stormcore.wire import PartitionMap, WireError


class Reads:
    """A Storage's map reads: the first has no map yet, every later one has."""

    def __init__(self) -> None:
        self.map = None
        self.count = 0

    async def refresh_map(self) -> bool:
        self.count += 1
        self.map = self.map if self.count == 1 else object()
        return True


def sleeps_of(phase: float, reads: int, monkeypatch) -> list[float]:
    slept: list[float] = []
    storage = Reads()

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        if storage.count >= reads:
            raise asyncio.CancelledError

    monkeypatch.setattr(storage_module.asyncio, "sleep", sleep)
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(keep_map_fresh(storage, 5.0, phase))  # type: ignore[arg-type]
    return slept


def test_a_service_shifts_its_reads_once_by_its_phase(monkeypatch):
    # no map yet: again in half a second; then the shift, once; then every period
    assert sleeps_of(0.5, 4, monkeypatch) == [0.5, 2.5, 5.0, 5.0, 5.0]
    assert sleeps_of(0.0, 3, monkeypatch) == [0.5, 0.0, 5.0, 5.0]


def test_a_maps_lists_are_strings_or_it_is_refused():
    good = {"version": 3, "tables": {"t": {"owners": ["r00n000", "r00n001"], "gsis": [], "status": "ok"}}}
    assert PartitionMap.decode(good).tables["t"].owners == ("r00n000", "r00n001")
    for bad in ([1, "r00n000"], ["r00n000", None], "r00n000", [["r00n000"]], {"r00n000": 1}):
        with pytest.raises(WireError, match="t.owners must be a list of strings"):
            PartitionMap.decode({"version": 3, "tables": {"t": {"owners": bad, "gsis": [], "status": "ok"}}})


def test_a_services_map_is_its_own_tables_cut_from_the_whole():
    from metadata_service.membership import MembershipStore
    from stormcore.settings import LabSettings

    store = MembershipStore.for_fleet(LabSettings(racks=2, nodes_per_rack=10))
    store.add_gsis("catalog", 1)
    store.stick(["carts"])
    whole = PartitionMap.decode(store.partition_map())
    mine = PartitionMap.decode(store.partition_map(["carts", "catalog"]))
    assert mine.version == whole.version and list(mine.tables) == ["carts", "catalog"]
    assert mine.tables == {t: whole.tables[t] for t in ("carts", "catalog")}  # the same routes, GSIs and status
