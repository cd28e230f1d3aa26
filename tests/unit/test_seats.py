"""Seats claimed, not shown (stormlab/rooms/seats.py): a code per seat, good for the first browser."""

import itertools

import pytest

from stormcore.auth import join_token
from stormlab.rooms.seats import SeatError, Seats

LINKS = {"team-1": {"database": "d1", "queues": "q1"}, "team-2": {"database": "d2"}, "team-3": {}}


def dealt() -> Seats:
    counter = itertools.count()
    return Seats(make=lambda n: f"c{next(counter)}")


def test_each_seat_gets_its_own_code_once_and_a_taken_seat_shows_none():
    seats = dealt()
    first = seats.shown(LINKS)
    assert [(s.team, s.role, s.code) for s in first] == [
        ("team-1", "database", "c0"),
        ("team-1", "queues", "c1"),
        ("team-2", "database", "c2"),
    ]
    assert seats.shown(LINKS) == first  # the same codes on every refresh
    seats.claim("c1", None)
    assert [s.code for s in seats.shown(LINKS)] == ["c0", None, "c2"]


def test_the_first_browser_holds_the_seat_and_no_other_does():
    seats = dealt()
    seats.shown(LINKS)
    seat, secret = seats.claim("c0", None)
    assert seat == ("team-1", "database") and secret == "c3"
    assert seats.claim("c0", secret) == (seat, None)  # the same browser, again
    for other in (None, "", "c4", secret + "x"):
        with pytest.raises(SeatError, match="taken") as raised:
            seats.claim("c0", other)
        assert raised.value.kind == "taken"


def test_a_released_seat_is_free_under_a_new_code_and_the_old_code_is_no_seats():
    seats = dealt()
    seats.shown(LINKS)
    seats.claim("c0", None)
    seats.release("team-1", "database")
    with pytest.raises(SeatError) as raised:
        seats.claim("c0", None)
    assert raised.value.kind == "unknown"
    [new] = [s.code for s in seats.shown(LINKS) if s.role == "database" and s.team == "team-1"]
    assert new not in ("c0", None) and seats.claim(new, None)[0] == ("team-1", "database")
    with pytest.raises(SeatError):
        seats.release("team-9", "database")


@pytest.mark.parametrize("code", ["", "c99", None, 7, "c0/../c1"])
def test_a_code_that_is_no_seats_is_refused(code):
    seats = dealt()
    seats.shown(LINKS)
    with pytest.raises(SeatError):
        seats.claim(code, None)


def test_the_join_token_is_the_facilitators_own_and_not_it():
    assert join_token("f" * 32) == join_token("f" * 32) != join_token("g" * 32)
    assert "f" * 32 not in join_token("f" * 32) and len(join_token("f" * 32)) == 64
