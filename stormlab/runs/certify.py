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
timed out, against the October 2025 collapse instead (stormlab/incidents/aws_2025_10/certify.py): the
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stormcore import incidents, policies
from stormcore.errors import LabError, UsageError
from stormcore.labstate import running
from stormcore.policies import limits
from stormcore.settings import POLICY_TIMEOUTS, LabSettings
from stormlab.artefacts import certificate_map
from stormlab.engine.speed import first_guess, parse_speed
from stormlab.model import certificate as cert
from stormlab.model.grid import POINT_2015, Point, pooled_agreement
from stormlab.runs.live import QUICK, add_link_cut, certify_live, commit, judge_live, live_link, live_path

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
    add_link_cut(p, "live results are kept per mechanism and the certificate says which")
    p.add_argument(
        "--profile",
        default=incidents.FIRST.name,
        help="the incident whose storm the policy meets (stormcore/incidents/): "
        + "; ".join(f"{i.name}: {i.title}" for i in incidents.REGISTERED)
        + f" (default {incidents.FIRST.name})",
    )
    p.add_argument("--seed", type=int, default=2015, help="the seed of the fleet, the policies' jitter and the live sample (default 2015)")
    p.add_argument("--quick", action="store_true", help="a 400-node fleet (the tests') instead of 1,000 nodes")
    p.add_argument("--no-references", action="store_true", help="leave out the two references (immediate retries, full jitter)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes for the model's points (default: every core)")
    p.add_argument("--json", action="store_true", help="certificate.json on stdout instead of the summary lines")


def checked(args: argparse.Namespace) -> float | None:
    """The flags every incident's certificate reads, refused before anything runs; the live speed asked for (None: auto)."""
    if args.live < 0 or args.live > 24 or args.jobs < 1:
        raise UsageError("--live between 0 and 24 points, --jobs at least 1")
    speed = parse_speed(args.speed)
    if args.live and running():
        raise LabError("a lab is up: the live points start labs of their own; `stormlab down` first (or --live 0)")
    return speed


@dataclass(frozen=True)
class Suite:
    """What one incident's certificate is made of; ``certified`` runs any of them the same way."""

    title: str  # as certify's first line names it
    story: Story  # where a policy goes, and the references
    base: LabSettings  # the profile's settings the candidates start from
    points: Sequence[Any]  # every storm of the suite
    judge: Callable[[LabSettings, Any], Any]  # a point in the reference model (picklable: run in worker processes)
    live: Callable[[dict[str, Any], Sequence[Any], dict[str, Any], int, int, float, Path], dict[str, Any]]  # a policy's live sample
    speed: float  # the live points' speed
    document: Callable[[Sequence[dict[str, Any]], dict[str, dict[str, Any]], dict[str, Any], int, Path], dict[str, Any]]
    page: Callable[[dict[str, Any], Path], str]  # certificate.html
    summary: Callable[[dict[str, Any], Path], list[str]]  # the lines certify prints
    exit_code: Callable[[Sequence[dict[str, Any]]], int] = cert.exit_code


def certified(args: argparse.Namespace, suite: Suite) -> int:
    """Every incident's `certify`: the policies and the references through the suite in the model
    on every core, a live sample of each beside it, certificate.json and .html, the summary, the exit code."""
    mine = [candidate(text, suite.base, story=suite.story) for text in args.policies]
    given = {c["spec"] for c in mine}
    refs = [] if args.no_references else [candidate(n, suite.base, True, suite.story) for n in suite.story.references if n not in given]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    count = f"{len(mine)} {'policy' if len(mine) == 1 else 'policies'} and {len(refs)} references"
    say(f"{suite.title}: {count}, {len(suite.points)} points each in the model")
    readings = run_model([*mine, *refs], suite.points, args.jobs, say, suite.judge)
    live: dict[str, Any] = {}
    for c in [*mine, *refs] if args.live else ():
        live[c["label"]] = suite.live(c, suite.points, readings[c["label"]], args.live, args.seed, suite.speed, out)
    doc = suite.document([*mine, *refs], readings, live, args.seed, out)
    (out / "certificate.json").write_text(json.dumps(doc, indent=1))
    (out / "certificate.html").write_text(suite.page(doc, out))
    print(json.dumps(doc, indent=1) if args.json else "\n".join(suite.summary(doc, out)))
    return suite.exit_code([c for c in doc["certificates"] if not c["reference"]])


