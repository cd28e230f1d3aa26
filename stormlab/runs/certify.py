"""`stormlab certify POLICY…`: would this retry policy have held on 20 September 2015, and from
which trigger on would it not?

POLICY is a policy of your own (``./my_policy.py:MyPolicy``, a class meeting the protocol of
docs/policies.md), a policy file (``policy.yaml``: backoff, jitter, attempts, deadline, budget,
breaker, throttling), a library's configuration (a tenacity ``Retrying`` or ``@retry`` function
or a urllib3 ``Retry`` in a Python file: ``./client.py:retries``; a gRPC service config or an
Envoy route's ``retry_policy``: ``./service_config.json``), a name registered under the entry
point group ``stormlab.policies``, or one of the lab's (``full-jitter+budget``).

Each policy, beside two references (2015's immediate retries and full jitter), meets the same
storms in the reference model (the lab's own cores in virtual time): the triggers (1-6 racks
blipped for 1-10 s at 2015's membership sizes), the membership growth at the 2015 trigger, and
the 2015 trigger at eight moments of the renewal period; then a seeded sample of those points
runs live on real processes (a 1,000-node lab, one at a time, about 2.5 minutes each; the
results are kept in --out, per link mechanism (--link: the kernel's links or the link proxy), so
a certificate run again resumes and reuses them while the code that answers and the mechanism
that carried them are the same).

Writes ``certificate.json`` and ``certificate.html`` (the map and the table) into --out and
prints one summary line per policy. Exit code: 0 when every policy certified holds at the 2015
trigger and every smaller one; 1 when one is stuck at one of them (the references are not
counted); 2 when a policy cannot run (not found, not meeting the protocol, raising, answering
nonsense, or a configuration an adapter cannot map). The same seed gives the same verdicts.

``--profile aws-2025-10`` certifies the policy as what a lease manager host does with work that
timed out, against the October 2025 collapse instead (stormlab/runs/certify_leases.py): the
same policies, exit codes and files, its own suite (the fleet's size x how long the endpoint's
record is empty).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import html
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from storage_node import policies
from storage_node.policies import limits
from stormcore.commandline import deprecated
from stormcore.errors import LabError, UsageError
from stormcore.labstate import running
from stormcore.settings import POLICY_TIMEOUTS, LabSettings, profile
from stormlab.artefacts import certificate_map
from stormlab.engine.speed import first_guess, parse_speed
from stormlab.model import certificate as cert
from stormlab.model import lease_certificate as lc
from stormlab.model.grid import POINT_2015, Point, agreement, pooled_agreement
from stormlab.runs import certify_leases
from stormlab.runs.live import LINKS, QUICK, commit, judge_live, live_link, live_path, run_live

PROFILES = ("dynamodb-2015", "aws-2025-10")  # the storms a policy can be certified against
AGREE = 0.9  # the live points should agree with the model on this share of verdicts
MODEL_LIMITS = (limits.CALL_LIMIT_S, 2 * limits.MEMORY_BYTES)  # a model worker's: the model itself grows too


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "policies", nargs="+", metavar="POLICY", help="FILE.py:NAME, a policy file, a gRPC or Envoy config, an entry point, a lab policy"
    )
    p.add_argument(
        "--out",
        type=Path,
        default="reports/certify",
        help="where certificate.json, certificate.html and the live runs go (default reports/certify)",
    )
    p.add_argument(
        "--live",
        type=int,
        default=3,
        help="points of each policy to run live as well (the 2015 trigger, then triggers drawn with the seed; about 2.5 min "
        "each, kept in --out and reused); 0: the model only (default 3)",
    )
    p.add_argument("--speed", default="auto", help="time dilation of the live runs: a number (0.05-20) or auto (default auto)")
    p.add_argument(
        "--link-cut",
        dest="link",
        choices=LINKS,
        default="auto",
        help="who carries and cuts the live labs' links: the kernel (root, iptables), the link proxy, or auto, the kernel where "
        "the lab may (default auto); live results are kept per mechanism and the certificate says which",
    )
    deprecated(p, "--link", "--link-cut", dest="link", choices=LINKS)
    p.add_argument(
        "--profile",
        default="dynamodb-2015",
        help="the storm: dynamodb-2015 (a rack's renewal retries, default) or aws-2025-10 (what a lease manager host does with "
        "work that timed out; its own suite: 1,000-5,000 droplets x the record empty 30 s-5 min; live points at speed 4)",
    )
    p.add_argument("--seed", type=int, default=2015, help="the seed of the fleet, the policies' jitter and the live sample (default 2015)")
    p.add_argument("--quick", action="store_true", help="a 400-node fleet (the tests') instead of 1,000 nodes")
    p.add_argument("--no-references", action="store_true", help="leave out the two references (immediate retries, full jitter)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes for the model's points (default: every core)")
    p.add_argument("--json", action="store_true", help="certificate.json on stdout instead of the summary lines")


def run(args: argparse.Namespace) -> int:
    if args.live < 0 or args.live > 24 or args.jobs < 1:
        raise UsageError("--live between 0 and 24 points, --jobs at least 1")
    speed = parse_speed(args.speed)
    if args.live and running():
        raise LabError("a lab is up: the live points start labs of their own; `stormlab down` first (or --live 0)")
    if args.profile not in PROFILES:
        raise UsageError(f"--profile: certify knows the storms of {' and '.join(PROFILES)}, not {args.profile!r}")
    if args.profile == "aws-2025-10":
        return run_leases(args, speed)
    base = LabSettings(seed=args.seed, link_cut=args.link, **(QUICK if args.quick else {}))
    if args.live:
        base = live_link(base)  # refused now where the kernel's links were asked for and cannot be had
    mine = [_candidate(text, base) for text in args.policies]
    given = {c["spec"] for c in mine}
    refs = [] if args.no_references else [_candidate(name, base, reference=True) for name in cert.REFERENCES if name not in given]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    points = cert.suite()
    say = _say
    count = f"{len(mine)} {'policy' if len(mine) == 1 else 'policies'} and {len(refs)} references"
    say(f"certify: {count}, {len(points)} points each in the model")
    readings = run_model([*mine, *refs], points, args.jobs, say)
    live_speed = speed if speed is not None else first_guess(base.nodes_total)
    live: dict[str, Any] = {}
    for c in [*mine, *refs]:
        if args.live:
            live[c["label"]] = certify_live(c, points, readings[c["label"]], args.live, args.seed, live_speed, out, say)
    doc = document([*mine, *refs], points, readings, live, base, args.seed, out)
    (out / "certificate.json").write_text(json.dumps(doc, indent=1))
    (out / "certificate.html").write_text(page(doc, _draw(doc, out)))
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        for c in doc["certificates"]:
            print(("  (reference) " if c["reference"] else "") + cert.summary_line(c))
        a = doc["live_agreement"]
        if a["points"]:
            print(
                f"live (link_cut={a['link']}): {a['agree']} of {a['points']} points agree with the model ({a['ratio']:.0%})"
                + _disagreeing(a)
            )
        print(f"certificate: {out / 'certificate.json'}, {out / 'certificate.html'}")
    return cert.exit_code([c for c in doc["certificates"] if not c["reference"]])


def run_leases(args: argparse.Namespace, speed: float | None) -> int:
    """certify --profile aws-2025-10: the policies as the lease manager's, against its collapse."""
    if args.quick:
        raise UsageError("--quick is the 2015 fleet's: the aws-2025-10 suite sets each point's fleet itself")
    base = profile("aws-2025-10").replace(seed=args.seed)
    mine = [_candidate(text, base, story=LEASES) for text in args.policies]
    given = {c["spec"] for c in mine}
    refs = [] if args.no_references else [_candidate(n, base, True, LEASES) for n in lc.REFERENCES if n not in given]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    points = lc.suite()
    count = f"{len(mine)} {'policy' if len(mine) == 1 else 'policies'} and {len(refs)} references"
    _say(f"certify --profile aws-2025-10: {count}, {len(points)} points each in the model")
    readings = run_model([*mine, *refs], points, args.jobs, _say, lc.judge)
    live_speed = certify_leases.speed_of(args, speed)
    live = {}
    if args.live:
        for c in [*mine, *refs]:
            live[c["label"]] = certify_leases.certify_live(c, points, readings[c["label"]], args.live, args.seed, live_speed, out, _say)
    doc = certify_leases.document([*mine, *refs], points, readings, live, base, args.seed, out)
    (out / "certificate.json").write_text(json.dumps(doc, indent=1))
    (out / "certificate.html").write_text(certify_leases.page(doc))
    print(json.dumps(doc, indent=1) if args.json else "\n".join(certify_leases.summary(doc, out)))
    return cert.exit_code([c for c in doc["certificates"] if not c["reference"]])


