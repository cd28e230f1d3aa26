"""The metadata service's metrics, in its own registry."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from stormcore.metrics import MetricFactory

LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)
ENTRY_BUCKETS = (10, 20, 30, 40, 60, 80, 100, 120, 140, 160, 200, 300, 500, 1000)
KINDS = ("membership", "admin")
OUTCOMES = ("ok", "abandoned", "paused", "overloaded", "rejected")
KIND_OUTCOME = ("kind", "outcome")


@dataclass
class MetadataMetrics:
    registry: CollectorRegistry
    requests: Counter
    processing: Histogram
    entries: Histogram
    inflight: Gauge
    cores: Gauge
    busy: Counter
    wasted: Counter
    paused: Gauge
    version: Gauge

    @classmethod
    def create(cls, cell: int = 0) -> MetadataMetrics:
        f = MetricFactory()
        # the service's cell, joined on `instance` by the per-cell rules (cell:stormlab_metadata_margin:ratio)
        f.gauge("stormlab_metadata_cell_info", "The cell this metadata service serves", ("cell",)).labels(str(cell)).set(1)
        answered = "Time from arrival to answer of completed requests (compare with the allowance)"
        m = cls(
            registry=f.registry,
            requests=f.counter("stormlab_metadata_requests_total", "Requests to the metadata service by kind and outcome", KIND_OUTCOME),
            processing=f.histogram("stormlab_metadata_processing_seconds", answered, LATENCY_BUCKETS, ["kind"]),
            entries=f.histogram("stormlab_membership_entries", "Entries in each membership list served", ENTRY_BUCKETS),
            inflight=f.gauge("stormlab_metadata_inflight", "Requests sharing the virtual CPU now"),
            cores=f.gauge("stormlab_metadata_cpu_cores", "Virtual cores of the metadata service"),
            busy=f.counter("stormlab_metadata_cpu_busy_seconds", "Virtual core-seconds of work done"),
            wasted=f.counter("stormlab_metadata_wasted_work_seconds", "Virtual core-seconds spent on requests whose client had given up"),
            paused=f.gauge("stormlab_metadata_paused", "1 while membership requests are paused"),
            version=f.gauge("stormlab_membership_version", "Version of the membership store"),
        )
        for kind in KINDS:
            m.processing.labels(kind)
            for outcome in OUTCOMES:
                m.requests.labels(kind, outcome)
        return m
