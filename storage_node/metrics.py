"""A rack's metrics, in its own registry. Per-node state is in /status, not in labels."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from storage_node.refusal import NodeState
from stormcore.metrics import POLICY_BROKEN, POLICY_BROKEN_DOC, MetricFactory
from stormcore.retry import CALLS

RENEWAL_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0)
RENEWAL_OUTCOMES = ("ok", "timeout", "unreachable", "paused", "overloaded", "breaker", "error")
ATTEMPTS = ("first", "retry")
RENEWAL_LABELS = ("rack", "attempt", "outcome")
SERVED_OUTCOMES = ("ok", "not_found", "refused", "wrong_owner", "bad_request", "quota")


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
    policy_broken: Counter

    @classmethod
    def create(cls, rack: int, cell: int = 0) -> RackMetrics:
        f = MetricFactory()
        rack_ = ("rack",)
        # the rack's cell, joined on `rack` by the per-cell rules (cell:stormlab_nodes_disqualified:ratio)
        cell_info = f.gauge("stormlab_rack_cell_info", "The cell whose metadata service the rack renews with", ("rack", "cell"))
        cell_info.labels(str(rack), str(cell)).set(1)
        m = cls(
            registry=f.registry,
            renewals=f.counter("stormlab_renewals_total", "Membership renewal attempts by attempt and outcome", RENEWAL_LABELS),
            renewal_seconds=f.histogram(
                "stormlab_renewal_seconds", "Duration of renewal attempts (misses count up to the allowance)", RENEWAL_BUCKETS, rack_
            ),
            nodes=f.gauge("stormlab_nodes", "Storage nodes by refusal state", ("rack", "state")),
            disqualifications=f.counter("stormlab_node_disqualifications_total", "Times a node disqualified itself", rack_),
            link_up=f.gauge("stormlab_link_up", "1 while the rack's probe reaches the metadata service", rack_),
            link_restores=f.counter("stormlab_link_restores_total", "Times the rack's link came back (every node renews at once)", rack_),
            served=f.counter("stormlab_node_requests_total", "Customer requests answered by the rack's nodes", ("rack", "outcome")),
            allowance=f.gauge("stormlab_renewal_allowance_seconds", "The allowance: a renewal not answered by then disqualifies", rack_),
            policy_broken=f.counter(POLICY_BROKEN, POLICY_BROKEN_DOC, ("rack", "call")),
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
        for call in CALLS:
            m.policy_broken.labels(label, call)
        return m
