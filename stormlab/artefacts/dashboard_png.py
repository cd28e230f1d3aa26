"""A PNG of a Grafana dashboard's time-series panels, drawn from Prometheus's own answers.

Grafana is not always there (CI reaches no registry, a laptop may run only Prometheus); the
dashboard JSON still says what to draw. Axes say their units in words; with a blip given, time
is counted from its start (seconds before it negative), and the blip is shaded.
``python -m stormlab.artefacts.dashboard_png DASHBOARD.json OUT.png --prometheus
http://127.0.0.1:9090 --minutes 10 [--shade START,END]``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from stormlab.artefacts.plotting import pyplot

PERCENT = {"percentunit"}
UNITS = {  # Grafana's unit ids, as an axis says them
    "percentunit": "%",
    "s": "seconds",
    "reqps": "requests per second",
    "ops": "per second",
    "short": "",
    "none": "",
}
VARIABLE = re.compile(r"\$\{?(\w+)\}?")


def every_value(expr: str) -> str:
    """A panel's query with each dashboard variable at All (a regex matcher's ``.*``)."""
    return VARIABLE.sub(".*", expr)


def axis_label(panel: dict) -> str:
    """The y axis in words: the panel's own axis label and its unit's name."""
    return _label(panel["fieldConfig"]["defaults"])


def _label(config: dict) -> str:
    unit = config.get("unit") or "none"
    words = UNITS.get(unit, unit.removeprefix("suffix:").strip())
    label = config.get("custom", {}).get("axisLabel", "")
    return label if label and words and words in label else f"{label} ({words})" if label and words else label or words


def right_axis(panel: dict) -> dict[str, dict]:
    """The series a panel's overrides put on a right axis of their own (by display name), each
    with its unit and label as a config like the panel's defaults."""
    out = {}
    for override in panel["fieldConfig"].get("overrides", []):
        props = {p["id"]: p["value"] for p in override.get("properties", [])}
        if override.get("matcher", {}).get("id") == "byName" and props.get("custom.axisPlacement") == "right":
            out[override["matcher"]["options"]] = {"unit": props.get("unit"), "custom": {"axisLabel": props.get("custom.axisLabel", "")}}
    return out


def query_range(prometheus: str, expr: str, start: float, end: float, step: float) -> list[dict]:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prometheus.rstrip('/')}/api/v1/query_range?{params}", timeout=10) as resp:
        return json.loads(resp.read())["data"]["result"]


def legend(template: str, labels: dict) -> str:
    return "".join(labels.get(part, "") if i % 2 else part for i, part in enumerate(template.replace("}}", "{{").split("{{"))) or template


def draw(dashboard: dict, prometheus: str, path: Path, minutes: float, shade: tuple[float, float] | None = None) -> Path:
    plt = pyplot()
    panels = [p for p in dashboard["panels"] if p["type"] == "timeseries"]
    end = time.time()
    start = end - 60 * minutes
    origin = shade[0] if shade else end  # time 0: the blip's start, else now
    cols = 2
    fig, axes = plt.subplots(math.ceil(len(panels) / cols), cols, figsize=(14, 3.2 * math.ceil(len(panels) / cols)), squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        right, twin = right_axis(panel), None
        lines: list[Any] = []
        for target in panel["targets"]:
            for series in query_range(prometheus, every_value(target["expr"]), start, end, 5):
                name = legend(target.get("legendFormat", ""), series["metric"])
                config = right.get(name, panel["fieldConfig"]["defaults"])
                if name in right and twin is None:
                    twin = ax.twinx()
                    twin.set_ylabel(_label(config), fontsize=8)
                on = twin if twin is not None and name in right else ax
                xs = [float(t) - origin for t, _ in series["values"]]
                ys = [float(v) * (100 if config.get("unit") in PERCENT else 1) for _, v in series["values"]]
                color = f"C{len(lines) % 10}"
                lines += on.plot(xs, ys, lw=1.5, label=name, color=color)
        if shade:
            ax.axvspan(0, shade[1] - shade[0], color="#f39c12", alpha=0.3, lw=0)
        ax.set_title(panel["title"], fontsize=10)
        ax.set_ylabel(axis_label(panel), fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(handles=lines, loc="upper left", fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("seconds from the blip's start" if shade else "seconds before now")
    fig.suptitle(dashboard["title"] + (" (blip shaded)" if shade else ""))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dashboard", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--prometheus", default="http://127.0.0.1:9090")
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--shade", help="unix times START,END of a fault to shade")
    args = p.parse_args(argv)
    shade = None
    if args.shade:
        start, end = (float(x) for x in args.shade.split(","))
        shade = (start, end)
    print(draw(json.loads(args.dashboard.read_text()), args.prometheus, args.out, args.minutes, shade))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
