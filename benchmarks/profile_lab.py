"""Sampling profiles (py-spy) of the lab's busiest processes at a fleet size: what to make cheaper.

    .venv/bin/pip install -c constraints.txt -e '.[profile]'
    .venv/bin/python benchmarks/profile_lab.py --nodes 10000 --speed 0.25 --seconds 30 [--blip]

Starts a lab of its own (10 racks, 4 virtual cores per 100 nodes), waits for every node to serve,
then records rack-00, the link proxy, the metadata service and loadgen side by side for
``--seconds`` (with ``--blip``: from the 2015 blip on, so the herd is in the profile). Prints
each process's top functions by own time (the leaf frame of each sample) and by time inside
(any frame), and replaces the "Profiles" section of docs/benchmarks.md with them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chaos import catalog  # noqa: E402
from stormcore.auth import ensure_token, headers  # noqa: E402
from stormcore.settings import LabSettings, Pace  # noqa: E402
from stormlab import launcher, observe  # noqa: E402
from stormlab.runs.bench import with_section  # noqa: E402

PROCESSES = ("rack-00", "linkproxy", "metadata", "loadgen")
TOP = 8


def top_lines(raw: str) -> tuple[int, list[tuple[str, float]], list[tuple[str, float]]]:
    """py-spy's raw (collapsed) stacks: ``frame;frame;… count`` per line. The samples, the top
    functions by own share (leaf frame) and by inclusive share (anywhere in the stack)."""
    own: collections.Counter[str] = collections.Counter()
    inside: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_short(f) for f in stack.split(";") if f]
        total += n
        if frames:
            own[frames[-1]] += n
        for frame in set(frames):
            inside[frame] += n
    share = lambda c: [(f, n / total) for f, n in c.most_common(TOP)] if total else []  # noqa: E731
    return total, share(own), share(inside)


def _short(frame: str) -> str:
    """``function (path/to/module.py:line)`` as ``function (module.py)``."""
    name, _, where = frame.partition(" (")
    file = where.split(":")[0].rstrip(")")
    return f"{name} ({'/'.join(Path(file).parts[-2:])})" if file else name


async def serving(state: dict) -> None:
    async with aiohttp.ClientSession() as session:
        await observe.wait_serving(session, state, 600)


async def blip(state: dict, directory: Path, speed: float) -> None:
    proxy = state["components"]["linkproxy"]["url"]
    body = catalog.request("blip", {"racks": [0, 1, 2], "duration": Pace(speed).wall(5.0)}).body
    auth = headers(ensure_token(directory))
    async with aiohttp.ClientSession() as session, session.post(f"{proxy}/faults", json=body, headers=auth) as resp:
        resp.raise_for_status()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=10_000)
    p.add_argument("--speed", type=float, default=0.25)
    p.add_argument("--seconds", type=int, default=30)
    p.add_argument("--blip", action="store_true", help="profile from the 2015 blip on (the herd)")
    p.add_argument("--out", type=Path, default=ROOT / "docs/benchmarks.md")
    args = p.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        raise SystemExit("py-spy is not installed: pip install -c constraints.txt -e '.[profile]'")
    directory = Path(tempfile.mkdtemp(prefix="stormlab-profile-"))
    settings = LabSettings(racks=10, nodes_per_rack=args.nodes // 10, capacity_cores=4.0 * args.nodes / 100).sped_up(args.speed)
    state = launcher.up(settings, base_port=0, wait_s=600, directory=directory)
    results = {}
    try:
        asyncio.run(serving(state))
        time.sleep(settings.renewal_period_s)
        if args.blip:
            asyncio.run(blip(state, directory, args.speed))
        procs = {}
        for name in PROCESSES:
            out = directory / f"{name}.txt"
            cmd = [spy, "record", "--nonblocking", "--format", "raw", "-r", "50", "-d", str(args.seconds)]
            cmd += ["-o", str(out), "--pid", str(state["components"][name]["pid"])]
            procs[name] = (subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), out)
        for name, (proc, out) in procs.items():
            _, err = proc.communicate(timeout=args.seconds + 60)
            if proc.returncode != 0 or not out.exists():
                raise SystemExit(f"py-spy failed on {name}: {err.decode()[-500:]}")
            results[name] = top_lines(out.read_text())
    finally:
        launcher.down(directory)
    when = "from the blip on (the herd and the storm)" if args.blip else "in the healthy baseline"
    lines = [
        "## Profiles",
        "",
        f"`benchmarks/profile_lab.py --nodes {args.nodes} --speed {args.speed:g} --seconds {args.seconds}"
        f"{' --blip' if args.blip else ''}` on {time.strftime('%Y-%m-%d')}: py-spy at 50 Hz for {args.seconds} s {when}. "
        "Own: the share of samples in which the function was the one running; inside: anywhere in the stack.",
        "",
    ]
    for name, (total, own, inside) in results.items():
        lines += [f"### {name} ({total} samples)", "", "| own | function | | inside | function |", "| --- | --- | --- | --- | --- |"]
        for (f1, s1), (f2, s2) in zip(own, inside, strict=False):
            lines.append(f"| {s1:.0%} | `{f1}` | | {s2:.0%} | `{f2}` |")
        lines.append("")
    text = "\n".join(lines)
    print(text)
    existing = args.out.read_text() if args.out.exists() else "# stormlab benchmarks\n\n"
    args.out.write_text(with_section(existing, "## Profiles", text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
