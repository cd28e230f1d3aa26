"""The sweep's map (PNG): one panel per fix and trigger duration, trigger size across, membership
growth up; red where a blip leaves the lab stuck, green where it recovers, the live sample marked."""

from __future__ import annotations

from pathlib import Path

from stormcore.settings import LabSettings
from stormlab.artefacts.plotting import colormap, pyplot
from stormlab.model.grid import POINT_2015, Grid, Point, Verdict

STUCK = ["#eafaf1", "#f5b7b1", "#c0392b"]  # recovered to stuck


def draw(grid: Grid, base: LabSettings, model: dict[str, Verdict], live: dict[str, Verdict], path: Path) -> Path:
    plt = pyplot()
    rows, cols = len(grid.blip_s), len(grid.panels)
    fig, axes = plt.subplots(rows, cols, figsize=(max(7.5, 2.1 * cols + 1.2), 2.0 * rows + 1.4), squeeze=False, sharex=True, sharey=True)
    xs, ys = list(grid.blip_racks), list(grid.gsis)
    for i, blip_s in enumerate(grid.blip_s):
        for j, panel in enumerate(grid.panels):
            ax = axes[i][j]
            errors = [[_error(model, Point(panel, x, blip_s, y)) for x in xs] for y in ys]
            ax.imshow(errors, cmap=colormap("stuck", STUCK), vmin=0, vmax=0.7, origin="lower", aspect="auto")
            for a, x in enumerate(xs):
                for b, y in enumerate(ys):
                    point = Point(panel, x, blip_s, y)
                    verdict = model.get(point.key)
                    if point.down_before(base):
                        ax.add_patch(plt.Rectangle((a - 0.5, b - 0.5), 1, 1, color="#95a5a6"))
                        ax.text(a, b, "D", ha="center", va="center", fontsize=7, color="white", weight="bold")
                    elif verdict is not None and verdict.stuck:
                        ax.text(a, b, "S", ha="center", va="center", fontsize=7, color="white", weight="bold")
                    seen = live.get(point.key)
                    if seen is not None and verdict is not None:
                        agree = seen.stuck == verdict.stuck
                        colour, marker = ("#1a5276", "o") if agree else ("black", "X")
                        ax.scatter(a, b, s=120, facecolors="none", edgecolors=colour, lw=1.6, marker=marker)
                    if (x, blip_s, y) == (POINT_2015["blip_racks"], POINT_2015["blip_s"], POINT_2015["gsis"]):
                        ax.add_patch(plt.Rectangle((a - 0.5, b - 0.5), 1, 1, fill=False, ec="#f1c40f", lw=2.2))
            ax.set_xticks(range(len(xs)), [str(x) for x in xs], fontsize=7)
            ax.set_yticks(range(len(ys)), [str(y) for y in ys], fontsize=7)
            if i == 0:
                ax.set_title(panel, fontsize=8)
            if j == 0:
                ax.set_ylabel(f"blip {blip_s:g}s\nGSIs per table", fontsize=8)
            if i == rows - 1:
                ax.set_xlabel("racks blipped", fontsize=8)
    fig.suptitle(
        "Where a blip leaves the lab stuck (S; red: the customers' error at the end) or recovered (green); "
        "D: down before any blip (the biggest membership takes longer than the allowance)\n"
        "Yellow: the 2015 point. o: run live, same verdict; X: live disagreed",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _error(model: dict[str, Verdict], point: Point) -> float:
    verdict = model.get(point.key)
    return float("nan") if verdict is None else verdict.end_error
