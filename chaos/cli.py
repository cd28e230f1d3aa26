"""`stormlab chaos …`: ask the lab's link proxy for a fault lease (it reverts by itself)."""
from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.request

from services.common.settings import SettingsError, parse_duration
from services.launcher import LabError, running

MAX_DURATION_S = 600.0


class ChaosError(LabError):
    """Bad fault request: exit code 2, nothing changed."""


def parse_racks(text: str, racks_total: int) -> list[int]:
    """``3`` means three racks (0, 1, 2); ``2,5,7`` names them."""
    try:
        if "," not in text:
            count = int(text)
            if not 1 <= count <= racks_total:
                raise ChaosError(f"--racks {count}: the lab has {racks_total} racks")
            return list(range(count))
        chosen = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ChaosError(f"--racks must be a count or a comma list of rack numbers, got {text!r}") from None
    unknown = [r for r in chosen if not 0 <= r < racks_total]
    if unknown or len(set(chosen)) != len(chosen) or not chosen:
        raise ChaosError(f"--racks {text}: racks are numbered 0..{racks_total - 1}, each at most once")
    return chosen


def _proxy_url() -> tuple[str, int]:
    state = running()
    if not state:
        raise ChaosError("no lab is up: start one with `stormlab up`")
    return state["components"]["linkproxy"]["url"], int(state["settings"]["STORMLAB_RACKS"])


def _call(method: str, url: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise ChaosError(json.loads(exc.read() or b"{}").get("message", str(exc))) from None
    except OSError as exc:
        raise LabError(f"the link proxy did not answer: {exc}") from None


def blip(racks: list[int], duration_s: float, url: str) -> dict:
    return _call("POST", f"{url}/faults", {"fault": "blip", "racks": racks, "duration_s": duration_s})


def add_parser(sub: argparse._SubParsersAction) -> None:
    chaos = sub.add_parser("chaos", help="inject faults into the running lab (each reverts by itself)")
    faults = chaos.add_subparsers(dest="fault", required=True)
    b = faults.add_parser("blip", help="cut racks off from the metadata service for a while (a real TCP black hole)")
    b.add_argument("--racks", default="3", help="how many racks (3 = racks 0,1,2) or which (2,5,7); default 3")
    b.add_argument("--duration", required=True, help=f"how long, e.g. 5s or 500ms (at most {MAX_DURATION_S:.0f}s)")
    faults.add_parser("list", help="active faults and their time left")
    faults.add_parser("halt", help="revert every fault now")


def run(args: argparse.Namespace) -> int:
    url, racks_total = _proxy_url()
    if args.fault == "list":
        faults = _call("GET", f"{url}/faults")["faults"]
        for f in faults:
            print(f"#{f['id']} {f['fault']} racks {f['racks']}: {f['left_s']:.1f}s left")
        if not faults:
            print("no active faults")
        return 0
    if args.fault == "halt":
        print(f"halted {_call('DELETE', f'{url}/faults')['halted']} fault(s)")
        return 0
    try:
        duration = parse_duration(args.duration)
    except SettingsError as exc:
        raise ChaosError(str(exc)) from None
    if not 0 < duration <= MAX_DURATION_S:
        raise ChaosError(f"--duration must be more than 0 and at most {MAX_DURATION_S:.0f}s")
    lease = blip(parse_racks(args.racks, racks_total), duration, url)
    print(f"blip #{lease['id']}: racks {lease['racks']} cannot reach the metadata service for {duration:g}s; "
          "the link proxy reverts it by itself")
    return 0
