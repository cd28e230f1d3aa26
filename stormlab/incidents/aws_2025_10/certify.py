"""`stormlab certify --profile aws-2025-10 POLICY…`: would this retry policy, as what a lease manager
host does with work that timed out, have got EC2's leases back in October 2025, and from which
trigger on not?

The policies are given as for 2015 (stormlab/runs/certify.py). Each, beside two references (DWFM's
re-queue at once, and full jitter), meets the suite of stormlab/incidents/aws_2025_10/certificate.py in the
reference model (the lab's own cores in virtual time, a second or so a point); then a seeded sample
runs live (a lab of the profile's, the endpoint's record emptied and repaired, watched; about 2
minutes each at speed 4), kept in --out and reused while the code is the same.

A policy's own ``attempt_timeout_s`` is its item timeout (``lease_timeout_s``): a timeout long
enough is one of the ways out the model's threshold map shows.
"""

from __future__ import annotations

import argparse
import html
import io
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from stormcore.errors import UsageError
from stormcore.incidents.aws_2025_10 import NAME
from stormcore.settings import LabSettings, profile
from stormlab.incidents.aws_2025_10 import certificate as lc
from stormlab.incidents.aws_2025_10 import demo as lease_demo
from stormlab.model.grid import Verdict
from stormlab.runs import certify, live

LEASES = certify.Story("lease_retry_policy", lc.REFERENCES)  # what a lease manager host does with its timed-out work
LIVE_SPEED = 4.0  # the live points' speed when --speed is auto: the ways out's runs (docs/incidents/aws-2025-10.md)
SETTLE_S = 20.0  # profile seconds of a healthy lab before the record is emptied


def judge_live(base: LabSettings, point: lc.LeasePoint, watch_s: float, speed: float) -> Verdict:
    """One point on real processes: a lab of the profile's with the point's fleet and policy, the
    record empty for the point's outage, then watched as the model watches."""
    started = time.monotonic()
    settings = base.replace(lease_droplets=point.droplets).sped_up(speed)
    result, story = lease_demo.measure(settings, 0, SETTLE_S, point.outage_s, watch_s, (), io.StringIO())
    repair, end = result["repair_s"], story.samples[-1].t if story.samples else result["repair_s"]
    last = [s.launch_error_ratio for s in story.samples if s.t >= end - lc.LAST_S and s.launch_error_ratio is not None]
    after = [s.launch_error_ratio for s in story.samples if s.t >= repair and s.launch_error_ratio is not None]
    back = next((s.t for s in story.samples if s.t >= repair and (s.leases_active or 0) >= 0.99 * point.droplets), None)
    end_error = sum(last) / len(last) if last else 1.0
    return Verdict(
        point.key,
        end_error >= lc.STUCK,
        end_error,
        max(after, default=end_error),
        None if back is None else round(back - repair, 1),
        valid=result["valid"],
        seconds=time.monotonic() - started,
        seed=base.seed,
    )


def certify_live(
    c: dict[str, Any],
    points: Sequence[lc.LeasePoint],
    readings: dict[str, lc.Reading],
    count: int,
    seed: int,
    speed: float,
    out: Path,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """The policy's live sample (resumed from --out while the code is the same), beside the model."""
    path = out / f"{NAME}-seed{seed}" / c["key"] / "live.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    sample = lc.live_sample(points, count, seed, c["label"])
    return live.certify_live(c, sample, readings, path, lc.WATCH_S, speed, say, judge_live, "dns")  # the trigger: the record, not a link


def page(doc: dict[str, Any]) -> str:
    """certificate.html: one self-contained page, the map of each policy as a table."""
    e = html.escape
    rows = []
    for c in doc["certificates"]:
        a = c["at_account"]
        live = c.get("live", {}).get("agreement")
        cells = (
            e(c["policy"]) + (" <small>(reference)</small>" if c["reference"] else ""),
            f"<b class='{c['verdict']}'>{c['verdict']}</b>",
            e(lc.trigger_words(c["largest_trigger_survived"])),
            "-" if a["recovered_after_s"] is None else f"{a['recovered_after_s']:g} s",
            f"{a['end_error']:.0%}",
            f"{a['thrown_away_per_droplet']:.1f}",
            str(a["peak_queue"]),
            f"{a['leases_back']:.0%}",
            f"{c['timeout_s']:g} s",
            f"{live['agree']}/{live['points']}" if live and live["points"] else "-",
        )
        rows.append("<tr>" + "".join(f"<td>{x}</td>" for x in cells) + "</tr>")
    maps = "".join(_map_table(c, doc["suite"]) for c in doc["certificates"])
    notes = "".join(
        f"<li><b>{e(c['policy'])}</b> ({e(c['kind'])}): {e('; '.join(c['maps']) or 'as its code says')}</li>" for c in doc["certificates"]
    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>stormlab certificate: {NAME}</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em;max-width:70em}} table{{border-collapse:collapse;margin:.5em 0 1.5em}}
