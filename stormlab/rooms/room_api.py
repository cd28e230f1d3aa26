"""The room console's HTTP API described (OpenAPI, served at its ``/openapi.json``): every route
of stormlab/rooms/room_web.py with what it takes and every answer it gives, so `stormlab fuzz`
judges the console as it judges the lab's processes."""

from __future__ import annotations

from typing import Any

from stormcore.openapi import ERROR, Answer, Operation
from stormlab.responder.desk_api import HOLD, HTML, INJECT, OBJECT

NO_DEBRIEF = Answer("no_debrief: no game of this room has ended yet", ERROR)
READ_GUARDED = Answer("a room served to other machines (--listen, --tls): the facilitator's token is missing", ERROR)
CONFLICT = Answer("no_scenario (started without --scenario) or conflict (a game is on, a lab is not up)", ERROR)
SEAT_PAGE = Answer("no seat has this code (released, or never dealt)", {"type": "string"}, media="text/html")
CODE = {"name": "code", "in": "path", "required": True, "schema": {"type": "string"}}
SEAT = {"type": "object", "required": ["team", "role"], "properties": {"team": {"type": "string"}, "role": {"type": "string"}}}
TEAM_FIELD = {"type": "string", "description": "all, or a team"}
ROOM_INJECT: dict[str, Any] = {**INJECT, "properties": {**INJECT["properties"], "team": TEAM_FIELD}}

OPERATIONS = {
    "page": Operation("GET", "/", "the facilitator's console: every team side by side", {200: HTML}),
    "panel": Operation("GET", "/panel", "the part of the page that refreshes", {200: HTML, 401: READ_GUARDED}),
    "document": Operation("GET", "/room.json", "the room: its card, each team's reading, history, games, leaderboard", {
        200: Answer("the room", {"type": "object", "required": ["room", "teams", "history", "games", "leaderboard"]}),
        401: READ_GUARDED,
    }),
    "debrief": Operation("GET", "/debrief", "the room's debrief once a game has ended", {
        200: HTML, 401: READ_GUARDED, 404: NO_DEBRIEF,
    }),
    "chart": Operation("GET", "/debrief.png", "the debrief's chart", {
        200: Answer("the chart", {"type": "string"}, media="image/png"), 401: READ_GUARDED, 404: NO_DEBRIEF,
    }),
    "join": Operation("GET", "/join", "the join page to project: each team's seats as claim codes (fetched with the join token)", {
        200: HTML,
    }),
    "join_links": Operation("GET", "/join/links", "each team's seats: a free one's claim link as text and QR code (the join token)", {
        200: HTML,
    }, protected=True),
    "seat": Operation("GET", "/seat/{code}", "a seat's page: whose it is, and a button to take it (a look takes nothing)", {
        200: HTML, 404: SEAT_PAGE,
    }, parameters=(CODE,)),
    "claim": Operation("POST", "/seat/{code}", "take the seat: the first browser is sent to the role's console, any other refused", {
        303: Answer("the seat is this browser's: to the role's console (its token in the address's fragment)", None,
                    headers=("Location",)),
        404: SEAT_PAGE, 409: Answer("the seat is another browser's, or no game is on in its team's lab", {"type": "string"},
                                    media="text/html"),
    }, parameters=(CODE,)),
    "release": Operation("POST", "/seats/release", "a seat free again under a new code (its old code is no seat's)", {
        200: Answer("released", {"type": "object", "required": ["released"], "properties": {"released": OBJECT}}),
        404: Answer("no_seat: no such seat has been dealt", ERROR),
    }, body=SEAT, body_required=True, protected=True),
    "halt": Operation("POST", "/halt", "end every fault lease in every team's lab now (the facilitator's token)", {
        200: Answer("halted, per team, and what did not answer", {"type": "object", "required": ["halted", "unanswered"]}),
    }, protected=True),
    "start": Operation("POST", "/start", "start the console's scenario in every team's lab at once", {
        200: Answer("started", {"type": "object", "required": ["started", "scenario"]}), 409: CONFLICT,
    }, body={"type": "object", "properties": {"autopilot": {"type": "boolean"}}}, protected=True),
    "end": Operation("POST", "/end", "end the game in every team's lab", {
        200: Answer("ended", {"type": "object", "required": ["ended"], "properties": {"ended": OBJECT}}),
    }, protected=True),
    "inject": Operation("POST", "/inject", "an inject typed live, to every team or one", {
        200: Answer("sent, per team", {"type": "object", "required": ["sent"], "properties": {"sent": OBJECT}}),
    }, body=ROOM_INJECT, body_required=True, protected=True),
    "hold": Operation("POST", "/hold", "hold every team's game, or let them go on", {
        200: Answer("what each team's runner said", {"type": "object", "required": ["told"], "properties": {"told": OBJECT}}),
    }, body=HOLD, body_required=True, protected=True),
}  # fmt: skip
