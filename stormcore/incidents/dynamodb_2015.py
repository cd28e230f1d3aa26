"""The Amazon DynamoDB outage of 20 September 2015 (docs/incidents/dynamodb-2015.md): the lab's first
incident, and its default profile. A brief network disruption left storage servers' membership
requests timing out at the metadata service; their retries held it overloaded, and about 55% of
requests failed until AWS paused requests to it, added capacity and readmitted the fleet. The
cascade's services (SQS, Auto Scaling, CloudWatch, the Console) are its world's too.

Its code is the lab's own (the metadata service, the racks, the reference model, the runbook);
``stormlab/incidents/dynamodb_2015`` hands it to every command.
"""

from __future__ import annotations

from stormcore.incidents.declare import Account, GuardPoint, Headline, Incident
from stormcore.process import DEPENDENT, Process
from stormcore.wire import ConsoleStatus, MetricsStatus, QueuesStatus, ScalingStatus

NAME = "dynamodb-2015"
NO_STORM, PLATEAU, COLLAPSE = (0.0, 0.02), (0.40, 0.70), (0.90, 1.0)  # a branch's band of the customers' error at the end

INCIDENT = Incident(
    name=NAME,
    title="Amazon DynamoDB, us-east-1, 20 September 2015: the metadata service's retry storm",
    # 20 September 2015, minutes after the blip (2:19 AM PDT)
    account=Account(
        "20 September 2015",
        "blip",
        291,  # the blip (2:19 AM) to the recovery (7:10 AM)
        "2:19 to 7:10 AM",
        (
            (0, "2:19 AM", "a brief network disruption on a portion of the storage servers", "fault:blip"),
            (16, "2:35 AM", "CloudWatch: intermittent gaps in EC2 metrics", "page:MetricGaps"),
            (18, "2:37 AM", "customer error rate far beyond 3 years' levels, settling at ~55%", "onset"),
            (167, "5:06 AM", "AWS pauses requests to the metadata service", "move:pause-metadata"),
            (206, "5:45 AM", "SQS cannot refresh its queue metadata: errors rise", "page:QueuesFailing"),
            (291, "7:10 AM", "error rates low enough for most customers", "recovered"),
            (513, "10:52 AM", "Auto Scaling's backlog of activities drained", "step:the scaling backlog drains"),
        ),
        year="2015",
    ),
    processes=(
    Process("queues", "services.queues", DEPENDENT, 4, QueuesStatus, "the queue service (SQS): queue metadata in the lab's tables",
            holds_faults=True, role="queues", oncall="SQS's on-call: the queue service", incident=NAME),
    Process("scaling", "services.scaling", DEPENDENT, 5, ScalingStatus, "the scaling service (Auto Scaling): groups and activities",
            holds_faults=True, role="scaling", oncall="Auto Scaling's on-call: the scaling service", incident=NAME),
    Process("metrics", "services.metrics", DEPENDENT, 7, MetricsStatus, "the metrics service (CloudWatch): datapoints enriched by group",
            holds_faults=True, role="metrics", oncall="CloudWatch's on-call: the metrics service", incident=NAME),
    Process("console", "services.console", DEPENDENT, 6, ConsoleStatus, "the console: a login with one non-critical lookup",
            holds_faults=True, role="console", oncall="the Console's on-call: logins", incident=NAME),
    ),
    roles=("database", "queues", "scaling", "metrics", "console"),
    moves=("pause-metadata", "resume-metadata", "capacity",
           "stale-cache", "scale-workers", "prune-activities", "write-through", "short-timeout"),
    headline=Headline(
        "plateau_error_ratio",
        "the customers' error over the last minute (2015: about 55%)",
        PLATEAU,
        series="customer-errors",
        then=55.0,
        then_words="2015: about 55%",
    ),
    # At the 400-node fleet (10 racks of 40, 16 cores): the thresholds the model and the lab agree
    # on there. The 2015 point itself (3 racks, the plateau) is pinned live beside the model by the
    # storm test, which CI runs too. Values: the sweep's panel, the racks that lose their link, the
    # blip's seconds, the GSIs per indexed table.
    guard=(
        GuardPoint("2015|1|5|2", "no storm", NO_STORM, (("panel", "2015"), ("racks", 1), ("blip_s", 5.0), ("gsis", 2))),
        GuardPoint("2015|4|5|2", "plateau (the branch that moved)", PLATEAU,
                   (("panel", "2015"), ("racks", 4), ("blip_s", 5.0), ("gsis", 2))),
        GuardPoint("2015|6|5|2", "collapse", COLLAPSE, (("panel", "2015"), ("racks", 6), ("blip_s", 5.0), ("gsis", 2))),
        GuardPoint(
            "allowance 2s|3|5|2",
            "no storm (AWS's longer allowance)",
            NO_STORM,
            (("panel", "allowance 2s"), ("racks", 3), ("blip_s", 5.0), ("gsis", 2)),
        ),
    ),
    scenarios=("dynamodb-2015.yaml", "dynamodb-2015-mitigated.yaml", "dynamodb-2015-cascade-fixed.yaml", "room-2015.yaml"),
    dashboards=("storm-overview.json", "metadata-margin.json", "tables.json", "cascade.json"),
    alerts=("MetadataMarginLow", "RetryStorm", "CellRetryStorm", "TableSLOBurn", "ScalingAPIFailing", "ScalingBacklogDraining",
            "QueuesFailing", "MetricGaps", "LoginsSlow"),
    # its own code: its unit, and the cascade's services (the database itself, metadata_service/ and
    # storage_node/, is every incident's: the October 2025 story runs it calm)
    packages=("stormlab/incidents/dynamodb_2015", "services/queues", "services/scaling", "services/metrics", "services/console"),
)  # fmt: skip
