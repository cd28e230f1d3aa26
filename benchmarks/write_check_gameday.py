"""The write checker through the whole 2015 game day: unique writes while the storm, the pause,
the staged readmission and the Monday tail play out, and a rack SIGKILLed every 20 s; and the
queue checker beside it (every acknowledged send received at least once), the queues service
SIGKILLed every 30 s.

    .venv/bin/python benchmarks/write_check_gameday.py [--rate 40] [--kill-every 20s] [--kill-queues-every 30s] [--seed 2015]

Starts `stormlab scenario run scenarios/dynamodb-2015.yaml --autopilot --keep-lab` in its own
state directory, writes until the game day ends (about 6 minutes), reads every item back, stops
the lab, and prints the counts as JSON (also to reports/write-check-*.json). Exit 1 if anything
acknowledged was lost or anything refused was stored. Nothing else may run meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from stormcore import incidents
from stormcore.labstate import running
from stormcore.settings import parse_duration
from stormlab.engine import launcher
from stormlab.runs import queuecheck, writecheck

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=40.0)
    parser.add_argument("--kill-every", default="20s")
    parser.add_argument("--kill-queues-every", default="30s")
    parser.add_argument("--seed", type=int, default=2015)
    args = parser.parse_args()
    state_dir = Path(tempfile.mkdtemp(prefix="stormlab-writecheck-")) / "state"
    os.environ["STORMLAB_STATE_DIR"] = str(state_dir)
    argv = [str(Path(sys.executable).with_name("stormlab")), "scenario", "run", f"scenarios/{incidents.FIRST.scenarios[0]}", "--autopilot"]
    argv += ["--keep-lab", "--base-port", "0", "--seed", str(args.seed), "--out", str(state_dir.parent / "runs")]
    game = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        while (state := running()) is None or "metadata" not in state.get("components", {}):
            if game.poll() is not None:
                raise SystemExit(f"the game day ended before its lab was up (exit {game.returncode})")
            time.sleep(0.5)
        time.sleep(3)  # every node serving before the first write
        print(f"writing at {args.rate:g}/s while the game day plays; a rack killed every {args.kill_every}", flush=True)
        started = time.monotonic()

        async def until_the_game_ends() -> tuple[writecheck.Verdict, queuecheck.QueueVerdict]:
            racks = writecheck.rack_killer(state, parse_duration(args.kill_every), args.seed)
            queues = writecheck.killer(state, parse_duration(args.kill_queues_every), args.seed, ["queues"])
            over = lambda: game.poll() is not None  # noqa: E731  writes stop when the game day's process ends (its lab stays for the read-back)
            return await asyncio.gather(
                writecheck.check(state, 24 * 3600, args.rate, racks, tag="gameday", stop=over),
                queuecheck.check_queues(state, 24 * 3600, args.rate / 4, queues, tag=f"gameday-{int(time.time())}", stop=over),
            )

        result, queued = asyncio.run(until_the_game_ends())
        out, _ = game.communicate()
    finally:
        if game.poll() is None:
            game.terminate()
            game.wait()
        launcher.down(state_dir)
    outcome = next((line for line in out.splitlines() if line.startswith("DynamoDB")), "the game day printed no outcome")
    ok = result.ok and queued.ok
    report = asdict(result) | {"queues": asdict(queued) | {"ok": queued.ok}, "ok": ok, "game_day": outcome.strip()}
    report["writing_s"] = round(time.monotonic() - started)
    (ROOT / "reports").mkdir(exist_ok=True)
    (ROOT / "reports" / f"write-check-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
