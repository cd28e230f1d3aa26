"""The debrief's last lines name what did not hold, so the tail of a failed run's log says why."""

from stormlab.scenarios import debrief

JOURNAL = {
    "steps": [
        {"name": "storm onset", "kind": "expect", "passed": True, "detail": "0.31 after 12s"},
        {
            "name": "recovery",
            "kind": "operator",
            "passed": False,
            "recovered_after_s": 70.8,
            "detail": "0 after 70.8s",
            "autopilot": [
                {"name": "pause requests to the metadata service", "kind": "action", "passed": True},
                {"name": "the queues fail", "kind": "expect", "passed": False, "detail": "not met while the phase lasted (last value 0)"},
            ],
        },
        {
            "name": "Monday",
            "kind": "operator",
            "passed": False,
            "recovered_after_s": None,
            "detail": "not met while the phase lasted (last value 0.9)",
        },
        {"name": "the Monday tail", "kind": "fault", "passed": False},
    ]
}


def test_what_did_not_hold_is_named_with_why():
    assert debrief.missed(JOURNAL) == [
        "the queues fail (expect): not met while the phase lasted (last value 0)",
        "Monday (operator): not met while the phase lasted (last value 0.9)",
        "the Monday tail (fault): failed",
    ]


def test_a_run_that_held_names_nothing():
    held = {"steps": [{"name": "storm onset", "kind": "expect", "passed": True}]}
    assert debrief.missed(held) == []
