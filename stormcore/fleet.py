"""Names of racks and nodes, which nodes are the large instances (they hold the GSIs), and when each node renews."""

from __future__ import annotations

import math
import re

from stormcore.errors import UsageError
from stormcore.settings import LabSettings

_NODE = re.compile(r"^r(\d{2,})n(\d{3,})$")


def node_id(rack: int, index: int) -> str:
    return f"r{rack:02d}n{index:03d}"


def _parts(node: str) -> tuple[int, int]:
    match = _NODE.match(node)
    if not match:
        raise ValueError(f"not a node id: {node!r}")
    return int(match.group(1)), int(match.group(2))


def rack_of(node: str) -> int:
    return _parts(node)[0]


def node_index(node: str) -> int:
    """The node's place in its rack."""
    return _parts(node)[1]


def holds_gsi_heavy(rack: int, index: int, s: LabSettings) -> bool:
    """``big_per_every`` of every ``big_every`` nodes of each rack are large instances: more slots
    for table partitions, and every GSI partition (``metadata_service.membership``)."""
    return (rack * s.nodes_per_rack + index) % s.big_every < s.big_per_every


def cell_of(rack: int, s: LabSettings) -> int:
    """The cell whose metadata service serves this rack: the racks are dealt out in contiguous
    runs, as even as they can be (10 racks in 4 cells: 3, 2, 3, 2)."""
    return _cell(rack, s.cells, s.racks)


def _cell(rack: int, cells: int, racks: int) -> int:
    return rack * cells // racks


def cell_racks(cell: int, s: LabSettings) -> list[int]:
    return racks_of_cell(cell, s.cells, s.racks)


def racks_of_cell(cell: int, cells: int, racks: int) -> list[int]:
    """The racks ``cell`` serves among ``racks`` in ``cells`` (the rule of ``cell_of``)."""
    return [r for r in range(racks) if _cell(r, cells, racks) == cell]


def cell_cores(cell: int, s: LabSettings) -> float:
    """A cell's share of the metadata cores: the fleet's capacity split like its racks, so each
    cell is the 2015 service in miniature (same load per core)."""
    return s.capacity_cores * len(cell_racks(cell, s)) / s.racks


def cell_name(cell: int) -> str:
    """The component serving a cell: ``metadata`` for the first (the only one without cells)."""
    return "metadata" if cell == 0 else f"metadata-{cell}"


def grid_slot(origin: float, period: float, phase: float, not_before: float) -> float:
    """The first time not before ``not_before`` that lies ``phase`` of a ``period`` past a slot of
    a schedule counted from ``origin`` (slots at origin + k periods, k >= 0): a node's first
    renewal on the lab's shared schedule, and the moment of it at which a placed blip comes."""
    return origin + (phase + max(0, math.ceil((not_before - origin) / period - phase))) * period


def startup_phases(s: LabSettings) -> dict[str, float]:
    """Each node's first renewal, as a fraction of a period.

    Big and small memberships are each spread evenly over the period, racks interleaved, so
    the healthy fleet's renewals never bunch: neither a rack nor the big memberships renew in
    one burst.
    """
    classes: dict[bool, list[tuple[int, int]]] = {True: [], False: []}
    for index in range(s.nodes_per_rack):
        for rack in range(s.racks):
            classes[holds_gsi_heavy(rack, index, s)].append((rack, index))
    phases = {}
    for big, members in classes.items():
        offset = 0.5 / max(1, len(members)) if big else 0.0  # bigs fall between smalls
        for rank, (rack, index) in enumerate(members):
            phases[node_id(rack, index)] = rank / len(members) + offset
    return phases


FLEETS_HELP = "fleets as NODES[:PER_RACK], comma-separated (PER_RACK: nodes per rack, default NODES/10: ten racks)"


def parse_fleets(text: str) -> list[tuple[int, int]]:
    """``--fleets`` wherever it is taken (bench, sizing): ``1000,10000:1000`` is 1,000 nodes in
    ten racks of 100 and 10,000 nodes in racks of 1,000; 1-1,000 nodes a rack, 1-128 racks."""
    pairs: list[tuple[int, int]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            numbers = [int(x) for x in item.split(":")]
        except ValueError:
            raise UsageError(f"--fleets takes NODES[:PER_RACK] separated by commas, got {item!r}") from None
        if len(numbers) == 1 and numbers[0] % 10 == 0:
            numbers.append(numbers[0] // 10)
        if len(numbers) != 2 or not 1 <= numbers[1] <= 1000 or numbers[0] % numbers[1] or not 1 <= numbers[0] // numbers[1] <= 128:
            raise UsageError(
                f"--fleets: {item} is not NODES[:PER_RACK] with 1-1,000 nodes per rack and 1-128 racks (NODES alone: a multiple of 10)"
            )
        pairs.append((numbers[0], numbers[1]))
    if not pairs:
        raise UsageError("--fleets: name at least one fleet")
    return pairs