@dataclass(frozen=True)
class Story:
    """Where certify puts a policy (the setting it goes in; its own attempt timeout sets
    POLICY_TIMEOUTS' of it), and the references' labels."""

    policy: str
    references: dict[str, str]


RENEWALS = Story("retry_policy", cert.REFERENCES)  # 2015: a rack's renewal retries
LEASES = Story("lease_retry_policy", lc.REFERENCES)  # 2025: a lease manager host's timed-out work


def _candidate(text: str, base: LabSettings, reference: bool = False, story: Story = RENEWALS) -> dict[str, Any]:
    """A policy as the certificate runs it: its spec (loaded and probed: PolicyError, exit 2, if it
    cannot run), its settings (its own attempt timeout as the allowance, or the item timeout), its
    label and a key for its live runs on disk (the spec and its file's bytes: an edited policy runs again)."""
    described = policies.checked(text)  # loaded and probed in a child under limits: its code never runs in this process
    spec = described.spec
    settings = base.replace(**{story.policy: spec})
    label, kind, maps, content = spec, "the lab's", described.maps, spec.encode()
    if policies.is_spec(spec):
        label, kind = described.label, described.kind
        if described.attempt_timeout_s is not None:
            settings = settings.replace(**{POLICY_TIMEOUTS[story.policy]: described.attempt_timeout_s})
        source = policies.source_file(spec)
        content += source.read_bytes() if source is not None else b""
    if reference:
        label = story.references[spec]
    key = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-")[:40] + "-" + hashlib.sha1(content).hexdigest()[:8]
    return {"spec": spec, "label": label, "kind": kind, "maps": list(maps), "settings": settings, "reference": reference, "key": key}


