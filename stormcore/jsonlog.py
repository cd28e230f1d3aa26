"""Append-only JSON-lines logs that rotate.

The lab's logs (the fault event log, the responders' journal, the pages) grow with every lease
and every page. Each is one file that rotates once it passes ``max_bytes``: ``name`` becomes
``name.1`` (``name.1`` becomes ``name.2`` …), and the oldest beyond ``keep`` generations is
dropped. A reader of the whole log reads the generations oldest first. A line cut short by a
crash is skipped, never fatal. (A game's desk reads none of them back: it keeps what it wrote.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MAX_BYTES = 8 * 1024 * 1024
KEEP = 3


def generations(path: Path, keep: int = KEEP) -> list[Path]:
    """The log's files, oldest first (those that exist)."""
    older = [path.with_name(f"{path.name}.{n}") for n in range(keep, 0, -1)]
    return [p for p in [*older, path] if p.exists()]


def rotate(path: Path, keep: int = KEEP) -> None:
    for n in range(keep, 0, -1):
        older = path.with_name(f"{path.name}.{n}")
        if n == keep:
            older.unlink(missing_ok=True)
        else:
            newer = path.with_name(f"{path.name}.{n + 1}")
            if older.exists():
                older.replace(newer)
    if path.exists():
        path.replace(path.with_name(f"{path.name}.1"))


def append(
    path: Path, entries: list[dict[str, Any]] | dict[str, Any], max_bytes: int = MAX_BYTES, keep: int = KEEP, make_parents: bool = True
) -> None:
    """Append one entry (or several) as JSON lines, rotating first when the file has grown past
    ``max_bytes`` (its folder made first, unless ``make_parents`` is false: a log whose folder is
    gone is then not written). Raises OSError when it cannot be written (the caller decides)."""
    lines = "".join(json.dumps(e) + "\n" for e in ([entries] if isinstance(entries, dict) else entries))
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if path.stat().st_size + len(lines) > max_bytes:
            rotate(path, keep)
    except FileNotFoundError:
        pass
    with path.open("a") as f:
        f.write(lines)


def parse(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut short by a crash: the others still count
        if isinstance(entry, dict):
            out.append(entry)
    return out


def read(path: Path, keep: int = KEEP) -> list[dict[str, Any]]:
    """Every entry of the log, its rotated generations first."""
    out: list[dict[str, Any]] = []
    for p in generations(path, keep):
        try:
            out += parse(p.read_text())
        except OSError:
            continue
    return out
