"""Sizing a training room against the host (pure): how many labs of a fleet fit at a speed, what
speed auto picks, and the reason a room is refused."""

import pytest

from stormcore.errors import UsageError
from stormlab.engine.speed import LADDER
from stormlab.gameday import room


def test_more_teams_fit_on_more_cores_smaller_fleets_and_slower_speeds():
    assert room.teams_fit(1000, 1.0, 4) >= 2 * room.teams_fit(1000, 1.0, 2) - 1
    assert room.teams_fit(400, 1.0, 2) > room.teams_fit(1000, 1.0, 2)
    assert room.teams_fit(1000, 0.5, 2) >= 2 * room.teams_fit(1000, 1.0, 2)
    assert room.lab_cores(1000, 0.5) == pytest.approx(room.lab_cores(1000, 1.0) / 2)


def test_a_room_that_fits_is_sized_and_one_that_does_not_is_refused_with_what_would():
    fit = room.teams_fit(1000, 1.0, 2)
    assert fit >= 1
    sizing = room.size(fit, 1000, 1.0, cores=2)
    assert (sizing.teams, sizing.speed, sizing.fit) == (fit, 1.0, fit)
    assert sizing.cores <= 0.9 * 2
    with pytest.raises(UsageError, match=rf"at most {fit} team.* here; at --speed 0\.\d+ all {fit + 1} fit"):
        room.size(fit + 1, 1000, 1.0, cores=2)


def test_speed_auto_picks_the_fastest_speed_at_which_every_team_fits():
    fit = room.teams_fit(1000, 1.0, 2)
    assert room.size(fit, 1000, None, cores=2).speed == 1.0
    slower = room.size(fit + 1, 1000, None, cores=2)
    assert slower.speed < 1.0 and slower.speed in LADDER and room.teams_fit(1000, slower.speed * 2, 2) < fit + 1
    with pytest.raises(UsageError, match="do not fit on 2 cores even at speed"):
        room.size(room.MAX_TEAMS, 100_000, None, cores=2)


@pytest.mark.parametrize("teams", [0, -1, room.MAX_TEAMS + 1])
def test_a_number_of_teams_out_of_range_is_refused(teams):
    with pytest.raises(UsageError, match="--teams is a whole number"):
        room.size(teams, 1000, 1.0, cores=2)
