"""The Kubernetes base's ConfigMaps, from the repository's own Prometheus, Alertmanager and
Grafana files (``deploy/k8s/base/config.yaml``; kustomize may not read files above its
directory, so they are written there). ``python -m stormlab.artefacts.k8s_config`` (``make k8s-config``)
writes it; a test fails when it no longer matches the files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "deploy/k8s/base/config.yaml"
MAPS = {  # ConfigMap -> {key: file}
    "prometheus-config": {
        "prometheus.yml": "prometheus/prometheus.yml",
        "recording.yml": "prometheus/rules/recording.yml",
        "alerts.yml": "prometheus/rules/alerts.yml",
    },
    "alertmanager-config": {"alertmanager.yml": "alertmanager/alertmanager.yml"},
    "grafana-datasources": {"prometheus.yml": "grafana/provisioning/datasources/prometheus.yml"},
    "grafana-dashboard-providers": {"stormlab.yml": "grafana/provisioning/dashboards/stormlab.yml"},
    "grafana-dashboards": {p.name: f"grafana/dashboards/{p.name}" for p in sorted((ROOT / "grafana/dashboards").glob("*.json"))},
}


class _Literal(yaml.SafeDumper):
    """Multi-line strings as literal blocks, so the files read as themselves."""


_Literal.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))


def configmaps(root: Path = ROOT) -> str:
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": name.split("-")[0]}},
            "data": {key: (root / path).read_text() for key, path in files.items()},
        }
        for name, files in MAPS.items()
    ]
    head = "# Written by `make k8s-config` from the repository's prometheus/, alertmanager/ and grafana/\n# files: edit those, not this.\n"
    return head + yaml.dump_all(docs, Dumper=_Literal, sort_keys=False, width=1_000_000)


if __name__ == "__main__":
    TARGET.write_text(configmaps())
    print(f"wrote {TARGET.relative_to(ROOT)}", file=sys.stderr)
