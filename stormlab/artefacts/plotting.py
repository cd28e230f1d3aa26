"""matplotlib, drawing without a screen, when it is installed. The lab image leaves it out (the
services draw nothing); where charts are drawn, ``pip install 'stormlab[charts]'`` (the
Makefile's virtualenv has it)."""

from __future__ import annotations

from typing import Any

from stormcore.errors import UsageError
from stormcore.later import Later

matplotlib = Later("matplotlib")  # imported at the first chart: a command that draws none never pays for it
_pyplot = Later("matplotlib.pyplot")
_colors = Later("matplotlib.colors")
_lines = Later("matplotlib.lines")
_patches = Later("matplotlib.patches")


def pyplot() -> Any:
    """matplotlib.pyplot, drawing without a screen, or a clear error saying how to get it."""
    if not matplotlib.installed:
        raise UsageError("drawing charts needs matplotlib: pip install 'stormlab[charts]' (the lab image leaves it out)")
    matplotlib.use("Agg")
    return _pyplot.load()


def colormap(name: str, colors: list[str]) -> Any:
    pyplot()
    return _colors.LinearSegmentedColormap.from_list(name, colors)


def patch(**style: Any) -> Any:
    """A legend entry that is a coloured square (or a frame)."""
    pyplot()
    return _patches.Patch(**style)


def mark(**style: Any) -> Any:
    """A legend entry that is a marker alone."""
    pyplot()
    return _lines.Line2D([], [], ls="", **style)
