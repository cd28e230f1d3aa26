"""The lab's alerts, each defined once: Prometheus's rule file is written from this table
(`python -m stormlab.responder.alerts > prometheus/rules/alerts.yml`, a test keeps the two the same), and
a game day without Docker evaluates the same conditions itself on its samples.

An alert with a ``role`` pages that on-call role (Alertmanager routes on the ``role`` label; the
local runner pages it directly). Its condition is one or more terms, each a recording rule
compared with a threshold and the probe a game day's sample has for the same quantity (the
runner's probe is over the service's last 10 s, the rule over a minute: the local page comes a
little sooner). The lab's own alerts (a target down, an invalid run) have no local form: the
runner's validity check does that work, and they page the organiser, not a player.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from stormcore.settings import Pace
from stormlab.engine.reading import THIN_MARGIN, Reading


@dataclass(frozen=True)
class Term:
    series: str  # the recording rule Prometheus compares
    probe: str  # the same quantity in a game day's sample (stormlab.engine.reading.Reading.probe)
    op: str  # ">" or "<"
    value: float

    def promql(self) -> str:
        return f"{self.series} {self.op} {self.value:g}"

    def holds(self, sample: Reading) -> tuple[bool, float | None]:
        got = sample.probe(self.probe)
        if got is None:
            return False, None
        return (got > self.value if self.op == ">" else got < self.value), got


RUNBOOK = "docs/alerts.md"  # every alert's section: what it means, what to look at, the move


@dataclass(frozen=True)
class Alert:
    name: str
    comment: str
    severity: str
    for_s: float
    summary: str
    description: str
    role: str | None = None  # the on-call it pages (None: the organiser)
    terms: tuple[Term, ...] = ()  # with ``join``; empty: ``expr`` is Prometheus's alone
    join: str = "and"
    expr: str = ""

    @property
    def runbook_url(self) -> str:
        """Its section of the runbook page (docs/alerts.md), relative to the lab's checkout."""
        return f"{RUNBOOK}#{self.name.lower()}"

    def promql(self) -> str:
        if not self.terms:
            return self.expr
        first, *rest = (t.promql() for t in self.terms)
        if self.join == "or":
            return " or ".join([first, *rest])
        return first + "".join(f" and on () ({r})" for r in rest)

    def holds(self, sample: Reading) -> tuple[bool, float | None]:
        """Whether the condition holds on one sample, and the first term's value ($value)."""
        results = [t.holds(sample) for t in self.terms]
        if not results:
            return False, None
        firing = any(r[0] for r in results) if self.join == "or" else all(r[0] for r in results)
        value = next((r[1] for r in results if r[0]), results[0][1]) if self.join == "or" else results[0][1]
        return firing, value


