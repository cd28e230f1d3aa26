"""us-east-1, 19-20 October 2025 (docs/incidents/aws-2025-10.md): DynamoDB's regional endpoint left
with an empty DNS record; EC2's lease manager (DropletWorkflow Manager) lost every lease it held on
its droplets, and once the record came back, re-establishing them all at once timed out faster than
it finished: a congestive collapse that held until engineers throttled incoming work and restarted
its hosts.

Its own code: the lease manager (``services/leases``) and its story, model, certificate and guard
(``stormlab/incidents/aws_2025_10``).
"""

from __future__ import annotations

from stormcore.incidents.declare import Account, GuardPoint, Headline, Incident
from stormcore.process import DEPENDENT, Process
from stormcore.wire import LeasesStatus

NAME = "aws-2025-10"
RECOVERS, COLLAPSE = (0.0, 0.10), (0.90, 1.0)  # launch errors over the watch's last minute
ACCOUNTS_ORDER = "throttle, then restarts (the account's order)"  # a plan of stormlab/incidents/aws_2025_10/moves.py

INCIDENT = Incident(
    name=NAME,
    title="us-east-1, 19-20 October 2025: the lease manager's congestive collapse after DynamoDB's empty DNS record",
    # 19-20 October 2025, minutes after DynamoDB's endpoint lost its record (23:48 PDT)
    account=Account(
        "19-20 October 2025",
        "dns-empty",
        340,  # the empty record (23:48) to every droplet leased (05:28)
        "23:48 to 05:28",
        (
            (0, "23:48", "DynamoDB's regional endpoint left with an empty DNS record", "fault:dns-empty"),
            (157, "02:25", "the record restored by hand; the lease manager re-establishes every lease at once", "move:repair-endpoint"),
            (266, "04:14", "engineers throttle incoming work and restart the lease manager's hosts", "move:throttle"),
            (340, "05:28", "leases on every droplet; launches succeed again", "recovered"),
        ),
        own=("launch_", "lease"),
        year="2025",
    ),
    # The storage service plays DynamoDB, calm (two racks, no blip, memberships at their pre-GSI
    # sizes: no thin margin to page about); the lease manager and the customers' launches are the story.
    profile={"incident": NAME, "racks": 2, "nodes_per_rack": 50, "customer_rate": 20.0, "gsi_growth": False},
    processes=(
    Process("leases", "services.leases", DEPENDENT, 8, LeasesStatus,
            "the lease manager (EC2's DropletWorkflow Manager): a lease per droplet, its hosts' queues, the customers' launches",
            holds_faults=True, engines=False, role="leases", oncall="EC2's on-call: the lease manager (DWFM)", incident=NAME),

    ),
    roles=("leases",),
    moves=("throttle-work", "restart-host", "queue-limit"),
    headline=Headline(
        "launch_errors_after", "launches failing after the repair (2025: launches failed for hours)", COLLAPSE, "leases-launch-errors"
    ),
    # The profile's fleet (5,000 droplets, 4 hosts, leases of 60 s), each point live at speed 4 and
    # in the model on the same timeline. Values: droplets, the record's outage (profile seconds), the
    # watch after the repair; or a plan of moves (stormlab/incidents/aws_2025_10/moves.py), watched
    # `after_s` after the first, and judged before the moves or after them.
    guard=(
        GuardPoint("5000 x 30s", "no collapse (the record back before a lease lapses)", RECOVERS,
                   (("droplets", 5000), ("outage_s", 30.0), ("watch_s", 150.0))),
        GuardPoint("2500 x 90s", "recovers by itself (half the fleet: below the threshold)", RECOVERS,
                   (("droplets", 2500), ("outage_s", 90.0), ("watch_s", 150.0))),
        # One lab for the last two: the profile's outage collapses and holds until the moves (the
        # minute before them: 90-150 s after the repair), then throttle and restarts bring it back.
        GuardPoint("5000 x 90s", "collapse (every lease lapsed: the profile's outage)", COLLAPSE,
                   (("droplets", 5000), ("outage_s", 90.0), ("plan", ACCOUNTS_ORDER), ("after_s", 240.0), ("judged", "before the moves"))),
        GuardPoint("5000 x 90s, throttle then restarts", "recovers (the account's moves)", RECOVERS,
                   (("droplets", 5000), ("outage_s", 90.0), ("plan", ACCOUNTS_ORDER), ("after_s", 240.0), ("judged", "after the moves"))),
    ),
    scenarios=("aws-2025-10.yaml",),
    alerts=("LaunchesFailing",),
    packages=("services/leases", "stormlab/incidents/aws_2025_10"),
)  # fmt: skip
