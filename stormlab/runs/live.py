"""The live points every command runs (sweep, certify, the guard, the bench's herd): one home.

A live point is a lab of the point's settings brought up, told the demo's story (its blip at the
moment of the racks' renewal schedule the model blips at) and brought down: ``judge_live``. A
sample of them runs one after another, an INVALID run (the host shaped it) again, each result
appended as it comes to a CSV file and stamped with the code it ran (``commit``), so that a run
stopped half way resumes and a result measured on other code runs again (``fresh``, ``same_code``).
Commands import these from here, never from one another.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import dataclasses
import functools
import hashlib
import io
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from stormcore.commandline import deprecated
from stormcore.settings import LabSettings
from stormlab.engine import launcher
from stormlab.model.grid import SETTLE_S, Point, Verdict, agreement, blip_phase
from stormlab.runs.demo import Demo

ROOT = Path(__file__).resolve().parents[2]
QUICK: dict[str, Any] = {"racks": 10, "nodes_per_rack": 40, "capacity_cores": 16.0}  # the integration tests' 400-node fleet


# -- results on disk: one CSV row per point, appended as it comes ------------------------------

COLUMNS = [f.name for f in fields(Point)] + [f.name for f in fields(Verdict)]


def read_results(path: Path) -> dict[str, Verdict]:
    if not path.exists():
        return {}
    out = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            try:
                out[row["key"]] = Verdict(
                    row["key"],
                    row["stuck"] == "True",
                    float(row["end_error"]),
                    float(row["peak_error"]),
                    float(row["recovered_after_s"]) if row["recovered_after_s"] else None,
                    row["valid"] == "True",
                    float(row["seconds"]),
                    int(row["seed"]) if row.get("seed") else None,
                    row.get("commit") or "",
                )
            except (KeyError, ValueError, TypeError):
                continue  # a row cut short when a sweep was stopped: that point runs again
    return out


def append_result(path: Path, point: Any, verdict: Verdict) -> None:
    """One live result (a point of any incident, a dataclass: its fields the file has columns for) at the end of ``path``."""
    new = not path.exists() or path.stat().st_size == 0
    if not new:
        with path.open("rb") as f:
            f.seek(-1, 2)
            cut = f.read(1) != b"\n"  # the last row was cut short when a sweep was stopped: it ends here
        if cut:
            with path.open("a") as f:
                f.write("\n")
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, COLUMNS, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerow({**asdict(point), **{k: ("" if v is None else v) for k, v in asdict(verdict).items()}})


# What a result's answer rests on: the code every run executes (the model, the lab's processes, the
# runners) and the libraries it is pinned to; not the tests, the docs or the benchmarks.
CODE = ("*.py", "constraints.txt", ":(exclude)tests", ":(exclude)docs", ":(exclude)benchmarks")


def commit(out: Path | None = None, root: Path | None = None) -> str:
    """The code a point ran: git's short hash, with "+changes:" and a digest of the difference when
    the code (``CODE``, the sweep's own results in ``out`` aside) differed from it."""
    root = root or ROOT

    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=root, capture_output=True, text=True, timeout=10).stdout

    try:
        head, status = git("rev-parse", "--short", "HEAD").strip(), git("status", "--porcelain", "--untracked-files=no", "--", *CODE)
        mine = str(out.resolve().relative_to(root)) + "/" if out is not None and out.resolve().is_relative_to(root) else None
        changed = changed_outside(status, mine)
        digest = hashlib.sha256(git("diff", "HEAD", "--", *changed).encode()).hexdigest()[:8] if changed else ""
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + (f"+changes:{digest}" if changed else "")


@functools.lru_cache(maxsize=256)
def same_code(then: str, now: str, root: Path | None = None) -> bool:
    """Whether a result measured on ``then`` (a :func:`commit` stamp) answers for ``now``: the same
    stamp, or two commits between which no file of ``CODE`` changed. A result with no stamp, or
    one measured on changes that were never committed, answers for its own stamp only."""
    if then == now:
        return True
    if not then or "unknown" in (then, now) or "+" in then or "+" in now:
        return False
    try:
        diff = subprocess.run(["git", "diff", "--quiet", then, now, "--", *CODE], cwd=root or ROOT, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return diff.returncode == 0  # 1: the code differs; 128: a commit this clone does not have


def fresh(path: Path, say: Callable[[str], None], root: Path | None = None) -> dict[str, Verdict]:
    """The results in ``path`` that answer for the code here now; the others (measured on code
    that has changed since, or on no known code) are said, taken out of the file, and run again."""
    results = read_results(path)
    now = commit(path.parent, root)
    stale = {k: v.commit or "no commit" for k, v in results.items() if not same_code(v.commit, now, root)}
    if not stale:
        return results
    counts = Counter(stale.values())
    said = ", ".join(f"{n} on {c}" for c, n in counts.most_common())
    say(f"{path.name}: {len(stale)} of {len(results)} results were measured on other code ({said}; this is {now}): they run again")
    kept = {k: v for k, v in results.items() if k not in stale}
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("key") in kept and (r.get("commit") or "") == kept[r["key"]].commit]
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    partial.replace(path)  # all at once: a sweep stopped here finds the old file or the new one
    return kept


