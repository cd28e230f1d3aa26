"""The sweep's map (PNG): a row per fix, a column per trigger duration, trigger size across,
membership growth up; red where a blip leaves the lab stuck, green where it recovers, the live
sample marked, and a legend that says so."""

from __future__ import annotations

from pathlib import Path

from stormcore.settings import LabSettings
from stormlab.artefacts.plotting import colormap, mark, patch, pyplot
from stormlab.model.grid import POINT_2015, Grid, Point, Verdict

STUCK = ["#eafaf1", "#f5b7b1", "#c0392b"]  # recovered to stuck


def draw(grid: Grid, base: LabSettings, model: dict[str, Verdict], live: dict[str, Verdict], path: Path) -> Path:
    """One row per panel (the 2015 settings and each fix), one column per blip duration: a page
    tall and README-wide, with a legend, rather than every panel in one row."""
    plt = pyplot()
    rows, cols = len(grid.panels), len(grid.blip_s)
    fig, axes = plt.subplots(rows, cols, figsize=(2.4 * cols + 2.6, 1.35 * rows + 1.6), squeeze=False, sharex=True, sharey=True)
    image = None
    for i, panel in enumerate(grid.panels):
        for j, blip_s in enumerate(grid.blip_s):
            image = _cell(plt, axes[i][j], grid, base, model, live, panel, blip_s)
            if i == 0:
                axes[i][j].set_title(f"blip of {blip_s:g} s", fontsize=9)
            if j == 0:
                axes[i][j].set_ylabel(f"{panel}\nGSIs per table", fontsize=8)
            if i == rows - 1:
                axes[i][j].set_xlabel("racks blipped", fontsize=8)
    fig.suptitle("Where a blip leaves the lab stuck, per fix", fontsize=11)
    fig.tight_layout(rect=(0, 0, 0.78, 0.98))  # the panels; the right margin holds the legend
    _legend(fig, image)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _cell(plt, ax, grid: Grid, base: LabSettings, model: dict[str, Verdict], live: dict[str, Verdict], panel: str, blip_s: float):
    xs, ys = list(grid.blip_racks), list(grid.gsis)
    errors = [[_error(model, Point(panel, x, blip_s, y)) for x in xs] for y in ys]
    image = ax.imshow(errors, cmap=colormap("stuck", STUCK), vmin=0, vmax=0.7, origin="lower", aspect="auto")
    for a, x in enumerate(xs):
        for b, y in enumerate(ys):
            point = Point(panel, x, blip_s, y)
            verdict = model.get(point.key)
            if point.down_before(base):
                ax.add_patch(plt.Rectangle((a - 0.5, b - 0.5), 1, 1, color="#95a5a6"))
                ax.text(a, b, "D", ha="center", va="center", fontsize=6, color="white", weight="bold")
            elif verdict is not None and verdict.stuck:
                ax.text(a, b, "S", ha="center", va="center", fontsize=6, color="white", weight="bold")
            seen = live.get(point.key)
            if seen is not None and verdict is not None:
                colour, marker = ("#1a5276", "o") if seen.stuck == verdict.stuck else ("black", "X")
                ax.scatter(a, b, s=80, facecolors="none", edgecolors=colour, lw=1.4, marker=marker)
            if (x, blip_s, y) == (POINT_2015["blip_racks"], POINT_2015["blip_s"], POINT_2015["gsis"]):
                ax.add_patch(plt.Rectangle((a - 0.5, b - 0.5), 1, 1, fill=False, ec="#f1c40f", lw=2.0))
    ax.set_xticks(range(len(xs)), [str(x) for x in xs], fontsize=7)
    ax.set_yticks(range(len(ys)), [str(y) for y in ys], fontsize=7)
    return image


def _legend(fig, image) -> None:
    """What the colours and marks say, beside the panels."""
    handles = [
        patch(color=STUCK[-1], label="S: stuck\n(the customers' error\nat the end, in red)"),
        patch(color=STUCK[0], label="recovered"),
        patch(color="#95a5a6", label="D: down before\nany blip"),
        patch(fill=False, ec="#f1c40f", lw=2, label="the 2015 point"),
        mark(marker="o", mfc="none", mec="#1a5276", mew=1.4, label="run live:\nthe same verdict"),
        mark(marker="X", mfc="none", mec="black", mew=1.4, label="run live:\ndisagreed"),
    ]
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.795, 0.955), fontsize=8, frameon=False, labelspacing=0.9)
    if image is not None:
        bar = fig.colorbar(image, cax=fig.add_axes((0.81, 0.12, 0.018, 0.35)))
        bar.set_label("customers' error at the end", fontsize=8)


def _error(model: dict[str, Verdict], point: Point) -> float:
    verdict = model.get(point.key)
    return float("nan") if verdict is None else verdict.end_error
