import pytest

from stormcore.settings import LabSettings, SettingsError, parse_duration
from stormlab.cli import main


def test_durations():
    assert parse_duration("5s") == 5.0
    assert parse_duration("500ms") == 0.5
    assert parse_duration("2m") == 120.0
    assert parse_duration("1.5") == 1.5
    for bad in ("", "soon", "-1s", "5 parsecs"):
        with pytest.raises(SettingsError):
            parse_duration(bad)


def test_settings_round_trip_through_the_environment():
    s = LabSettings(racks=4, allowance_s=2.0, gsi_growth=False, retry_policy="full-jitter+budget")
    assert LabSettings.from_env(s.to_env()) == s


@pytest.mark.parametrize(
    "changes",
    [
        {"racks": 0},
        {"nodes_per_rack": 10**6},
        {"allowance_s": -1.0},
        {"abandoned_work": "maybe"},
        {"retry_policy": "forever"},
        {"capacity_cores": 0.0},
    ],
)
def test_settings_refuse_values_the_lab_cannot_run_with(changes):
    with pytest.raises(SettingsError):
        LabSettings(**changes)


def test_env_values_are_validated():
    with pytest.raises(SettingsError):
        LabSettings.from_env({"STORMLAB_RACKS": "ten"})
    with pytest.raises(SettingsError):
        LabSettings.from_env({"STORMLAB_GSI_GROWTH": "perhaps"})


def test_sped_up_divides_every_duration_and_cost():
    fast = LabSettings().sped_up(2)
    assert fast.renewal_period_s == 5.0 and fast.allowance_s == 0.5 and fast.cost_per_entry_s == 0.00225
    assert fast.racks == 10 and fast.capacity_cores == 40.0


@pytest.fixture
def no_lab(tmp_path, monkeypatch):
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(tmp_path / "state"))


def test_cli_errors_have_exit_codes_and_messages(no_lab, capsys):
    assert main(["chaos", "blip", "--rack-set", "3", "--duration", "5s"]) == 1  # "no lab is up": one code everywhere
    assert "no lab is up" in capsys.readouterr().err
    assert main(["status"]) == 1
    assert "no lab is up" in capsys.readouterr().err
    assert main(["up", "--allowance", "soon"]) == 2
    assert "not a duration" in capsys.readouterr().err
    assert main(["up", "--racks", "0"]) == 2
    for command in (["up"], ["demo"], ["scenario", "run", "scenarios/dynamodb-2015.yaml"], ["bench", "--fleet-speed"]):
        for speed in ("fast", "0", "25"):
            assert main([*command, *([] if command[-1] == "--fleet-speed" else ["--speed"]), speed]) == 2, (command, speed)
            assert "speed" in capsys.readouterr().err
    assert main(["down"]) == 0
    assert "no lab was up" in capsys.readouterr().out


def test_up_refuses_ports_in_use(no_lab, capsys):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        port = busy.getsockname()[1]
        assert main(["up", "--racks", "1", "--base-port", str(port)]) == 1
    assert "in use" in capsys.readouterr().err


def test_demo_refuses_bad_input_before_starting_a_lab(no_lab, capsys):
    assert main(["demo", "--blip-racks", "11"]) == 2
    assert main(["demo", "--watch", "forever"]) == 2
    assert main(["status"]) == 1  # nothing was started
    capsys.readouterr()


def test_set_changes_settings_as_people_type_them():
    changed = LabSettings().with_text(["fix_stale_cache=on", "allowance-s=2s", "scaling_workers=4"])
    assert (changed.fix_stale_cache, changed.allowance_s, changed.scaling_workers) == (True, 2.0, 4)
    for bad, message in (
        ("nope=1", "no setting 'nope'"),
        ("racks", "KEY=VALUE"),
        ("racks=", "KEY=VALUE"),
        ("racks=0", "racks must be between 1 and 128"),
        ("fix_stale_cache=maybe", "not on/off"),
        ("scaling_workers=many", "scaling_workers"),
    ):
        with pytest.raises(SettingsError, match=message):
            LabSettings().with_text([bad])


def test_set_on_the_command_line_is_checked_before_anything_starts(no_lab, capsys):
    assert main(["up", "--set", "fix_short_timeout=sometimes"]) == 2
    assert "not on/off" in capsys.readouterr().err
    assert main(["scenario", "run", "scenarios/dynamodb-2015.yaml", "--set", "nope=1"]) == 2
    assert "no setting 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["chaos", "blip", "--rack-set", "abc", "--duration", "5s"], "racks must be a count or a comma list"),
        (["chaos", "blip", "--rack-set", "3", "--duration", "0s"], "duration must be more than 0s"),
        (["chaos", "blip", "--rack-set", "0", "--duration", "5s"], "a count of racks is at least 1"),
        (["chaos", "blip", "--fraction", "2", "--duration", "5s"], "--fraction must be more than 0"),
        (["ops", "set-capacity", "abc"], "cores: not a number"),
        (["ops", "resume", "--staged", "0"], "staged must be at least 1"),
    ],
)
def test_bad_input_is_told_as_such_before_no_lab_is_up(no_lab, capsys, argv, said):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and "no lab is up" not in err


@pytest.mark.parametrize("argv", [["chaos", "blip", "--rack-set", "all", "--duration", "5s"], ["ops", "set-capacity", "80"], ["status"]])
def test_no_lab_is_up_has_one_exit_code(no_lab, capsys, argv):
    assert main(argv) == 1
    assert "no lab is up" in capsys.readouterr().err
