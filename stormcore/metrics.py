"""Short constructors for a process's own metrics registry (each process has one; a test
makes a fresh one per app)."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Counted by every process that runs a user's retry policy (the racks, the lease manager): one name.
POLICY_BROKEN = "stormlab_retry_policy_broken_total"
POLICY_BROKEN_DOC = "Calls into a user's retry policy that raised or broke the protocol, answered by the protocol's default"


class MetricFactory:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()

    def counter(self, name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(name, doc, list(labels), registry=self.registry)

    def gauge(self, name: str, doc: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(name, doc, list(labels), registry=self.registry)

    def histogram(self, name: str, doc: str, buckets: Sequence[float], labels: Sequence[str] = ()) -> Histogram:
        return Histogram(name, doc, list(labels), buckets=buckets, registry=self.registry)