ALERTS = (
    Alert(
        "MetadataMarginLow",
        "The leading indicator AWS did not have: memberships grew (GSIs) until processing them\n"
        "takes most of the allowance. Fires before any blip; silent with GSI growth off.",
        "warning",
        60,
        "Membership processing p99 is {{ $value | humanizePercentage }} of the allowance",
        "Large memberships (the nodes holding the GSIs) take most of the renewal allowance even without load. "
        "A brief network blip can now start a retry storm. Watch the membership size "
        "distribution; raise the allowance or add metadata capacity before it happens.",
        role="database",
        terms=(Term("stormlab:metadata_margin:ratio", "margin", ">", THIN_MARGIN),),
    ),
    Alert(
        "RetryStorm",
        "The storm: storage nodes disqualify themselves faster than they get back in.",
        "critical",
        60,
        "{{ $value | humanizePercentage }} of storage nodes are disqualified",
        "Renewals time out, their retries add load to the metadata service, and more renewals "
        "time out. It does not heal by itself: pause requests to the metadata service, add "
        "capacity (break glass if the admin path is loaded), then readmit the fleet in stages.",
        role="database",
        terms=(Term("stormlab:nodes_disqualified:ratio", "disqualified_fraction", ">", 0.1),),
    ),
    Alert(
        "CellRetryStorm",
        "With cells: one cell storms while the fleet's share looks small (one cell in 16 is 6%\n"
        "of the nodes, under RetryStorm's 10%). Silent with one cell.",
        "critical",
        60,
        "Cell {{ $labels.cell }}: {{ $value | humanizePercentage }} of its storage nodes are disqualified",
        "This cell's metadata service is in the storm; the other cells' customers should not see "
        "it. Pause, add capacity and readmit in this cell (`--cell`), not the fleet.",
        role="database",
        terms=(
            Term("cell:stormlab_nodes_disqualified:ratio", "worst_cell_disqualified_fraction", ">", 0.1),
            Term("count(cell:stormlab_nodes_disqualified:ratio)", "cells", ">", 1),
        ),
    ),
    Alert(
        "TableSLOBurn",
        "The Monday tail: one table's customers see errors while the aggregate looks healthy.",
        "warning",
        60,
        "Table {{ $labels.table }}: {{ $value | humanizePercentage }} of requests fail",
        "The aggregate error ratio is under 1%, so fleet-wide alerts stay silent; this table's "
        "customers are not fine. Look at the metadata partition behind it.",
        role="database",
        terms=(
            Term("table:stormlab_customer_errors:ratio_rate1m", "worst_table_error_ratio", ">", 0.05),
            Term("stormlab:customer_errors:ratio_rate1m", "customer_error_ratio", "<", 0.01),
        ),
    ),
    Alert(
        "ScalingAPIFailing",
        "The cascade: services beside the database that keep their control planes in its tables.",
        "warning",
        30,
        "{{ $value | humanizePercentage }} of scaling API calls fail",
        "The scaling service cannot write the groups whose rows sit on disqualified nodes "
        "(scaling-groups is spread over the whole fleet, like every table). Its backlog of "
        "activities grows meanwhile and will drain long after the database is back.",
        role="scaling",
        terms=(Term("stormlab:scaling_api_errors:ratio_rate1m", "scaling_api_error_ratio", ">", 0.1),),
    ),
    Alert(
        "ScalingBacklogDraining",
        "",
        "warning",
        30,
        "{{ $value }} scaling activities still waiting after the customers recovered",
        "The database is back but the scaling service drains the activities it could not "
        "write at its workers' pace (2015: 7:10 to 10:52 AM). More workers, partitioned by "
        "group, and pruning superseded activities shorten it.",
        role="scaling",
        terms=(
            Term("stormlab:scaling_backlog:max", "scaling_backlog", ">", 20),
            Term("stormlab:customer_errors:ratio_rate1m", "customer_error_ratio", "<", 0.01),
        ),
    ),
    Alert(
        "QueuesFailing",
        "",
        "critical",
        30,
        "{{ $value | humanizePercentage }} of queue sends and receives fail",
        "The queue service cannot refresh its cached queue metadata from queue-metadata at all "
        "(2015: once DynamoDB's traffic was held back, 5:45 AM); in a storm it serves the rows it "
        "cannot refresh while most of its rows still refresh. Serving from the stale copy keeps "
        "the queues up.",
        role="queues",
        terms=(Term("stormlab:queue_errors:ratio_rate1m", "queue_error_ratio", ">", 0.05),),
    ),
    Alert(
        "MetricGaps",
        "",
        "warning",
        30,
        "Datapoints without their group, or PutMetricData failing ({{ $value | humanizePercentage }})",
        "The metrics service cannot refresh its enrichment from scaling-groups (gaps) or "
        "confirm namespaces in metric-groups (errors). Refreshing only the groups seen lately "
        "and serving the last copy keeps the series whole.",
        role="metrics",
        terms=(
            Term("stormlab:metric_gaps:ratio_rate1m", "metric_gap_ratio", ">", 0.1),
            Term("stormlab:metric_put_errors:ratio_rate1m", "metric_put_error_ratio", ">", 0.05),
        ),
        join="or",
    ),
    Alert(
        "LaunchesFailing",
        "",
        "critical",
        60,
        "{{ $value | humanizePercentage }} of instance launches fail",
        "Launches need a droplet whose lease the lease manager holds (October 2025). With the database's "
        "endpoint broken the leases lapse; once it is back, re-establishing every lease at once can take "
        "longer than a work item's timeout, and the manager stays busy with no forward progress. Look at "
        "the leases established a second and the work timing out; throttle new work, then restart the hosts.",
        role="leases",
        terms=(Term("stormlab:launch_errors:ratio_rate1m", "launch_error_ratio", ">", 0.2),),
    ),
    Alert(
        "LoginsSlow",
        "",
        "warning",
        30,
        "Console login p99 is {{ $value | humanizeDuration }}",
        "Each login waits for a non-critical lookup in the sessions table with a very long "
        "timeout. A short timeout (fail fast, log in anyway) keeps logins quick.",
        role="console",
        terms=(Term("stormlab:console_login_seconds:p99_rate1m", "login_p99_s", ">", 1),),
    ),
    Alert(
        "LabTargetDown",
        "The lab itself: a process Prometheus cannot scrape, or one it never found.",
        "critical",
        30,
        "{{ $labels.job }} ({{ $labels.instance }}) does not answer Prometheus",
        "A lab process is down, paused or cut off from Prometheus. A chaos pause or kill does "
        "this on purpose (it ends with its lease); otherwise look at `docker compose ps`.",
        expr="up == 0",
    ),
    Alert(
        "LabTargetMissing",
        "",
        "critical",
        60,
        "Prometheus finds no {{ $labels.job }} target",
        "The storm's own processes are not being scraped at all: every panel that needs them "
        "is empty, and every alert about them is silent.",
        expr='absent(up{job="metadata"}) or absent(up{job="racks"}) or absent(up{job="loadgen"})',
    ),
    Alert(
        "LabHostShapingRun",
        "The host's CPU: the causes of lag, before it shows (the same budgets as the demo's).",
        "warning",
        30,
        "The run is INVALID: {{ $value }} of the validity check's budgets broken",
        "A process uses 90% of a core, the lab 90% of the host's cores, a process waits 2% of "
        "the allowance for a core each time it runs, the hypervisor steals 5% of the CPU, or an "
        "event loop's lag p99 is over 5% of the allowance (see the Storm overview's validity "
        "panel). The host, not the model, now shapes the storm: run slower (STORMLAB_SPEED=0.5) "
        "or with fewer nodes.",
        expr="stormlab:run_invalid_reasons:count > 0",
    ),
    Alert(
        "LabRunInvalid",
        "The validity check: a run is only the model's while every event loop keeps up (its\n"
        "lag p99 under 5% of the renewal allowance: 50 ms in the 2015 profile).",
        "warning",
        60,
        "{{ $labels.job }} ({{ $labels.instance }}): event-loop lag p99 {{ $value | humanizeDuration }}",
        "This process's event loop runs late: the host's CPU, not the model, now decides when "
        "renewals time out. What the dashboards show is not the storm's until it recovers; "
        "give the lab more CPU or fewer nodes.",
        expr="max by (job, instance) (instance:stormlab_event_loop_lag_seconds:p99_rate1m)\n"
        "  > 0.05 * scalar(stormlab:renewal_allowance_seconds:max)",
    ),
)
BY_NAME = {a.name: a for a in ALERTS}
PAGING = tuple(a for a in ALERTS if a.role)


