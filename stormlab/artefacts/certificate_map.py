"""A certificate's map (PNG): one panel per policy, racks blipped up, blip duration across; red
where the blip leaves the lab stuck, green where it recovers; the 2015 trigger framed, the
triggers a policy must hold shaded, the live points marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stormlab.artefacts.plotting import colormap, mark, patch, pyplot
from stormlab.artefacts.sweep_map import STUCK
from stormlab.model.certificate import TRIGGER_BLIPS, TRIGGER_RACKS
from stormlab.model.grid import POINT_2015, Point


def draw(doc: dict[str, Any], path: Path) -> Path:
    plt = pyplot()
    certs = doc["certificates"]
    fig, axes = plt.subplots(1, len(certs), figsize=(2.9 * len(certs) + 2.4, 3.6), squeeze=False, sharey=True)
    image = None
    for ax, c in zip(axes[0], certs, strict=True):
        image = _panel(plt, ax, c)
    axes[0][0].set_ylabel("racks blipped")
    fig.suptitle(f"Where a blip leaves the lab stuck, per retry policy ({doc['fleet']}, seed {doc['seed']})", fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.80, 0.95))
    handles = [
        patch(color=STUCK[-1], label="stuck"),
        patch(color=STUCK[0], label="recovered"),
        patch(fill=False, ec="#f1c40f", lw=2, label="the 2015 trigger"),
        patch(fill=False, ec="#34495e", ls="--", lw=1, label="must hold\n(2015 and smaller)"),
        mark(marker="o", mfc="none", mec="#1a5276", mew=1.4, label="live: the same"),
        mark(marker="X", mfc="none", mec="black", mew=1.4, label="live: disagreed"),
    ]
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.81, 0.9), fontsize=8, frameon=False, labelspacing=0.9)
    if image is not None:
        fig.colorbar(image, cax=fig.add_axes((0.83, 0.12, 0.015, 0.3))).set_label("error at the end", fontsize=7)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _panel(plt: Any, ax: Any, c: dict[str, Any]) -> Any:
    gsis = POINT_2015["gsis"]
    errors = [[c["points"][Point("2015", r, b, gsis).key]["end_error"] for b in TRIGGER_BLIPS] for r in TRIGGER_RACKS]
    image = ax.imshow(errors, cmap=colormap("stuck", STUCK), vmin=0, vmax=0.7, origin="lower", aspect="auto")
    live = {x["key"]: x for x in c.get("live", {}).get("points", []) if x["live"]["valid"]}
    for i, r in enumerate(TRIGGER_RACKS):
        for j, b in enumerate(TRIGGER_BLIPS):
            key = Point("2015", r, b, gsis).key
            if c["points"][key]["stuck"]:
                ax.text(j, i, "S", ha="center", va="center", fontsize=7, color="white", weight="bold")
            if key in live:
                same = live[key]["live"]["stuck"] == live[key]["model"]["stuck"]
                ax.scatter(j, i, s=90, facecolors="none", edgecolors="#1a5276" if same else "black", lw=1.4, marker="o" if same else "X")
            if (r, b) == (POINT_2015["blip_racks"], POINT_2015["blip_s"]):
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec="#f1c40f", lw=2.0))
    held_r = sum(r <= POINT_2015["blip_racks"] for r in TRIGGER_RACKS)
    held_b = sum(b <= POINT_2015["blip_s"] for b in TRIGGER_BLIPS)
    ax.add_patch(plt.Rectangle((-0.5, -0.5), held_b, held_r, fill=False, ec="#34495e", ls="--", lw=1))
    ax.set_xticks(range(len(TRIGGER_BLIPS)), [f"{b:g}s" for b in TRIGGER_BLIPS], fontsize=7)
    ax.set_yticks(range(len(TRIGGER_RACKS)), [str(r) for r in TRIGGER_RACKS], fontsize=7)
    ax.set_xlabel("blip", fontsize=8)
    title = c["policy"] + (" (ref.)" if c["reference"] else "")
    ax.set_title(f"{title[:34]}\n{c['verdict'].upper()}", fontsize=8, color="#c0392b" if c["verdict"] == "stuck" else "#1e8449")
    return image
