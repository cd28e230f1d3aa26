"""An external rack: storage nodes the lab did not write, renewing on urllib3's own retries.

    stormlab up --external-rack "python examples/external_rack/urllib3_rack.py" \\
                --retry-policy examples/external_rack/urllib3_rack.py:RETRY

runs this as rack 0 of the lab (docs/contract.md): its nodes renew their memberships through
rack 0's link with urllib3 (``RETRY`` below, the retries a service might ship), refuse customers
when a renewal misses, and answer the lab's status and item requests. The second flag gives the
lab's own racks the same ``Retry`` (the lab reads it through its urllib3 adapter), so the two can
be compared in one storm. Nothing here imports the lab: it is the standard library and urllib3.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import urllib3
from urllib3.util.retry import Retry

# The retries this rack runs: five at most, exponential backoff with jitter, 503 refusals retried.
RETRY = Retry(total=5, backoff_factor=0.5, backoff_max=10, backoff_jitter=0.5, status_forcelist=[503], raise_on_status=False)

ITEM = re.compile(r"^/nodes/(?P<node>[^/]+)/tables/(?P<table>[^/]+)/partitions/(?P<partition>[^/]+)/items/(?P<key>[^/]+)$")


class Node:
    """One storage node: its membership, and whether it may serve (its last renewal, on time)."""

    def __init__(self, rack: Rack, node_id: str) -> None:
        self.rack, self.id = rack, node_id
        self.owned: set[tuple[str, str | None, int]] = set()
        self.lock = threading.Lock()
        self.began = 0.0  # when the renewal under way began
        self.ok_at: float | None = None  # the last successful renewal
        self.before = "starting"  # the state when the renewal under way began
        self.items: dict[tuple[str, int, str], object] = {}

    def state(self, now: float) -> str:
        with self.lock:
            return self.state_unlocked(now)

    def run(self, phase: float) -> None:
        r = self.rack
        slot = r.origin + phase * r.period_s
        while not r.stopping.is_set():
            now = time.time()
            while slot < now:
                slot += r.period_s
            if r.stopping.wait(slot - now):
                return
            self.renew()

    def renew(self) -> None:
        r = self.rack
        with self.lock:
            self.before = self.state_unlocked(time.time())
            self.began = time.time()
        with r.count_lock:
            r.renewals += 1
        try:
            answer = r.http.request(
                "GET",
                f"{r.link_url}/membership/{self.id}",
                headers={r.deadline_header: f"{r.allowance_s:g}"},
                timeout=urllib3.Timeout(total=r.allowance_s),
                retries=RETRY,
            )
        except urllib3.exceptions.HTTPError:
            return  # out of retries: the node stays disqualified until a renewal succeeds
        if answer.status != 200:
            return
        try:
            doc = json.loads(answer.data)
            owned = {(e["table"], e["index"], int(e["partition"])) for e in doc["entries"]}
        except (ValueError, KeyError, TypeError):
            return
        now = time.time()
        with self.lock:
            self.owned, self.ok_at = owned, now
        r.latencies.append((now, now - self.began))

    def state_unlocked(self, now: float) -> str:
        """Serving while its renewal succeeds within the allowance; disqualified once one has not."""
        if self.ok_at is not None and self.ok_at >= self.began:
            return "serving"
        if now < self.began + self.rack.allowance_s:
            return self.before
        return "disqualified"


class Rack:
    def __init__(self, env: dict[str, str]) -> None:
        self.index = int(env["STORMLAB_RACK"])
        self.link_url = env["STORMLAB_LINK_URL"].rstrip("/")
        self.period_s = float(env["STORMLAB_WALL_RENEWAL_PERIOD_S"])
        self.allowance_s = float(env["STORMLAB_WALL_ALLOWANCE_S"])
        self.deadline_header = env["STORMLAB_DEADLINE_HEADER"]
        self.origin = float(env.get("STORMLAB_SCHEDULE_ORIGIN") or time.time())
        self.seed = env.get("STORMLAB_SEED", "2015")
        self.nodes = {n: Node(self, n) for n in env["STORMLAB_NODE_IDS"].split(",")}
        self.http = urllib3.PoolManager(maxsize=len(self.nodes), block=False, retries=False)
        self.latencies: deque[tuple[float, float]] = deque(maxlen=10_000)
        self.stopping = threading.Event()
        self.count_lock = threading.Lock()
        self.renewals = 0  # renewals begun (each one's first attempt)

    def start(self) -> None:
        for node in self.nodes.values():
            phase = random.Random(f"{self.seed}/{node.id}").random()  # spread over one period, as the lab's nodes are
            threading.Thread(target=node.run, args=(phase,), daemon=True).start()

    def attempts(self) -> int:
        return self.http.connection_from_url(self.link_url).num_requests  # every attempt, retries included

    def status(self, with_nodes: bool) -> dict:
        now = time.time()
        states = {n.id: n.state(now) for n in self.nodes.values()}
        recent = sorted(d for t, d in list(self.latencies) if t > now - 10)
        renewals = self.renewals
        return {
            "component": "rack",
            "loop_lag_p99_s": 0.0,
            "rack": self.index,
            "pid": os.getpid(),
            "link_up": True,
            "nodes_total": len(states),
            "nodes_serving": sum(s == "serving" for s in states.values()),
            "nodes_disqualified": sum(s == "disqualified" for s in states.values()),
            "nodes_starting": sum(s == "starting" for s in states.values()),
            "renewal_p99_s": recent[int(0.99 * (len(recent) - 1))] if recent else None,
            "renewal_attempts_total": {"first": float(renewals), "retry": float(max(0, self.attempts() - renewals))},
            "allowance_s": self.allowance_s,
            "nodes": [{"id": n, "state": s} for n, s in states.items()] if with_nodes else None,
            "schedule_origin_unix": self.origin,
        }

    def metrics(self) -> str:
        now = time.time()
        counts: dict[str, int] = {"serving": 0, "disqualified": 0, "starting": 0}
        for n in self.nodes.values():
            counts[n.state(now)] += 1
        lines = ["# TYPE stormlab_nodes gauge"]
        lines += [f'stormlab_nodes{{rack="{self.index}",state="{s}"}} {c}' for s, c in counts.items()]
        return "\n".join(lines) + "\n"


def handler_for(rack: Rack) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            return None

        def answer(self, status: int, body: object, kind: str = "application/json") -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            if url.path == "/healthz":
                self.answer(200, {"ok": True})
            elif url.path == "/status":
                self.answer(200, rack.status(parse_qs(url.query).get("nodes") == ["1"]))
            elif url.path == "/metrics":
                self.answer(200, rack.metrics(), "text/plain; version=0.0.4")
            else:
                self.item(url.path, parse_qs(url.query).get("index", [None])[0], None)

        def do_PUT(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"null")
            except ValueError:
                body = None
            if not isinstance(body, dict) or "value" not in body:
                self.answer(400, {"error": "bad_request", "message": 'the body is {"value": …}'})
                return
            self.item(urlsplit(self.path).path, None, body)

        def item(self, path: str, index: str | None, body: dict | None) -> None:
            m = ITEM.match(path)
            if m is None:
                self.answer(404, {"error": "not_found", "message": f"no {path}"})
                return
            node = rack.nodes.get(m["node"])
            if node is None:
                self.answer(404, {"error": "unknown_node", "message": f"no node {m['node']} on rack {rack.index}"})
                return
            if not m["partition"].isdigit():
                self.answer(400, {"error": "bad_request", "message": "a partition is a non-negative integer"})
                return
            partition = int(m["partition"])
            if node.state(time.time()) != "serving":
                self.answer(503, {"error": "disqualified", "message": f"node {node.id} refuses requests: membership renewal missed"})
                return
            if (m["table"], index, partition) not in node.owned:
                self.answer(409, {"error": "wrong_owner", "message": f"node {node.id} does not hold {m['table']}/{partition}"})
                return
            where = (m["table"], partition, m["key"])
            if body is not None:
                node.items[where] = body["value"]
                self.answer(200, {"node": node.id, "key": m["key"], "stored": True})
            elif index is not None:
                self.answer(200, {"node": node.id, "index": index, "items": []})
            elif where in node.items:
                self.answer(200, {"node": node.id, "key": m["key"], "value": node.items[where]})
            else:
                self.answer(404, {"error": "not_found", "message": f"no item {m['key']}"})

    return Handler


def main() -> None:
    rack = Rack(dict(os.environ))
    server = ThreadingHTTPServer((os.environ.get("STORMLAB_HOST", "127.0.0.1"), int(os.environ["STORMLAB_PORT"])), handler_for(rack))
    server.daemon_threads = True
    rack.start()
    try:
        server.serve_forever()
    finally:
        rack.stopping.set()


if __name__ == "__main__":
    main()
