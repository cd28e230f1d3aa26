"""Seats are claimed, not shown: the join page's codes, each good for one browser.

The join page is projected for a class, and a photo of a projected screen is easy to take. So
what it shows of each role is a claim code, never the role's token: the first browser that opens
the code and takes the seat is handed the role's link (its token in it) and a secret of its own
(a cookie) that lets it in again; every other browser is told the seat is taken. The facilitator
can release a seat (a player who changed machines): the old code goes, a new one shows, and the
next browser to take it is the seat's. Quiz rooms do the same with a join code.

Pure: the codes and who holds each seat, in memory (a console restarted deals new codes, every
seat free again). ``make`` draws the codes and secrets (``secrets.token_urlsafe``; a test's own).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass

Seat = tuple[str, str]  # (team, role)
CODE_BYTES = 16  # 128 bits: a code is not guessed, only read off the screen


class SeatError(Exception):
    """A code that is no seat's (``unknown``), or a seat another browser holds (``taken``)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Shown:
    """One seat as the join page shows it: its code while free, nothing but "taken" once claimed."""

    team: str
    role: str
    code: str | None  # None: claimed (no code to show)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()  # a cookie of any bytes


class Seats:
    def __init__(self, make: Callable[[int], str] = secrets.token_urlsafe) -> None:
        self.make = make
        self.code_of: dict[Seat, str] = {}
        self.seat_of: dict[str, Seat] = {}
        self.holder: dict[Seat, str] = {}  # the digest of the secret handed to the browser that took it

    def shown(self, links: Mapping[str, Mapping[str, str]]) -> list[Shown]:
        """Every seat of ``links`` (each team's roles with a game on), a code dealt to each on first sight."""
        out = []
        for team, roles in links.items():
            for role in roles:
                seat = (team, role)
                out.append(Shown(team, role, None if seat in self.holder else self._code(seat)))
        return out

    def _code(self, seat: Seat) -> str:
        if seat not in self.code_of:
            code = self.make(CODE_BYTES)
            self.code_of[seat], self.seat_of[code] = code, seat
        return self.code_of[seat]

    def seat(self, code: str) -> Seat:
        found = self.seat_of.get(code) if isinstance(code, str) else None
        if found is None:
            raise SeatError("unknown", "no seat has this code (the facilitator may have released it: ask for the new one)")
        return found

    def claim(self, code: str, secret: str | None) -> tuple[Seat, str | None]:
        """The seat for the browser that brings ``code`` (and its ``secret``, if it took the seat
        before): a new secret for a first claim, None for the same browser again; SeatError for
        any other browser once the seat is held."""
        seat = self.seat(code)
        held = self.holder.get(seat)
        if held is None:
            new = self.make(CODE_BYTES * 2)
            self.holder[seat] = _digest(new)
            return seat, new
        if secret and hmac.compare_digest(_digest(secret), held):
            return seat, None
        raise SeatError("taken", f"{seat[0]}'s {seat[1]} seat is taken: the facilitator can release it (room console)")

    def release(self, team: str, role: str) -> None:
        """The seat free again under a new code; the old code is no seat's."""
        seat = (team, role)
        if seat not in self.code_of and seat not in self.holder:
            raise SeatError("unknown", f"no seat {team}/{role} has been dealt")
        self.holder.pop(seat, None)
        old = self.code_of.pop(seat, None)
        if old is not None:
            self.seat_of.pop(old, None)