def run_model(
    candidates: Sequence[dict[str, Any]],
    points: Sequence[Any],
    jobs: int,
    say: Callable[[str], None],
    judge: Callable[[LabSettings, Any], Any] = cert.judge,
) -> dict[str, dict[str, Any]]:
    """Every policy's points in the reference model (``judge``: the story's), on ``jobs`` processes."""
    out: dict[str, dict[str, Any]] = {c["label"]: {} for c in candidates}
    started, total, n, last_said = time.monotonic(), len(candidates) * len(points), 0, 0.0
    # The workers run the users' code: each call within its time, the worker within its memory.
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, initializer=limits.impose, initargs=MODEL_LIMITS) as pool:
        futures = {pool.submit(judge, c["settings"], p): (c["label"], p) for c in candidates for p in points}
        for future in concurrent.futures.as_completed(futures):
            label, point = futures[future]
            try:
                out[label][point.key] = future.result()  # a policy that breaks its promises in the storm: PolicyError (exit 2)
            except BaseException:
                pool.shutdown(cancel_futures=True)  # the points not begun would only meet the same policy again
                raise
            n += 1
            now = time.monotonic()
            if now - last_said >= 5 or n == total:
                last_said = now
                say(f"  model {n}/{total}  (~{(now - started) / n * (total - n):.0f}s left)")
    return out