def rules_yaml() -> str:
    """prometheus/rules/alerts.yml."""
    lines = [
        "# Written by `python -m stormlab.responder.alerts` from stormlab/responder/alerts.py (edit it there; a test",
        "# keeps this file the same). The role label routes a page to its on-call (alertmanager/).",
        "groups:",
        "  - name: stormlab-alerts",
        "    rules:",
    ]
    for alert in ALERTS:
        if alert.comment:
            lines += ["", *(f"      # {c}" for c in alert.comment.splitlines())]
        labels = {"severity": alert.severity, **({"role": alert.role} if alert.role else {})}
        expr = alert.promql()
        lines += [
            f"      - alert: {alert.name}",
            *([f"        expr: {expr}"] if "\n" not in expr else ["        expr: |", *(f"          {x}" for x in expr.splitlines())]),
            f"        for: {alert.for_s / 60:g}m" if alert.for_s % 60 == 0 else f"        for: {alert.for_s:g}s",
            "        labels: {" + ", ".join(f"{k}: {v}" for k, v in labels.items()) + "}",
            "        annotations:",
            f"          summary: {json.dumps(alert.summary)}",
            f"          runbook_url: {alert.runbook_url}",
            "          description: >-",
            *textwrap.wrap(alert.description, 100, initial_indent=" " * 12, subsequent_indent=" " * 12),
        ]
    return "\n".join(lines) + "\n"


