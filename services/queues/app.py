"""queues: the lab's SQS. Its queue metadata lives in the lab's ``queue-metadata`` table and is
cached here; its messages are its own (``messages.py``).

  POST   /queues/{queue}/messages            {"body": …}  send; 201 {"id"} once the message is committed
  POST   /queues/{queue}/receive             {"max": N, "visibility_timeout_s": S}  up to N (1-10) messages,
                                             each hidden for S seconds and handed out with a receipt
  DELETE /queues/{queue}/messages/{receipt}  delete a received message (SQS's DeleteMessage)
  GET    /queues/{queue}                     how many messages it holds, and how many are in flight

As in SQS, delivery is at least once: a message received and not deleted within its visibility
timeout (the receiver crashed, or its answer never arrived) is received again.
  GET  /status, /metrics, /healthz

A call whose queue metadata is older than ``queue_cache_ttl_s`` refreshes it from the table
first. If that fails, the call still goes on with the cached row while at least half of the
cached rows' last refreshes succeeded: the storm disqualifies the nodes holding a minority of
the queues' rows, so the queues ride it out, as SQS did in 2015. When most refreshes fail (the
fleet held back, 5:45 AM in 2015) the call fails (503 ``queue_metadata_unavailable``), unless
the fix ``fix_stale_cache`` is on. The service's own clients send and receive ``cascade_rate``
times a second.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from services import dependent
from services.cache import TtlCache
from services.dependent import Switch, fix_gauge
from services.queues.messages import AsyncMessageStore
from services.storage import Storage, StorageError
from stormcore import openapi, sqlite
from stormcore.documents import encoded_bytes
from stormcore.metrics import MetricFactory
from stormcore.openapi import ERROR, Answer, Operation
from stormcore.racks import RackUrls
from stormcore.settings import LabSettings
from stormcore.web import BadRequest, json_error, number, read_object
from stormcore.window import Window
from stormcore.wire import HostReadings, QueuesStatus

TABLE = "queue-metadata"
CLIENT_QUEUES = tuple(f"q-{i}" for i in range(8))  # what the service's own clients send to and receive from
CHECKS = "checks"  # a queue they never touch: the write checker's (`stormlab writecheck --queues`)
QUEUES = (*CLIENT_QUEUES, CHECKS)
OPS = ("send", "receive", "delete")
OUTCOMES = ("ok", "unavailable")
MAX_BODY = 4096
MAX_VISIBILITY_S = 43_200.0  # SQS's limit: 12 hours
RECEIPT = re.compile(r"[0-9]{1,19}\.[0-9a-f]{16}")
T = TypeVar("T")


class Unavailable(Exception):
    """The queue's metadata could not be refreshed and no stale copy may be used."""