td,th{{border:1px solid #ccc;padding:.3em .6em;text-align:center}} .holds{{color:#1e8449}} .stuck{{color:#c0392b}}
td.s{{background:#c0392b;color:#fff}} td.r{{background:#eafaf1}}</style></head><body>
<h1>Retry policy certificate: the lease manager's collapse (us-east-1, October 2025)</h1>
<p>{e(doc["fleet"])}, seed {doc["seed"]}, code {e(doc["commit"])}. The policy decides what a host does with work that
timed out (DWFM queued it again at once). It <b>holds</b> when {e(doc["holds_means"])}. Figures at the account's trigger:
the seconds from the repair to every lease back, the launch errors over the last minute, the work thrown away (items that
timed out after the repair, per droplet), the longest the queues got, the leases held at the end.</p>
<table><tr><th>policy</th><th>verdict</th><th>largest trigger survived</th><th>leases back after</th>
<th>launch errors at the end</th><th>thrown away a droplet</th><th>peak queue</th><th>leases at the end</th><th>item timeout</th>
<th>live agrees</th></tr>{"".join(rows)}</table>
<h2>The map: stuck (red) or recovered (green), launch errors over the last minute</h2>{maps}
<h2>What each policy is</h2><ul>{notes}</ul>
</body></html>
"""


def _map_table(c: dict[str, Any], suite: dict[str, Any]) -> str:
    head = "".join(f"<th>record empty {o:g} s</th>" for o in suite["outages_s"])
    body = []
    for d in suite["droplets"]:
        cells = []
        for o in suite["outages_s"]:
            p = c["points"].get(lc.LeasePoint(d, o).key)
            cells.append("<td>-</td>" if p is None else f"<td class='{'s' if p['stuck'] else 'r'}'>{p['end_error']:.0%}</td>")
        body.append(f"<tr><th>{d} droplets</th>{''.join(cells)}</tr>")
    return f"<h3>{html.escape(c['policy'])}</h3><table><tr><th></th>{head}</tr>{''.join(body)}</table>"


def summary(doc: dict[str, Any], out: Path) -> list[str]:
    """The lines certify prints: one a policy, the live agreement, where the certificate went."""
    lines = [("  (reference) " if c["reference"] else "") + lc.summary_line(c) for c in doc["certificates"]]
    a = doc["live_agreement"]
    if a["points"]:
        apart = f" (not at {', '.join(a['disagree'])})" if a["disagree"] else ""
        invalid = f" ({len(a['invalid'])} live runs INVALID, left out)" if a["invalid"] else ""
        lines.append(f"live: {a['agree']} of {a['points']} points agree with the model ({a['ratio']:.0%}){apart}{invalid}")
    lines.append(f"certificate: {out / 'certificate.json'}, {out / 'certificate.html'}")
    return lines


def speed_of(args: argparse.Namespace, parsed: float | None) -> float:
    return parsed if parsed is not None else LIVE_SPEED


def run(args: argparse.Namespace, speed: float | None) -> int:
    """certify --profile NAME: the policies as the lease manager's, against its collapse."""
    if args.quick:
        raise UsageError(f"--quick is the 2015 fleet's: the {NAME} suite sets each point's fleet itself")
    base = profile(NAME).replace(seed=args.seed)
    points = lc.suite()

    def doc(candidates: Sequence[dict[str, Any]], readings: dict[str, Any], live: dict[str, Any], seed: int, out: Path) -> dict[str, Any]:
        """The lease manager's certificate document."""

        def build(c: dict[str, Any]) -> dict[str, Any]:
            return lc.certificate(c["label"], c["spec"], points, readings[c["label"]]) | {"timeout_s": c["settings"].lease_timeout_s}

        head = {
            "profile": NAME,
            "fleet": f"{base.lease_hosts} lease manager hosts of {base.lease_host_cores:g} cores, {base.lease_workers} workers each",
        }
        about = {
            "suite": {
                "droplets": sorted({p.droplets for p in points}),
                "outages_s": sorted({p.outage_s for p in points}),
                "account": lc.ACCOUNT,
                "watch_s": lc.WATCH_S,
            },
            "holds_means": (
                f"the leases back by themselves (launch errors under {lc.STUCK:.0%} over the watch's last minute) after the account's "
                f"trigger ({lc.ACCOUNT[0]} droplets, the record empty {lc.ACCOUNT[1]:g} s) and every smaller one"
            ),
        }
        return certify.document(candidates, live, build, head, about, "dns", seed, out)  # the trigger: the endpoint's record, not a link

    def live(
        c: dict[str, Any], pts: Sequence[Any], readings: dict[str, Any], count: int, seed: int, at: float, out: Path
    ) -> dict[str, Any]:
        return certify_live(c, pts, readings, count, seed, at, out, certify.say)

    def html_page(doc: dict[str, Any], out: Path) -> str:
        return page(doc)

    suite = certify.Suite(f"certify --profile {NAME}", LEASES, base, points, lc.judge, live, speed_of(args, speed), doc, html_page, summary)
    return certify.certified(args, suite)