def render(template: str, value: float | None, labels: dict[str, str]) -> str:
    """An annotation as Prometheus renders it, for the forms this table uses."""

    def one(match: re.Match[str]) -> str:
        what, _, how = (p.strip() for p in match.group(1).partition("|"))
        if what.startswith("$labels."):
            return labels.get(what.removeprefix("$labels."), "")
        if value is None:
            return "n/a"
        if how == "humanizePercentage":
            return f"{100 * value:.3g}%"
        if how == "humanizeDuration":
            return f"{value:.3g}s"
        return f"{value:g}"

    return re.sub(r"\{\{\s*(.*?)\s*\}\}", one, template)


class Evaluator:
    """The paging alerts on a game day's samples, as Prometheus's rule manager would: pending
    while the condition holds, firing once it has held ``for`` (divided by the run's speed),
    resolved when it stops. ``notify`` gets Alertmanager's webhook body for each change."""

    def __init__(self, notify: Callable[[dict[str, Any]], None], speed: float = 1.0, alerts: Iterable[Alert] = PAGING) -> None:
        self.notify, self.speed, self.alerts = notify, speed, tuple(alerts)
        self.since: dict[str, float] = {}  # alert -> when its condition began to hold
        self.firing: dict[str, dict[str, Any]] = {}

    def observe(self, t: float, sample: Reading, wall: float) -> None:
        """One sample at run time ``t`` (seconds), taken at ``wall`` (epoch seconds)."""
        for alert in self.alerts:
            holds, value = alert.holds(sample)
            if not holds:
                self.since.pop(alert.name, None)
                if alert.name in self.firing:
                    self.notify(webhook("resolved", [{**self.firing.pop(alert.name), "status": "resolved", "endsAt": _iso(wall)}]))
                continue
            start = self.since.setdefault(alert.name, t)
            if alert.name not in self.firing and t - start >= Pace(self.speed).wall(alert.for_s):
                labels = {"alertname": alert.name, "severity": alert.severity, "role": alert.role or "lab"}
                table = _worst_table(sample) if alert.name == "TableSLOBurn" else None
                if table:
                    labels["table"] = table
                fired = {
                    "status": "firing",
                    "labels": labels,
                    "annotations": {
                        "summary": render(alert.summary, value, labels),
                        "description": alert.description,
                        "runbook_url": alert.runbook_url,
                    },
                    "startsAt": _iso(wall),
                }
                self.firing[alert.name] = fired
                self.notify(webhook("firing", [fired]))


def webhook(status: str, alerts: list[dict[str, Any]]) -> dict[str, Any]:
    """The body Alertmanager posts to a webhook receiver (version 4), for these alerts. The desk reads
    each alert's own labels; ``receiver`` names the role, as the local runner has always said."""
    role = alerts[0]["labels"].get("role", "lab") if alerts else "lab"
    return {"version": "4", "status": status, "receiver": role, "groupLabels": {"role": role}, "alerts": alerts}


def _worst_table(sample: Reading) -> str | None:
    tables = {t: v for t, v in sample.table_error_ratio.items() if v is not None}
    return max(tables, key=lambda t: tables[t]) if tables else None


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


def runbook_markdown() -> str:
    """docs/alerts.md: a section per alert, the one each alert's runbook_url names."""
    lines = [
        "# The alerts, and what to do",
        "",
        "Written by `python -m stormlab.responder.alerts --runbook` from stormlab/responder/alerts.py (a test keeps",
        "this page the same). Each alert's `runbook_url` annotation names its section here; Alertmanager passes it",
        "to the desk with the page. Every page goes to one receiver, the game's desk, which hands it to the on-call",
        "role its `role` label names (the lab's own alerts, with none, to the organiser).",
    ]
    for alert in ALERTS:
        when = f"{alert.for_s / 60:g} min" if alert.for_s % 60 == 0 else f"{alert.for_s:g} s"
        lines += [
            "",
            f"## {alert.name}",
            "",
            f"- **Pages**: {alert.role or 'the organiser (the lab itself, not a player)'}; **severity** {alert.severity}; "
            f"after {when} of `{alert.promql().splitlines()[0]}`{' …' if len(alert.promql().splitlines()) > 1 else ''}",
            f"- **Says**: `{alert.summary}`",
            "",
            *textwrap.wrap(alert.description, 110),
        ]
        if alert.comment:
            lines += ["", *textwrap.wrap("Why it exists: " + " ".join(alert.comment.split()), 110)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # the rule file; --runbook: docs/alerts.md
    import sys

    print(runbook_markdown() if sys.argv[1:] == ["--runbook"] else rules_yaml(), end="")