class QueueService:
    def __init__(self, settings: LabSettings, storage: Storage, messages: AsyncMessageStore, f: MetricFactory) -> None:
        self.settings, self.storage, self.messages = settings, storage, messages
        self.cache = TtlCache(settings.queue_cache_ttl_s, settings.fix_stale_cache, ride_out=True)
        self.window = Window(span_s=10.0)
        self.requests = f.counter("stormlab_queue_requests_total", "Send, receive and delete calls by outcome", ("op", "outcome"))
        self.refreshes = f.counter("stormlab_queue_metadata_refreshes_total", "Queue metadata refreshes from the table", ("outcome",))
        self.age = f.gauge("stormlab_queue_metadata_age_seconds", "Age of the oldest cached queue metadata")
        self.stored = f.gauge("stormlab_queue_messages", "Messages sent and not yet deleted")
        gauges = fix_gauge(f, "queues", {"stale-cache": settings.fix_stale_cache})
        self.switches = {"stale-cache": Switch(gauges["stale-cache"], settings.fix_stale_cache, self._serve_stale)}
        for op in OPS:
            for outcome in OUTCOMES:
                self.requests.labels(op, outcome)
        for outcome in ("ok", "failed", "stale"):
            self.refreshes.labels(outcome)
        self.sent = self.failed = 0

    def _serve_stale(self, on: bool) -> None:
        self.cache.serve_stale = on

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def metadata(self, queue: str) -> dict[str, Any]:
        if self.cache.fresh(queue, self.now()):
            return self.cache.entries[queue][0]
        try:
            row = await self.storage.get(TABLE, queue)
            if row is None:  # a queue's first use: its metadata row is written to the table
                row = {"queue": queue, "visibility_timeout_s": 30}
                await self.storage.put(TABLE, queue, row)
        except StorageError as exc:
            if self.cache.refresh_failed(queue):
                self.refreshes.labels("stale").inc()
                return self.cache.entries[queue][0]
            self.refreshes.labels("failed").inc()
            raise Unavailable(f"queue metadata of {queue} could not be refreshed: {exc}") from None
        self.refreshes.labels("ok").inc()
        self.cache.store(queue, row, self.now())
        return row

    def record(self, op: str, ok: bool) -> None:
        self.requests.labels(op, "ok" if ok else "unavailable").inc()
        self.window.add(self.now(), 0.0 if ok else 1.0)
        self.sent += 1
        self.failed += 0 if ok else 1

    async def send(self, queue: str, body: Any) -> int:
        return await self._with_metadata("send", queue, lambda _row: self.messages.send(queue, body))

    async def receive(self, queue: str, most: int, visibility_s: float | None = None) -> list[dict[str, Any]]:
        """Up to ``most`` messages, hidden for ``visibility_s`` (the queue's own timeout if None,
        in profile time like every duration people give)."""

        def act(row: dict[str, Any]) -> Awaitable[list[dict[str, Any]]]:
            given = row.get("visibility_timeout_s", 30) if visibility_s is None else visibility_s
            return self.messages.receive(queue, most, self.settings.pace.wall(float(given)))

        return await self._with_metadata("receive", queue, act)

    async def delete(self, queue: str, receipt: str) -> bool:
        return await self._with_metadata("delete", queue, lambda _row: self.messages.delete(queue, receipt))

    async def _with_metadata(self, op: str, queue: str, act: Callable[[dict[str, Any]], Awaitable[T]]) -> T:
        """A call goes on only with its queue's metadata (fresh, or stale by the fix)."""
        try:
            row = await self.metadata(queue)
        except Unavailable:
            self.record(op, False)
            raise
        result = await act(row)
        self.record(op, True)
        return result

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        return [self.clients()] if self.settings.cascade_rate > 0 else []

    def close(self) -> None:
        self.messages.close()

    async def clients(self) -> None:
        """The service's own customers: a send and a receive, ``cascade_rate`` times a second."""
        rng = random.Random(f"{self.settings.seed}/queues")
        while True:
            await asyncio.sleep(1.0 / self.settings.cascade_rate)
            try:
                await self.send(rng.choice(CLIENT_QUEUES), {"at": self.now()})
                queue = rng.choice(CLIENT_QUEUES)
                for message in await self.receive(queue, 10):
                    await self.delete(queue, message["receipt"])
            except (Unavailable, sqlite.StoreFull):
                pass

    async def status(self, host: HostReadings) -> QueuesStatus:
        now = self.now()
        depth, hidden = await self.messages.depth()
        self.stored.set(depth)
        self.age.set(self.cache.oldest_age_s(now))
        return QueuesStatus(
            **host,
            error_ratio=self.window.mean(now),
            requests_total=self.sent,
            failures_total=self.failed,
            metadata_age_s=round(self.cache.oldest_age_s(now), 3),
            messages_stored=depth,
            fix_stale_cache=self.cache.serve_stale,
            messages_in_flight=hidden,
        )


SERVICE = web.AppKey("queues", QueueService)


