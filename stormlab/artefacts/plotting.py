"""matplotlib, drawing without a screen, when it is installed. The lab image leaves it out (the
services draw nothing); where charts are drawn, ``pip install 'stormlab[charts]'`` (the
Makefile's virtualenv has it)."""

from __future__ import annotations

from typing import Any

from stormcore.errors import UsageError

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as _pyplot
    from matplotlib.colors import LinearSegmentedColormap as _Colormap
    from matplotlib.lines import Line2D as _Line2D
    from matplotlib.patches import Patch as _Patch
except ImportError:  # pragma: no cover - the lab image
    _pyplot = _Colormap = _Line2D = _Patch = None  # type: ignore[assignment,misc]


def pyplot() -> Any:
    """matplotlib.pyplot, or a clear error saying how to get it."""
    if _pyplot is None:
        raise UsageError("drawing charts needs matplotlib: pip install 'stormlab[charts]' (the lab image leaves it out)")
    return _pyplot


def colormap(name: str, colors: list[str]) -> Any:
    pyplot()
    return _Colormap.from_list(name, colors)


def patch(**style: Any) -> Any:
    """A legend entry that is a coloured square (or a frame)."""
    pyplot()
    return _Patch(**style)


def mark(**style: Any) -> Any:
    """A legend entry that is a marker alone."""
    pyplot()
    return _Line2D([], [], ls="", **style)