def changed_outside(status: str, mine: str | None) -> list[str]:
    """The paths ``git status --porcelain`` lists (two status letters, a space, the path; the
    first letter may be a space, so the text is not stripped), but those under ``mine``."""
    paths = [line[3:] for line in status.splitlines() if line.strip()]
    return [p for p in paths if not (mine and p.startswith(mine))]


def judge_live(base: LabSettings, point: Point, watch_periods: float, speed: float, out: io.TextIOBase | None = None) -> Verdict:
    """One point on real processes: a lab of the point's settings, the demo's story with its blip at
    the moment of the racks' renewal schedule where the model blips, and down."""
    started = time.monotonic()
    s = point.settings(base)
    state = launcher.up(s.sped_up(speed), base_port=0)
    try:
        demo = Demo(
            state,
            out or io.StringIO(),
            SETTLE_S,
            point.blip_s,
            watch_periods * s.renewal_period_s,
            str(point.blip_racks),
            blip_phase=blip_phase(s, point.phase),
        )
        r = asyncio.run(demo.run())
    finally:
        launcher.down()
    if not r["valid"]:
        _say(f"  {point.key}: the host shaped the run: {'; '.join(r['invalid_reasons'])}")
    return Verdict(
        point.key,
        bool(r["storm_holds"]),
        r["last_period_error_ratio"] or 0.0,
        r["peak_error_ratio"] or 0.0,
        r["recovery_s"],
        valid=bool(r["valid"]),
        seconds=time.monotonic() - started,
        seed=s.seed,
    )


def run_live(
    base: LabSettings,
    sample: Sequence[Any],
    path: Path,
    watch_periods: float,
    speed: float,
    say: Callable[[str], None],
    judge: Callable[..., Verdict] = judge_live,
    retries: int = 1,
) -> dict[str, Verdict]:
    """Each point of ``sample`` not in ``path`` yet, live, one after another; a run the host shaped
    (INVALID: a loop late, a core stolen) is run again up to ``retries`` times, and the last run is
    the one kept (an INVALID one is then left out of the agreement, as before). A result measured
    on other code runs again."""
    done = fresh(path, say)
    todo = [p for p in sample if p.key not in done]
    say(f"live: {len(sample)} points, {len(sample) - len(todo)} already in {path}, {len(todo)} to run one after another")
    for n, point in enumerate(todo, 1):
        say(f"  live {n}/{len(todo)}  {point.key}: a lab of its own at speed {speed:g} …")
        for attempt in range(retries + 1):
            if attempt:
                say(f"  live {n}/{len(todo)}  {point.key}: INVALID (the host shaped it), run again ({attempt} of {retries}) …")
            verdict = judge(base, point, watch_periods, speed)
            if verdict.valid:
                break
        verdict = dataclasses.replace(verdict, commit=commit(path.parent))
        append_result(path, point, verdict)
        done[point.key] = verdict
        say(
            f"  live {n}/{len(todo)}  {point.key}: {'stuck' if verdict.stuck else 'recovered'} "
            f"({100 * verdict.end_error:.1f}% at the end{'' if verdict.valid else ', INVALID run'}, {verdict.seconds:.0f}s)"
        )
    return done


# -- the link mechanism the live points run through --------------------------------------------

LINKS = ("auto", "kernel", "namespace", "proxy")  # --link-cut; auto: the kernel's links where the lab may, as `up` chooses
MEASURED_LINKS = ("kernel", "namespace", "proxy")


def live_link(base: LabSettings) -> LabSettings:
    """``base`` with its link mechanism settled before any live point runs (``auto`` chosen as the
    launcher chooses): a kernel asked for where the lab may not cut in it is refused now, not an hour
    into the sweep, and the live results are filed under the mechanism that carried them."""
    settled, _ = launcher.choose(base)
    return settled


def add_link_cut(p: argparse.ArgumentParser, kept: str) -> None:
    """--link-cut (and the old --link) for a command that runs live points; ``kept`` says where their results go."""
    p.add_argument(
        "--link-cut",
        dest="link",
        choices=LINKS,
        default="auto",
        help="who carries and cuts the live labs' links: the kernel (root, iptables), the link proxy, or auto, the kernel where "
        f"the lab may (default auto); {kept}",
    )
    deprecated(p, "--link", "--link-cut", dest="link", choices=LINKS)


def certify_live(
    c: dict[str, Any],
    sample: Sequence[Any],
    readings: dict[str, Any],
    path: Path,
    watch: float,
    speed: float,
    say: Callable[[str], None],
    judge: Callable[..., Verdict],
    link: str,
) -> dict[str, Any]:
    """A policy's live sample beside its model verdicts, for any incident's certificate: each point
    not in ``path`` yet (or measured on other code) run live by ``judge``, then the two side by side
    and their agreement."""
    live = run_live(c["settings"], sample, path, watch, speed, say, judge)
    model = {k: r.verdict for k, r in readings.items()}
    return {
        "speed": speed,
        "link": link,
        "points": [{"key": p.key, "model": asdict(model[p.key]), "live": asdict(live[p.key])} for p in sample if p.key in live],
        "agreement": agreement(sample, model, live),
    }


def live_path(out: Path, link: str) -> Path:
    """Where the live results measured through ``link`` (kernel, namespace or proxy) are kept."""
    return out / f"live-{link}.csv"


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
