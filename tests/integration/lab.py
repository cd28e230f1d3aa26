"""Helpers for tests that start a real lab."""

import json
import time
import urllib.request


def wait_serving(state, limit_s=20.0):
    """Every node has its membership (a lab just started refuses until then)."""
    racks = [c["url"] for n, c in state["components"].items() if n.startswith("rack-")]
    for _ in range(int(limit_s / 0.2)):
        statuses = [json.loads(urllib.request.urlopen(f"{url}/status", timeout=2).read()) for url in racks]
        if all(s["nodes_serving"] == s["nodes_total"] for s in statuses):
            return
        time.sleep(0.2)
    raise AssertionError("the lab's nodes did not all serve")
