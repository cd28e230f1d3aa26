"""A rack's metrics, in its own registry. Per-node state is in /status, not in labels."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from storage_node.refusal import NodeState

RENEWAL_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0)
RENEWAL_OUTCOMES = ("ok", "timeout", "unreachable", "paused", "error")
ATTEMPTS = ("first", "retry")
SERVED_OUTCOMES = ("ok", "not_found", "refused", "wrong_owner", "bad_request")


@dataclass
class RackMetrics:
    registry: CollectorRegistry
    renewals: Counter
    renewal_seconds: Histogram
    nodes: Gauge
    disqualifications: Counter
    link_up: Gauge
    link_restores: Counter
    served: Counter
    allowance: Gauge

    @classmethod
    def create(cls, rack: int) -> RackMetrics:
        r = CollectorRegistry()
        m = cls(
            registry=r,
            renewals=Counter(
                "stormlab_renewals_total", "Membership renewal attempts by attempt and outcome", ["rack", "attempt", "outcome"], registry=r
            ),
            renewal_seconds=Histogram(
                "stormlab_renewal_seconds",
                "Duration of renewal attempts (misses count up to the allowance)",
                ["rack"],
                buckets=RENEWAL_BUCKETS,
                registry=r,
            ),
            nodes=Gauge("stormlab_nodes", "Storage nodes by refusal state", ["rack", "state"], registry=r),
            disqualifications=Counter("stormlab_node_disqualifications_total", "Times a node disqualified itself", ["rack"], registry=r),
            link_up=Gauge("stormlab_link_up", "1 while the rack's probe reaches the metadata service", ["rack"], registry=r),
            link_restores=Counter(
                "stormlab_link_restores_total", "Times the rack's link came back (every node renews at once)", ["rack"], registry=r
            ),
            served=Counter(
                "stormlab_node_requests_total", "Customer requests answered by the rack's nodes", ["rack", "outcome"], registry=r
            ),
            allowance=Gauge(
                "stormlab_renewal_allowance_seconds",
                "The allowance: a renewal not answered by then disqualifies its node",
                ["rack"],
                registry=r,
            ),
        )
        label = str(rack)
        for attempt in ATTEMPTS:
            for outcome in RENEWAL_OUTCOMES:
                m.renewals.labels(label, attempt, outcome)
        for state in NodeState:
            m.nodes.labels(label, state.value)
        for outcome in SERVED_OUTCOMES:
            m.served.labels(label, outcome)
        m.renewal_seconds.labels(label)
        m.disqualifications.labels(label)
        m.link_restores.labels(label)
        m.link_up.labels(label).set(1)
        return m
