"""A generated block of a Markdown page: the tables the sweep and the mitigations write into the README."""

from __future__ import annotations

import re
from pathlib import Path

from stormcore.errors import UsageError


def replace_block(path: Path, marker: str, text: str) -> None:
    """Put ``text`` between ``<!-- marker -->`` and ``<!-- /marker -->`` in ``path``."""
    doc = path.read_text()
    pattern = re.compile(rf"(<!-- {re.escape(marker)} -->\n).*?(<!-- /{re.escape(marker)} -->)", re.S)
    if not pattern.search(doc):
        raise UsageError(f"{path} has no <!-- {marker} --> … <!-- /{marker} --> block")
    path.write_text(pattern.sub(lambda m: m.group(1) + text.rstrip() + "\n" + m.group(2), doc))
