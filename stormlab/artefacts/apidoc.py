"""The table of every process's HTTP operations in docs/api.md, from the descriptions the processes
serve at ``/openapi.json`` (``python -m stormlab.artefacts.apidoc`` prints it; a test keeps the two the same).

The apps are built, not started: nothing listens and nothing is written but a scratch directory.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from chaos.linkproxy import create_app as proxy_app
from metadata_service.app import create_app as metadata_app
from services.console.app import create_app as console_app
from services.leases.app import create_app as leases_app
from services.loadgen.app import create_app as loadgen_app
from services.metrics.app import create_app as metrics_app
from services.queues.app import create_app as queues_app
from services.scaling.app import create_app as scaling_app
from storage_node.app import create_app as rack_app
from stormcore import openapi
from stormcore.racks import RackUrls
from stormcore.settings import LabSettings
from stormlab.engine.supervisor import Supervisor
from stormlab.engine.supervisor import create_app as supervisor_app

SETTINGS = LabSettings(racks=2, nodes_per_rack=5, customer_rate=0)
TOKEN = "a-token-for-building-the-apps"
NOWHERE, RACKS = "http://127.0.0.1:1", ["http://127.0.0.1:2"]


def _supervisor(tmp: Path) -> web.Application:
    (tmp / "plan.json").write_text(json.dumps({"components": [], "supervisor_port": 0}))
    return supervisor_app(Supervisor(tmp))


APPS: dict[str, Callable[[Path], web.Application]] = {
    "metadata": lambda tmp: metadata_app(SETTINGS, token=TOKEN),
    "rack-NN": lambda tmp: rack_app(SETTINGS, 0, NOWHERE, tmp),
    "loadgen": lambda tmp: loadgen_app(SETTINGS, NOWHERE, RackUrls(RACKS)),
    "queues": lambda tmp: queues_app(SETTINGS, NOWHERE, RackUrls(RACKS), tmp),
    "scaling": lambda tmp: scaling_app(SETTINGS, NOWHERE, RackUrls(RACKS), tmp),
    "console": lambda tmp: console_app(SETTINGS, NOWHERE, RackUrls(RACKS), tmp),
    "metrics": lambda tmp: metrics_app(SETTINGS, NOWHERE, RackUrls(RACKS), tmp),
    "leases": lambda tmp: leases_app(SETTINGS, NOWHERE, RackUrls(RACKS), tmp),
    "linkproxy": lambda tmp: proxy_app(("127.0.0.1", 1), {0: ("127.0.0.1", 2), 1: ("127.0.0.1", 3)}, token=TOKEN),
    "supervisor": _supervisor,
}


def build(name: str, tmp: Path, apps: dict[str, Callable[[Path], web.Application]] | None = None) -> web.Application:
    os.environ.setdefault("STORMLAB_TOKEN", TOKEN)  # the supervisor reads it from the environment
    return (apps or APPS)[name](tmp)


INTRO = (
    "Every process also serves `GET /openapi.json`, `GET /metrics` and `GET /healthz`. The supervisor's "
    "`GET /contract.json` is the rack contract, what any rack answers (docs/contract.md)."
)


def markdown(apps: dict[str, Callable[[Path], web.Application]] | None = None, intro: str = INTRO) -> str:
    """The table of ``apps``' operations (the lab's processes by default), after ``intro``."""
    rows = [intro, "", "| process | operation | answers | token | what it does |", "| --- | --- | --- | --- | --- |"]
    with tempfile.TemporaryDirectory() as tmp:
        for name in apps or APPS:
            doc = openapi.document(build(name, Path(tmp), apps))
            for path, methods in doc["paths"].items():
                for method, op in methods.items():
                    if op.get("tags") == ["common"]:
                        continue
                    answers = ", ".join(op["responses"])
                    token = "yes" if op.get("security") else ""
                    rows.append(f"| {name} | `{method.upper()} {path}` | {answers} | {token} | {op['summary']} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown())