def certify_live(
    c: dict[str, Any],
    points: Sequence[Point],
    readings: dict[str, cert.Reading],
    count: int,
    seed: int,
    speed: float,
    out: Path,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """The policy's live sample (resumed from --out), beside the model's verdicts."""
    sample = cert.live_sample(points, count, seed, c["label"])
    fleet = c["settings"]
    where = out / f"{fleet.nodes_total}-nodes-seed{seed}" / c["key"]
    where.mkdir(parents=True, exist_ok=True)
    say(f"live: {c['label']} …")
    live = run_live(fleet, sample, live_path(where, fleet.link_cut), cert.WATCH_PERIODS, speed, say, judge_live)
    model = {k: r.verdict for k, r in readings.items()}
    return {
        "speed": speed,
        "link": fleet.link_cut,
        "points": [{"key": p.key, "model": asdict(model[p.key]), "live": asdict(live[p.key])} for p in sample if p.key in live],
        "agreement": agreement(sample, model, live),
    }


def document(
    candidates: Sequence[dict[str, Any]],
    points: Sequence[Point],
    readings: dict[str, dict[str, cert.Reading]],
    live: dict[str, Any],
    base: LabSettings,
    seed: int,
    out: Path,
) -> dict[str, Any]:
    certs = []
    for c in candidates:
        one = cert.certificate(c["label"], c["spec"], base.renewal_period_s, points, readings[c["label"]])
        one |= {"reference": c["reference"], "kind": c["kind"], "maps": c["maps"], "allowance_s": c["settings"].allowance_s}
        if c["label"] in live:
            one["live"] = live[c["label"]]
        certs.append(one)
    return {
        "fleet": f"{base.racks} racks x {base.nodes_per_rack} nodes",
        "seed": seed,
        "commit": commit(out),
        "suite": {
            "trigger_racks": cert.TRIGGER_RACKS,
            "trigger_blips_s": cert.TRIGGER_BLIPS,
            "growth_gsis": cert.GROWTH,
            "point_2015": POINT_2015,
        },
        "holds_means": "recovered at the 2015 trigger (3 racks x 5 s, 2 GSIs, at each of 8 moments) and at every smaller trigger",
        "certificates": certs,
        "live_agreement": pooled_agreement(certs, base.link_cut),
    }


def _disagreeing(a: dict[str, Any]) -> str:
    parts = [f"not at {', '.join(a['disagree'])}"] if a["disagree"] else []
    parts += [f"{len(a['invalid'])} live runs INVALID (the host shaped them), left out"] if a["invalid"] else []
    return f" ({'; '.join(parts)})" if parts else ""


# -- the page ----------------------------------------------------------------------------------


def _draw(doc: dict[str, Any], out: Path) -> str | None:
    """map.png beside the page, when matplotlib is here (the page's tables need nothing)."""
    try:
        return certificate_map.draw(doc, out / "map.png").name
    except UsageError:
        return None


def _split_cell(a: dict[str, Any]) -> str:
    words = cert.split_words(a.get("moments")).strip(" ()")
    return f"<br><small>2015: {html.escape(words)}</small>" if words else ""


def page(doc: dict[str, Any], png: str | None) -> str:
    """certificate.html: one self-contained page (the map as tables, map.png when drawn)."""
    e = html.escape
    rows = []
    for c in doc["certificates"]:
        a = c["at_2015"]
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{x}</td>"
                for x in (
                    e(c["policy"]) + (" <small>(reference)</small>" if c["reference"] else ""),
                    f"<b class='{c['verdict']}'>{c['verdict']}</b>" + _split_cell(a),
                    e(cert.trigger_words(c["largest_trigger_survived"])),
                    f"{a['amplification']:.1f}x",
                    f"{a['goodput_floor']:.0%}",
                    "-" if a["recovered_after_periods"] is None else f"{a['recovered_after_periods']:g}",
                    f"{a['wasted_work']:.0%}",
                    "works" if a["admin_path"] else "times out",
                    _live_cell(c),
                )
            )
            + "</tr>"
        )
    maps = "".join(_map_table(c) for c in doc["certificates"])
    picture = f"<p><img src='{e(png)}' alt='the map of each policy'></p>" if png else ""
    notes = "".join(
        f"<li><b>{e(c['policy'])}</b> ({e(c['kind'])}): {e('; '.join(c['maps']) or 'as its code says')}</li>" for c in doc["certificates"]
    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>stormlab certificate</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em;max-width:70em}} table{{border-collapse:collapse;margin:.5em 0 1.5em}}
td,th{{border:1px solid #ccc;padding:.3em .6em;text-align:center}} .holds{{color:#1e8449}} .stuck{{color:#c0392b}}
td.s{{background:#c0392b;color:#fff}} td.r{{background:#eafaf1}}</style></head><body>
<h1>Retry policy certificate</h1>
<p>Fleet {e(doc["fleet"])}, seed {doc["seed"]}, code {e(doc["commit"])}. A policy <b>holds</b> when it is
{e(doc["holds_means"])}. Figures at the 2015 trigger: retry amplification (renewal attempts per node in
the busiest renewal period after the blip: 1 when nobody retries), the goodput floor (the customers' requests served at the worst),
renewal periods from the blip's end to recovery, the metadata service's work wasted on answers nobody
waited for, and whether an admin request gets through in the storm.</p>
<table><tr><th>policy</th><th>verdict</th><th>largest trigger survived</th><th>amplification</th><th>goodput floor</th>
<th>periods to recover</th><th>wasted work</th><th>admin path</th><th>live agrees</th></tr>{"".join(rows)}</table>
{picture}
<h2>The map: stuck (red) or recovered (green) at each trigger, 2 GSIs per table</h2>{maps}
<h2>What each policy is</h2><ul>{notes}</ul>
</body></html>
"""


def _live_cell(c: dict[str, Any]) -> str:
    a = c.get("live", {}).get("agreement")
    if not a or not a["points"]:
        return "-"
    return f"{a['agree']}/{a['points']} <small>({html.escape(c['live'].get('link') or '?')})</small>"


def _map_table(c: dict[str, Any]) -> str:
    head = "".join(f"<th>{b:g} s</th>" for b in cert.TRIGGER_BLIPS)
    body = []
    for r in cert.TRIGGER_RACKS:
        cells = []
        for b in cert.TRIGGER_BLIPS:
            p = c["points"][Point("2015", r, b, POINT_2015["gsis"]).key]
            cells.append(f"<td class='{'s' if p['stuck'] else 'r'}'>{p['end_error']:.0%}</td>")
        body.append(f"<tr><th>{r} racks</th>{''.join(cells)}</tr>")
    return f"<h3>{html.escape(c['policy'])}</h3><table><tr><th></th>{head}</tr>{''.join(body)}</table>"


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
