"""Names of racks and nodes, shared by every component."""
from __future__ import annotations

import re

_NODE = re.compile(r"^r(\d{2,})n(\d{3,})$")


def node_id(rack: int, index: int) -> str:
    return f"r{rack:02d}n{index:03d}"


def rack_of(node: str) -> int:
    match = _NODE.match(node)
    if not match:
        raise ValueError(f"not a node id: {node!r}")
    return int(match.group(1))


def is_node_id(text: str) -> bool:
    return bool(_NODE.match(text))


def renewal_order(rack: int, index: int, racks: int) -> int:
    """A node's place in the fleet's renewal cycle: racks interleave, so every rack renews
    evenly over the whole period rather than all in one burst."""
    return index * racks + rack
