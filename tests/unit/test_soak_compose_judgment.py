"""The compose soak judges its own fault shells only: an ended record kept from an earlier command
(a halted isolate of the e2e test before it) is not the soak's finding; a shell's time is whole
seconds, so a lease asked for within the second its shell ended is still its own."""

from chaos.fault_shell import Held
from stormlab.runs.soak_compose import quiet_unexplained, window_of

QUEUES, META = "stack_queues_1", "stack_metadata_1"


def ended(at: float, fault: str = "isolate") -> Held:
    return Held(QUEUES, 0, fault, at, "ended", 0)


def test_an_earlier_commands_shell_is_not_the_soaks():
    windows = [("latency", [QUEUES], 1000.4, 1001.6)]
    earlier = ended(900.0)  # ended a minute and a half before the soak asked for anything
    assert window_of(earlier, windows) is None
    assert quiet_unexplained([earlier], windows, META) == []


def test_a_shell_that_ended_in_the_second_its_lease_was_asked_for_is_its_own():
    windows = [("isolate", [QUEUES], 1000.4, 1001.6)]
    assert window_of(ended(1000.0), windows) == 1000.4  # date +%s said 1000 for 1000.9
    assert window_of(ended(998.0), windows) is None


def test_a_quiet_shell_of_the_soak_is_a_finding_unless_something_held_it_still():
    windows = [("isolate", [QUEUES], 1000.4, 1002.0)]
    assert quiet_unexplained([ended(1002.0)], windows, META) == [([QUEUES], 1000.4, 1002.0)]
    frozen = [*windows, ("freeze", [QUEUES], 1001.0, 1003.0)]
    assert quiet_unexplained([ended(1002.0)], frozen, META) == []
    metadata_frozen = [*windows, ("freeze", [META], 999.0, 1000.5)]
    assert quiet_unexplained([ended(1002.0)], metadata_frozen, META) == []