def create_app(settings: LabSettings, metadata_url: str, rack_urls: RackUrls, data_dir: Path) -> web.Application:
    def make(storage: Storage, f: MetricFactory) -> QueueService:
        return QueueService(settings, storage, AsyncMessageStore(data_dir / "queues.sqlite3"), f)

    app = dependent.create_app(settings, metadata_url, rack_urls, data_dir, SERVICE, make, QueuesStatus, (TABLE,))

    def queue(request: web.Request) -> str:
        name = request.match_info["queue"]
        if name not in QUEUES:
            raise web.HTTPNotFound(text=f"no queue {name!r}; queues: {', '.join(QUEUES)}")
        return name

    async def send(request: web.Request) -> web.Response:
        name = queue(request)
        body = await read_object(request)
        if "body" not in body or encoded_bytes(body["body"]) > MAX_BODY:
            raise BadRequest(f'body must be {{"body": …}} of at most {MAX_BODY} bytes as JSON (UTF-8)')
        try:
            message_id = await request.app[SERVICE].send(name, body["body"])
        except Unavailable as exc:
            return json_error(503, "queue_metadata_unavailable", str(exc))
        except sqlite.StoreFull as exc:
            return json_error(507, "queue_full", f"the queues' store is full: {exc}; receive and delete to make room")
        return web.json_response({"id": message_id}, status=201)

    async def receive(request: web.Request) -> web.Response:
        name = queue(request)
        body = await read_object(request)
        unknown = sorted(set(body) - {"max", "visibility_timeout_s"})
        if unknown:
            raise BadRequest(f"receive takes max and visibility_timeout_s, not {', '.join(unknown)}")
        most = int(number(body | {"max": body.get("max", 1)}, "max", 1, 10, integer=True))
        visibility = number(body, "visibility_timeout_s", 0, MAX_VISIBILITY_S) if "visibility_timeout_s" in body else None
        try:
            got = await request.app[SERVICE].receive(name, most, visibility)
        except Unavailable as exc:
            return json_error(503, "queue_metadata_unavailable", str(exc))
        return web.json_response({"messages": got})

    async def attributes(request: web.Request) -> web.Response:
        name = queue(request)
        stored, hidden = await request.app[SERVICE].messages.depth(name)
        return web.json_response({"queue": name, "stored": stored, "in_flight": hidden})

    async def delete(request: web.Request) -> web.Response:
        name, receipt = queue(request), request.match_info["receipt"]
        if not RECEIPT.fullmatch(receipt):
            raise BadRequest("receipt must be one a receive handed out, e.g. 12.0123456789abcdef")
        try:
            deleted = await request.app[SERVICE].delete(name, receipt)
        except Unavailable as exc:
            return json_error(503, "queue_metadata_unavailable", str(exc))
        return web.json_response({"deleted": deleted})

    where = ({"name": "queue", "in": "path", "required": True, "schema": {"type": "string", "examples": list(QUEUES)}},)
    unavailable = Answer("the queue's metadata could not be read from the database", ERROR)
    message = {"type": "object", "required": ["body"], "properties": {"body": {}}}
    openapi.add(app, Operation("POST", "/queues/{queue}/messages", f"send a message (at most {MAX_BODY} bytes)", {
        201: Answer("sent", {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}}),
        404: Answer("no such queue", ERROR),
        507: Answer("the queues' store is at its quota on disk (64 MiB): nothing stored", ERROR),
        503: unavailable,
    }, parameters=where, body=message, body_required=True, tag="queues"), send)  # fmt: skip
    most = {
        "type": "object",
        "properties": {
            "max": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
            "visibility_timeout_s": {"type": "number", "minimum": 0, "maximum": MAX_VISIBILITY_S,
                                     "description": "how long the messages stay hidden (the queue's 30 s if not given)"},
        },
        "additionalProperties": False,
    }  # fmt: skip
    received = {
        "type": "object",
        "required": ["id", "body", "receipt", "receives"],
        "properties": {"id": {"type": "integer"}, "body": {}, "receipt": {"type": "string"}, "receives": {"type": "integer", "minimum": 1}},
    }
    messages = {"type": "object", "required": ["messages"], "properties": {"messages": {"type": "array", "items": received}}}
    openapi.add(app, Operation("POST", "/queues/{queue}/receive", "receive up to max messages, each hidden for its visibility timeout", {
        200: Answer("the messages received (perhaps none), each with the receipt that deletes it", messages),
        400: Answer("max or visibility_timeout_s out of range", ERROR),
        404: Answer("no such queue", ERROR),
        503: unavailable,
    }, parameters=where, body=most, tag="queues"), receive)  # fmt: skip
    depth = {
        "type": "object",
        "required": ["queue", "stored", "in_flight"],
        "properties": {
            "queue": {"type": "string"},
            "stored": {"type": "integer", "minimum": 0},
            "in_flight": {"type": "integer", "minimum": 0},
        },
    }
    openapi.add(app, Operation("GET", "/queues/{queue}", "how many messages the queue holds, and how many a receive hides now", {
        200: Answer("the queue's depth (SQS's approximate numbers of messages, visible and not)", depth),
        404: Answer("no such queue", ERROR),
    }, parameters=where, tag="queues"), attributes)  # fmt: skip
    receipt = {"name": "receipt", "in": "path", "required": True, "schema": {"type": "string", "pattern": RECEIPT.pattern}}
    deleted = {"type": "object", "required": ["deleted"], "properties": {"deleted": {"type": "boolean"}}}
    openapi.add(app, Operation("DELETE", "/queues/{queue}/messages/{receipt}", "delete a message received with this receipt", {
        200: Answer("deleted, or false: gone already or received again since (its newer receipt deletes it)", deleted),
        400: Answer("not a receipt", ERROR),
        404: Answer("no such queue", ERROR),
        503: unavailable,
    }, parameters=(*where, receipt), tag="queues"), delete)  # fmt: skip
    return app
