"""docs/metrics.md lists exactly the metrics the code exports, with their types."""

import asyncio
import re
from pathlib import Path
from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from chaos.linkproxy import LinkProxy
from metadata_service.metrics import MetadataMetrics
from services.console.app import Console
from services.leases.app import LeaseService
from services.leases.endpoint import Endpoint
from services.loadgen.app import Generator
from services.metrics.app import MetricsService
from services.queues.app import QueueService
from services.scaling.app import ScalingService
from storage_node.metrics import RackMetrics
from stormcore.metrics import MetricFactory
from stormcore.settings import LabSettings
from stormcore.web import LoopLag

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
ROW = re.compile(r"^\| `(stormlab_[a-z0-9_]+)` \| (counter|gauge|histogram) \|", re.M)


def exported() -> dict[str, str]:
    queues = MetricFactory()
    QueueService(LabSettings(), None, None, queues)  # their metrics are made in their constructors
    scaling = MetricFactory()
    ScalingService(LabSettings(), None, scaling)
    console = MetricFactory()
    Console(LabSettings(), None, console)
    metrics = MetricFactory()
    MetricsService(LabSettings(), None, None, metrics)
    leases = MetricFactory()

    async def lease_manager() -> None:  # its CPUs take the running loop
        LeaseService(LabSettings(lease_droplets=8, lease_hosts=2), SimpleNamespace(endpoint=Endpoint()), leases)

    asyncio.run(lease_manager())
    registries = [
        MetadataMetrics.create().registry,
        RackMetrics.create(0).registry,
        queues.registry,
        scaling.registry,
        console.registry,
        metrics.registry,
        leases.registry,
    ]
    for make in (lambda r: LoopLag(r), lambda r: LinkProxy(("127.0.0.1", 1), r), lambda r: Generator(LabSettings(), "http://x", [], r)):
        registry = CollectorRegistry()
        make(registry)
        registries.append(registry)
    names = {}
    for registry in registries:
        for family in registry.collect():
            name = family.name + ("_total" if family.type == "counter" else "")
            names[name] = family.type
    return names


def test_every_metric_is_documented_and_every_documented_metric_exists():
    documented = dict(ROW.findall(DOC.read_text()))
    assert documented == exported()


def test_names_follow_the_contract():
    for name, kind in exported().items():
        assert name.startswith("stormlab_")
        assert (kind == "counter") == name.endswith("_total")