def run(args: argparse.Namespace, speed: float | None) -> int:
    """The policies as a rack's renewal retries, against the 2015 storm (the first incident's certificate)."""
    base = LabSettings(seed=args.seed, link_cut=args.link, **(QUICK if args.quick else {}))
    if args.live:
        base = live_link(base)  # refused now where the kernel's links were asked for and cannot be had
    points = cert.suite()

    def doc(candidates: Sequence[dict[str, Any]], readings: dict[str, Any], live: dict[str, Any], seed: int, out: Path) -> dict[str, Any]:
        """The 2015 storm's certificate document."""

        def build(c: dict[str, Any]) -> dict[str, Any]:
            one = cert.certificate(c["label"], c["spec"], base.renewal_period_s, points, readings[c["label"]])
            return one | {"allowance_s": c["settings"].allowance_s}

        about = {
            "suite": {
                "trigger_racks": cert.TRIGGER_RACKS,
                "trigger_blips_s": cert.TRIGGER_BLIPS,
                "growth_gsis": cert.GROWTH,
                "point_2015": POINT_2015,
            },
            "holds_means": "recovered at the 2015 trigger (3 racks x 5 s, 2 GSIs, at each of 8 moments) and at every smaller trigger",
        }
        fleet = {"fleet": f"{base.racks} racks x {base.nodes_per_rack} nodes"}
        return document(candidates, live, build, fleet, about, base.link_cut, seed, out)

    speed = speed if speed is not None else first_guess(base.nodes_total)
    return certified(args, Suite("certify", RENEWALS, base, points, cert.judge, live_of, speed, doc, storm_page, storm_summary))


def storm_summary(doc: dict[str, Any], out: Path) -> list[str]:
    """The lines certify prints of the 2015 storm: one a policy, the live agreement, where the certificate went."""
    lines = [("  (reference) " if c["reference"] else "") + cert.summary_line(c) for c in doc["certificates"]]
    a = doc["live_agreement"]
    if a["points"]:
        lines.append(
            f"live (link_cut={a['link']}): {a['agree']} of {a['points']} points agree with the model ({a['ratio']:.0%})" + _disagreeing(a)
        )
    lines.append(f"certificate: {out / 'certificate.json'}, {out / 'certificate.html'}")
    return lines


def storm_page(doc: dict[str, Any], out: Path) -> str:
    return page(doc, _draw(doc, out))


@dataclass(frozen=True)
class Story:
    """Where certify puts a policy (the setting it goes in; its own attempt timeout sets
    POLICY_TIMEOUTS' of it), and the references' labels."""

    policy: str
    references: dict[str, str]


RENEWALS = Story("retry_policy", cert.REFERENCES)  # 2015: a rack's renewal retries


def candidate(text: str, base: LabSettings, reference: bool = False, story: Story = RENEWALS) -> dict[str, Any]:
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


def live_of(
    c: dict[str, Any], points: Sequence[Any], readings: dict[str, Any], count: int, seed: int, speed: float, out: Path
) -> dict[str, Any]:
    """The policy's live sample (resumed from --out), beside the model's verdicts."""
    fleet = c["settings"]
    where = out / f"{fleet.nodes_total}-nodes-seed{seed}" / c["key"]
    where.mkdir(parents=True, exist_ok=True)
    say(f"live: {c['label']} …")
    sample = cert.live_sample(points, count, seed, c["label"])
    return certify_live(c, sample, readings, live_path(where, fleet.link_cut), cert.WATCH_PERIODS, speed, say, judge_live, fleet.link_cut)


def certificates(
    candidates: Sequence[dict[str, Any]], live: dict[str, Any], build: Callable[[dict[str, Any]], dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each policy's certificate, for any incident's (``build``: from its model readings), with what
    certify knows of the policy and its live sample beside the model, if it ran one."""
    certs = []
    for c in candidates:
        one = build(c) | {"reference": c["reference"], "kind": c["kind"], "maps": c["maps"]}
        if c["label"] in live:
            one["live"] = live[c["label"]]
        certs.append(one)
    return certs


def document(
    candidates: Sequence[dict[str, Any]],
    live: dict[str, Any],
    build: Callable[[dict[str, Any]], dict[str, Any]],
    head: dict[str, Any],
    about: dict[str, Any],
    link: str,
    seed: int,
    out: Path,
) -> dict[str, Any]:
    """certificate.json, for any incident's: ``head`` names the fleet, ``about`` the suite and what
    holds means; each policy's certificate (``build``) with its live sample, and the agreement over
    every live point (``link``: what carried the trigger)."""
    certs = certificates(candidates, live, build)
    return head | {"seed": seed, "commit": commit(out)} | about | {"certificates": certs, "live_agreement": pooled_agreement(certs, link)}


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


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
