"""The desk's HTTP API described (OpenAPI, served at its ``/openapi.json``): every route of
stormlab/responder/desk_web.py with what it takes and every answer it gives, so `stormlab fuzz`
judges the desk as it judges the lab's processes."""

from __future__ import annotations

from typing import Any

from stormcore.openapi import ERROR, Answer, Operation
from stormlab.responder.desk import ANSWERS, LIVE_MAX_MESSAGE, TEAM
from stormlab.responder.moves import ACTIONS, ROLES

OBJECT: dict[str, Any] = {"type": "object"}
LIST: dict[str, Any] = {"type": "array"}
HTML = Answer("the page", {"type": "string"}, media="text/html")
TOO_LARGE = Answer("too_large: one record over its size (a move's arguments 4 kB, a page 8 kB, an inject 4 kB)", ERROR)
TOO_MANY = Answer("too_many: the game's budget for its kind is spent (moves, pages or injects): nothing taken", ERROR)
NO_GAME = Answer("no_game: no game runs behind this desk", ERROR)

WEBHOOK = {
    "type": "object",
    "required": ["alerts"],
    "properties": {
        "alerts": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["labels"],
                "properties": {
                    "labels": {
                        "type": "object",
                        "required": ["alertname"],
                        "properties": {"alertname": {"type": "string", "minLength": 1}},
                    },
                    "annotations": OBJECT,
                    "status": {"enum": ["firing", "resolved"]},
                },
            },
        }
    },
}
MOVE = {
    "type": "object",
    "required": ["action", "as"],
    "properties": {"action": {"enum": list(ACTIONS)}, "args": OBJECT, "as": {"enum": list(ROLES)}},
}
MOVED = {
    "type": "object",
    "required": ["ok", "message", "role", "exit_code"],
    "properties": {"ok": {"type": "boolean"}, "message": {"type": "string"}, "role": {"type": "string"}, "exit_code": {"type": "integer"}},
}
INJECT: dict[str, Any] = {
    "type": "object",
    "required": ["to", "message"],
    "properties": {
        "to": {"enum": [*ROLES, TEAM]},
        "message": {"type": "string", "minLength": 1, "maxLength": LIVE_MAX_MESSAGE},
        "expect": {"enum": list(ANSWERS)},
        "within": {"type": "string", "description": "how long the role has to answer, e.g. 5m (at most 1 h)"},
        "names_tables": {"type": "boolean"},
    },
    "additionalProperties": False,
}
HOLD = {"type": "object", "required": ["on"], "properties": {"on": {"type": "boolean"}}}
PROTECTED = "the lab token (pages, injects, holds) or a role's token (moves, /me) as a Bearer token"
# A desk players reach from other machines (--listen) keeps its game's readings to its own team.
READ_GUARDED = Answer(
    "a desk served for other machines (--listen, --tls): a role's token of this game, or the lab token, is missing", ERROR
)

OPERATIONS = {
    "alertmanager": Operation("POST", "/alertmanager", "Alertmanager's webhook: each alert a page (the lab token)", {
        200: Answer("recorded", {"type": "object", "required": ["recorded"], "properties": {"recorded": {"type": "integer"}}}),
        413: TOO_LARGE, 429: TOO_MANY,
    }, body=WEBHOOK, body_required=True, protected=True),
    "moves": Operation("POST", "/moves", "a player's move as its role (the role's token): made with the lab token and journaled", {
        200: Answer("made (ok: false when it was made and failed, as in a storm)", MOVED),
        403: Answer("forbidden: another role's token, or another role's move", ERROR),
        409: Answer("held: the facilitator holds the game; a move on the lab waits", ERROR),
        413: TOO_LARGE, 429: TOO_MANY,
    }, body=MOVE, body_required=True, protected=True),
    "page": Operation("GET", "/", "the status page customers read", {200: HTML}),
    "status": Operation("GET", "/status.json", "the status page's posts and the pages", {
        200: Answer("posts and pages", {"type": "object", "required": ["posts", "pages"], "properties": {"posts": LIST, "pages": LIST}}),
        401: READ_GUARDED,
    }),
    "game": Operation("GET", "/game.json", "the game so far, read-only (made at most once a second)", {
        200: Answer("the game", {"type": "object", "required": ["title", "team", "posts"]}),
        401: READ_GUARDED,
    }),
    "monitoring": Operation("GET", "/monitoring.json", "what the players' monitoring shows", {
        200: Answer("the view", OBJECT), 401: READ_GUARDED, 409: NO_GAME,
    }),
    "inject": Operation("POST", "/inject", "an inject typed live, sent now (the lab token)", {
        200: Answer("sent", {"type": "object", "required": ["inject"], "properties": {"inject": OBJECT}}),
        409: NO_GAME, 413: TOO_LARGE, 429: TOO_MANY,
    }, body=INJECT, body_required=True, protected=True),
    "hold": Operation("POST", "/hold", "hold the game, or let it go on (the lab token)", {
        200: Answer("what the runner did", OBJECT), 409: NO_GAME,
    }, body=HOLD, body_required=True, protected=True),
    "me": Operation("GET", "/me", "the role a token is: its unacknowledged pages, its moves, the dashboards", {
        200: Answer("the role", {"type": "object", "required": ["role", "team", "title", "pages", "moves", "dashboards"]}),
    }, protected=True),
    "play": Operation("GET", "/play", "the players' console (opened as /play#token=ROLE_TOKEN)", {200: HTML}),
}  # fmt: skip
