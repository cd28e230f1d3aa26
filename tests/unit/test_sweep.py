"""The sweep's grid in virtual time: verdicts, resumable results, the live sample, agreement."""

import csv
import dataclasses
import json
import subprocess

import pytest

from stormcore.fleet import grid_slot
from stormcore.settings import LabSettings
from stormlab import cli
from stormlab.artefacts.blocks import replace_block
from stormlab.model.estimate import COLLAPSE, PLATEAU, RECOVERED, estimate
from stormlab.model.grid import (
    AWS_FIXES,
    PANELS,
    PHASES,
    POINT_2015,
    Grid,
    Point,
    Verdict,
    agreement,
    blip_at,
    estimate_check,
    judge_model,
    live_sample,
    markdown,
    near_threshold,
    summarize,
)
from stormlab.runs.live import (
    append_result,
    changed_outside,
    commit,
    fresh,
    judge_live,
    read_results,
    run_live,
    same_code,
)
from stormlab.runs.sweep import run_model

QUICK = LabSettings(racks=10, nodes_per_rack=40, capacity_cores=16)
AT_2015 = Point(**POINT_2015)


def test_every_panel_makes_settings_the_lab_can_run():
    for panel in PANELS:
        s = Point(panel, 3, 5.0, 2).settings(LabSettings())
        assert s.big_gsis == 2 and s.gsi_growth
    assert Point("2015", 3, 5.0, 0).settings(LabSettings()).gsi_growth is False
    assert Point("4 cells (2015-sized)", 3, 5.0, 2).settings(LabSettings()).capacity_cores == 160  # 40 per cell


def test_the_2015_point_is_stuck_whenever_the_blip_comes_and_each_aws_fix_moves_it_out():
    moments = range(PHASES)
    assert all(judge_model(QUICK, Point("2015", 3, 5.0, 2, phase), 12).stuck for phase in moments)
    for fix in AWS_FIXES:
        verdicts = [judge_model(QUICK, Point(fix, 3, 5.0, 2, phase), 12) for phase in moments]
        assert not any(v.stuck for v in verdicts), fix
        assert max(v.end_error for v in verdicts) < 0.01


def test_a_smaller_trigger_and_smaller_memberships_recover_without_a_fix():
    assert not judge_model(QUICK, Point("2015", 1, 5.0, 2), 12).stuck
    assert not judge_model(QUICK, Point("2015", 3, 5.0, 0), 12).stuck


def test_a_sweep_resumes_where_it_stopped(tmp_path):
    grid = Grid(("2015",), (1, 3), (5.0,), (0, 2))
    path = tmp_path / "model.csv"
    said = []
    points = [p for p in grid.points() if not p.phase]
    first = run_model(QUICK, points[:2], path, 12, 1, said.append)
    assert len(first) == 2 and "2 to run" in said[0]
    with path.open("a") as f:
        f.write("2015,3,5.0,0,2015|3|5|0,Tru")  # a row cut short when the sweep was stopped
    again = run_model(QUICK, points, path, 12, 2, said.append)
    assert any("2 already in" in s and "2 to run" in s for s in said[1:])
    assert set(again) == {p.key for p in points}
    assert read_results(path)[AT_2015.key].stuck
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 5  # 4 points and the cut row, which is not a result: that point ran again
    assert sum(r["key"] == "2015|3|5|0" and bool(r["seconds"]) for r in rows) == 1


def _verdict(point, stuck, error=None, valid=True):
    return Verdict(point.key, stuck, 0.5 if stuck else 0.0 if error is None else error, 0.6, None, valid)


def test_the_live_sample_is_chosen_without_the_model_s_verdicts():
    """The 2015 point, the points near a threshold, then uniform: the same whatever the model says
    of them, so the model is not graded on its own picks."""
    points = Grid(("2015", "renewals every 20s", "full jitter"), (1, 2, 3, 4, 5), (2.0, 5.0), (0, 2)).points()
    sample = live_sample(LabSettings(), points, 12, seed=7, phases=0)
    assert sample[0] == AT_2015 and len(set(sample)) == 12
    near = {(p.panel, p.blip_s) for p in points if near_threshold(LabSettings(), p)}
    assert near == {(panel, b) for panel in ("2015", "renewals every 20s") for b in (2.0, 5.0)}  # the 4-rack herds
    assert {(p.panel, p.blip_s) for p in sample[1:5]} == near  # one near point of each panel and blip
    assert not [p for p in sample if p.phase]
    assert sample == live_sample(LabSettings(), points, 12, seed=7, phases=0)  # seeded
    assert sample != live_sample(LabSettings(), points, 12, seed=8, phases=0)
    everything = live_sample(LabSettings(), points, 1000, seed=7, phases=0)
    assert len(everything) == len([p for p in points if not p.phase])  # never more than the grid
    assert live_sample(LabSettings(), points, 2, seed=7, phases=0) == sample[:2]  # fewer: in that order
    # the blip-phase variants come on top, drawn apart: the rest of the sample stays as it was
    with_moments = live_sample(LabSettings(), points, 12, seed=7, phases=2)
    assert with_moments[:12] == sample and len(with_moments) == 16
    moments = with_moments[12:]
    assert all(p.phase and p.at_2015() for p in moments) and sorted(p.panel for p in moments) == ["2015"] * 2 + ["renewals every 20s"] * 2
    down = Grid(("2015",), (3,), (5.0,), (2, 4)).points()
    assert Point("2015", 3, 5.0, 4).down_before(LabSettings())  # 230 entries: 1.04 core-s > the 1 s allowance
    assert not Point("allowance 2s", 3, 5.0, 4).down_before(LabSettings())
    assert [p.gsis for p in live_sample(LabSettings(), down, 5, seed=1) if not p.phase] == [2]


def _repo(root):
    """A git repository of its own: code.py, a test and a doc, committed."""

    def git(*argv):
        return subprocess.run(["git", *argv], cwd=root, check=True, capture_output=True, text=True).stdout.strip()

    root.mkdir()
    git("init", "-q")
    git("config", "user.email", "lab@example.invalid")
    git("config", "user.name", "lab")
    for name, text in (("code.py", "X = 1\n"), ("tests/test_x.py", "def test_x(): pass\n"), ("docs/x.md", "x\n")):
        (root / name).parent.mkdir(exist_ok=True)
        (root / name).write_text(text)
    return git


def _commit_all(git, message):
    git("add", "-A")
    git("commit", "-qm", message)
    return git("rev-parse", "--short", "HEAD")


def test_a_result_answers_for_the_code_it_ran_and_for_no_other(tmp_path):
    """A result is reused while no file of its answer's code changed since the commit it ran on:
    a test or a doc changed, it still answers; code.py changed, or a change never committed, or
    no stamp at all (rows written before results were stamped), it runs again."""
    root = tmp_path / "repo"
    git = _repo(root)
    first = _commit_all(git, "first")
    (root / "docs/x.md").write_text("y\n")
    (root / "tests/test_x.py").write_text("def test_x(): assert True\n")
    assert commit(root=root) == first  # a doc and a test changed: the code is the commit's
    docs = _commit_all(git, "docs and tests")
    assert same_code(first, docs, root) and same_code(docs, first, root)
    (root / "code.py").write_text("X = 2\n")
    dirty = commit(root=root)
    assert dirty.startswith(f"{docs}+changes:") and commit(root=root) == dirty  # the same changes, the same stamp
    (root / "code.py").write_text("X = 3\n")
    assert commit(root=root) != dirty  # other changes, another stamp
    assert not same_code(dirty, commit(root=root), root)
    code = _commit_all(git, "code")
    assert not same_code(first, code, root) and not same_code(docs, code, root)
    assert not same_code("", code, root) and not same_code("0000000", code, root)  # no stamp; a commit this clone lacks
    assert same_code("unknown", "unknown", root) and not same_code("unknown", code, root)  # no git here at all: as it was


def test_a_resumed_sweep_runs_again_what_was_measured_on_other_code(tmp_path):
    root = tmp_path / "repo"
    git = _repo(root)
    old = _commit_all(git, "first")
    (root / "code.py").write_text("X = 2\n")  # the model changed, say
    now = _commit_all(git, "code")
    out = root / "sweep"
    out.mkdir()
    points = Grid(("2015",), (1, 2, 3), (5.0,), (2,)).points()[:3]
    for point, stamp in zip(points, (old, now, ""), strict=True):
        append_result(out / "model.csv", point, dataclasses.replace(_verdict(point, False), commit=stamp))
    said: list[str] = []
    kept = fresh(out / "model.csv", said.append, root)
    assert list(kept) == [points[1].key]  # only the row measured on this code
    assert read_results(out / "model.csv") == kept  # the others are out of the file: they run again
    assert said == [f"model.csv: 2 of 3 results were measured on other code (1 on {old}, 1 on no commit; this is {now}): they run again"]
    assert fresh(out / "model.csv", said.append, root) == kept and len(said) == 1  # nothing more to say


def test_a_live_row_s_commit_counts_changes_outside_the_sweep_s_own_results_only():
    """The porcelain's first line starts with a space when only the work tree changed."""
    assert changed_outside(" M docs/sweep/model.csv\n", "docs/sweep/") == []
    assert changed_outside(" M docs/sweep/model.csv\nM  README.md\n", "docs/sweep/") == ["README.md"]
    assert changed_outside(" M docs/sweep/model.csv\n", None) == ["docs/sweep/model.csv"]
    assert changed_outside("", "docs/sweep/") == []


@pytest.mark.parametrize(("panel", "phase", "fraction"), [("2015", 0, 0.5), ("2015", 3, 0.875), ("renewals every 20s", 3, 0.375)])
def test_a_live_point_blips_at_the_moment_of_the_schedule_where_its_model_point_does(monkeypatch, panel, phase, fraction):
    """The model blips at 1.5 periods + 10 s + phase eighths of a period from the schedules' start;
    the live demo is told that moment as a fraction of a period past a slot."""
    told = {}

    class Told(Exception):
        pass

    def demo(*args, blip_phase=None, **kwargs):
        told["phase"] = blip_phase
        raise Told

    monkeypatch.setattr("stormlab.runs.live.launcher.up", lambda *a, **k: {})
    monkeypatch.setattr("stormlab.runs.live.launcher.down", lambda *a, **k: None)
    monkeypatch.setattr("stormlab.runs.live.Demo", demo)
    point = Point(panel, 3, 5.0, 2, phase)
    with pytest.raises(Told):
        judge_live(LabSettings(), point, 12, 1.0)
    s = point.settings(LabSettings())
    assert told["phase"] == pytest.approx(fraction) == pytest.approx(blip_at(s, phase) % s.renewal_period_s / s.renewal_period_s)


def test_the_next_moment_is_that_far_past_a_slot_and_never_too_soon():
    assert grid_slot(100.0, 10.0, 0.5, 101.0 + 1.0) == 105.0
    assert grid_slot(100.0, 10.0, 0.5, 104.5 + 1.0) == 115.0  # 105 is too soon: the next one
    assert grid_slot(100.0, 10.0, 0.0, 250.0 + 0.0) == 250.0
    for now in (0.0, 123.4, 1e6):
        at = grid_slot(7.0, 20.0, 0.375, now + 1.0)
        assert now + 1.0 <= at < now + 21.0 and (at - 7.0) % 20.0 == pytest.approx(7.5)


def test_agreement_counts_valid_live_runs_only_on_the_verdict_and_on_the_level():
    points = Grid(("2015",), (1, 2, 3, 4), (5.0,), (2,)).points()[:4]
    model = {p.key: _verdict(p, p.blip_racks >= 3, 0.0) for p in points}
    model[points[3].key] = Verdict(points[3].key, True, 0.95, 1.0, None)
    live = {
        points[0].key: _verdict(points[0], False),
        points[1].key: _verdict(points[1], True),  # disagrees
        points[2].key: Verdict(points[2].key, True, 0.80, 1.0, None),  # stuck in both, at 50% and 80%: not the same level
        points[3].key: Verdict(points[3].key, True, 1.0, 1.0, None),  # both collapsed: the same level
    }
    a = agreement(points, model, live)
    assert (a["points"], a["agree"], a["level_agree"]) == (4, 3, 2)
    assert a["disagree"] == [points[1].key] and a["level_disagree"][1] == f"{points[2].key} (model 50%, live 80%)"
    live[points[0].key] = _verdict(points[0], False, valid=False)  # the host shaped it: left out
    assert agreement(points, model, live)["invalid"] == [points[0].key]


def test_the_closed_form_estimate_reads_the_2015_thresholds_on_its_own():
    s = LabSettings()
    plateau, four, collapse = estimate(s, 3, 5.0), estimate(s, 4, 5.0), estimate(s, 6, 5.0)
    assert plateau.outcome == four.outcome == PLATEAU and plateau.level == four.level == pytest.approx(0.55, abs=0.01)
    assert collapse.outcome == COLLAPSE and collapse.level == 1.0
    # 4 racks x 5 s: half the herd at once, half giving up their hanging attempts within the allowance
    assert 300 < collapse.herd_limit < 450 and 4 * 100 * 0.75 < four.herd_limit < 6 * 100 * 0.75
    assert estimate(s, 1, 5.0).outcome == RECOVERED  # one rack's bigs drain
    assert estimate(s.replace(allowance_s=2.0), 3, 5.0).outcome == RECOVERED  # AWS's longer allowance
    assert estimate(s.replace(big_gsis=0, gsi_growth=False), 3, 5.0).outcome == RECOVERED  # pre-GSI sizes
    assert estimate(s.replace(retry_policy="full-jitter"), 3, 5.0) is None  # not in its formulas: not judged


def test_the_estimate_and_the_model_are_compared_on_every_grid_point():
    grid = Grid(("2015",), (1, 3, 4), (5.0,), (2,))
    points = [p for p in grid.points() if not p.phase]
    model = {p.key: judge_model(LabSettings(), p, 12) for p in points}
    checked = estimate_check(LabSettings(), points, model)
    assert checked["points"] == 3 and checked["agree"] == 3 and checked["level_agree"] == 3, checked["apart"]
    table = markdown(summarize(grid, LabSettings(), model, None, checked))
    assert "The closed-form estimate and the model agree on the verdict at 3 of 3 grid points" in table


def test_live_points_run_one_after_another_and_resume(tmp_path):
    points = Grid(("2015",), (1, 3), (5.0,), (2,)).points()
    ran = []

    def judge(base, point, watch, speed):
        ran.append(point.key)
        return _verdict(point, point.blip_racks == 3)

    run_live(QUICK, points, tmp_path / "live.csv", 12, 2.0, lambda s: None, judge)
    run_live(QUICK, points, tmp_path / "live.csv", 12, 2.0, lambda s: None, judge)
    assert ran == [p.key for p in points]


def test_a_live_point_the_host_shaped_runs_again_and_the_last_run_is_kept(tmp_path):
    points = [next(p for p in Grid(("2015",), (1, 3), (5.0,), (2,)).points() if p.blip_racks == racks and not p.phase) for racks in (1, 3)]
    ran = []

    def judge(base, point, watch, speed):  # 3 racks: INVALID the first time; 1 rack: INVALID every time
        ran.append(point.key)
        return _verdict(point, point.blip_racks == 3, valid=point.blip_racks == 3 and ran.count(point.key) > 1)

    said: list[str] = []
    live = run_live(QUICK, points, tmp_path / "live.csv", 12, 2.0, said.append, judge, retries=2)
    one, three = (p.key for p in points)
    assert ran == [one, one, one, three, three]  # 1 rack: its run and two more, all INVALID; 3 racks: valid the second time
    assert not live[one].valid and live[three].valid and live[three].stuck
    assert read_results(tmp_path / "live.csv") == live  # only the kept run is on disk
    assert sum("INVALID (the host shaped it), run again" in line for line in said) == 3
    assert run_live(QUICK, points, tmp_path / "live.csv", 12, 2.0, said.append, judge, retries=0) == live and len(ran) == 5


def test_the_summary_table_goes_into_the_readme_block(tmp_path):
    grid = Grid(("2015", "allowance 2s"), (3,), (5.0,), (2,))
    model = {p.key: _verdict(p, p.panel == "2015") for p in grid.points()}
    agreed = {"points": 10, "agree": 9, "ratio": 0.9, "level_agree": 8, "level_ratio": 0.8, "invalid": [], "disagree": ["x"]}
    table = markdown(summarize(grid, QUICK, model, agreed | {"level_disagree": ["y", "z"]}))
    assert "| 2015 | stuck | 50.0% | 8/8 | 1/1 |" in table
    assert "| allowance 2s | recovered | 0.0% | 0/8 | 0/1 |" in table
    assert "agree on the verdict at 9 of 10 sampled points (90.0%) (not at x)" in table
    assert "on the level (within 5% of error, or both collapsed) at 8 (80.0%) (not at y, z)" in table
    readme = tmp_path / "README.md"
    readme.write_text("a\n<!-- sweep -->\nold\n<!-- /sweep -->\nb\n")
    replace_block(readme, "sweep", table)
    assert readme.read_text() == f"a\n<!-- sweep -->\n{table}\n<!-- /sweep -->\nb\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["--panels", "2015,no-such-fix"],
        ["--blip-racks", "0"],
        ["--blip-racks", "three"],
        ["--blip=-5s"],
        ["--gsis", "99"],
        ["--watch", "0"],
    ],
)
def test_bad_sweep_arguments_exit_2_before_anything_runs(argv, tmp_path, capsys):
    assert cli.main(["sweep", "--out", str(tmp_path / "out"), "--live", "0", *argv]) == 2
    assert "stormlab:" in capsys.readouterr().err
    assert not (tmp_path / "out" / "model.csv").exists()


def test_a_small_sweep_end_to_end_maps_the_2015_point_and_resumes_with_nothing_to_run(tmp_path, monkeypatch):
    """`stormlab sweep` as a person runs it, the grid in the model only (its live points are
    judge_live's, which the fidelity guard runs on every landing: tests/integration/test_fidelity_guard.py;
    the 2015 point live is the storm test's)."""
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(tmp_path / "state"))
    out = tmp_path / "sweep"
    argv = ["sweep", "--quick", "--out", str(out), "--panels", "2015,allowance 2s", "--blip-racks", "1,3", "--blip", "5s",
            "--gsis", "2", "--live", "0", "--watch", "9", "--jobs", "1", "--json"]  # fmt: skip
    assert cli.main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["panels"]["2015"]["point_2015"] == "stuck"
    assert summary["panels"]["allowance 2s"]["point_2015"] == "recovered"
    assert summary["agreement"] is None and summary["live_sample"] == []
    model = read_results(out / "model.csv")
    assert len(model) == 4 + 2 * 7  # the grid, and each panel's 2015 point at 7 more moments
    assert {k: v.stuck for k, v in model.items() if "|p" not in k} == {
        "2015|1|5|2": False, "2015|3|5|2": True, "allowance 2s|1|5|2": False, "allowance 2s|3|5|2": False,
    }  # fmt: skip
    assert (out / "map.png").stat().st_size > 10_000
    assert "| 2015 | stuck |" in (out / "summary.md").read_text()
    before = (out / "model.csv").read_text()
    assert cli.main(argv) == 0  # run again: everything is on disk, nothing runs
    assert (out / "model.csv").read_text() == before


def _sweep_with_a_model_on_disk(tmp_path, monkeypatch):
    """A sweep's --out whose model results are already there (stamped with this code, so nothing of
    the model runs), and the argv of a two-point live sample of it."""
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(tmp_path / "state"))
    out = tmp_path / "sweep"
    out.mkdir()
    stamp = commit(out)
    for point in Grid(("2015",), (1, 3), (5.0,), (2,)).points():
        append_result(out / "model.csv", point, dataclasses.replace(_verdict(point, point.blip_racks == 3), commit=stamp))
    argv = ["sweep", "--quick", "--out", str(out), "--panels", "2015", "--blip-racks", "1,3", "--blip", "5s", "--gsis", "2",
            "--live", "2", "--live-phases", "0", "--jobs", "1", "--json"]  # fmt: skip
    return out, argv


def test_live_points_are_kept_per_link_mechanism_and_the_summary_reports_each(tmp_path, monkeypatch, capsys):
    """A point measured through the link proxy is never reused for the kernel's links: each
    mechanism has its own file, and the sweep passes only when every mechanism measured agrees."""
    from stormlab.runs import live, sweep

    out, argv = _sweep_with_a_model_on_disk(tmp_path, monkeypatch)
    ran = []

    def judge(base, point, watch, speed):
        ran.append((point.settings(base).link_cut, point.key))
        wrong = base.link_cut == "proxy" and point.blip_racks == 1  # the proxy's lab storms where the model recovers
        return _verdict(point, point.blip_racks == 3 or wrong)

    monkeypatch.setattr(sweep, "judge_live", judge)
    monkeypatch.setattr(live.launcher, "available", lambda: "not root")  # auto: the proxy, as `up` would choose
    monkeypatch.setattr(live.launcher.door, "why_not", lambda: "no namespace of the lab's own here")  # ... with no namespace
    assert cli.main([*argv, "--link", "auto"]) == 1  # 1 of 2 agree through the proxy
    assert sorted(ran) == [("proxy", "2015|1|5|2"), ("proxy", "2015|3|5|2")]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["link"] == "proxy" and list(summary["agreement_by_link"]) == ["proxy"]
    assert summary["agreement_by_link"]["proxy"]["disagree"] == ["2015|1|5|2"]

    monkeypatch.setattr(live.launcher, "available", lambda: None)  # root, with iptables
    capsys.readouterr()
    assert cli.main([*argv, "--link", "kernel"]) == 1  # the kernel's links agree, the proxy's measured points still do not
    assert sorted(ran[2:]) == [("kernel", "2015|1|5|2"), ("kernel", "2015|3|5|2")]  # run again, not read from the proxy's file
    summary = json.loads(capsys.readouterr().out)
    assert {link: a["agree"] for link, a in summary["agreement_by_link"].items()} == {"kernel": 2, "proxy": 1}
    assert set(read_results(out / "live-kernel.csv")) == set(read_results(out / "live-proxy.csv")) == {"2015|1|5|2", "2015|3|5|2"}
    table = (out / "summary.md").read_text()
    assert "Live through the kernel's links and model agree on the verdict at 2 of 2" in table
    assert "Live through the link proxy and model agree on the verdict at 1 of 2 sampled points (50.0%) (not at 2015|1|5|2)" in table

    assert cli.main([*argv, "--link", "kernel"]) == 1 and len(ran) == 4  # resumed: nothing runs again


def test_a_link_mechanism_that_is_not_one_exits_2_naming_the_choices(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["sweep", "--out", str(tmp_path / "out"), "--link", "nic"])
    assert exited.value.code == 2 and "choose from 'auto', 'kernel', 'namespace', 'proxy'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_sweep_asked_for_the_kernel_s_links_where_it_may_not_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    from stormlab.runs import live, sweep

    out, argv = _sweep_with_a_model_on_disk(tmp_path, monkeypatch)
    monkeypatch.setattr(live.launcher, "available", lambda: "the kernel's links need root")
    monkeypatch.setattr(sweep, "judge_live", lambda *a: pytest.fail("a live point ran"))
    assert cli.main([*argv, "--link", "kernel"]) == 1
    assert "the kernel's links need root" in capsys.readouterr().err
    assert not (out / "live-kernel.csv").exists() and not (out / "summary.json").exists()


@pytest.mark.parametrize("change", [["--watch", "6"], ["--seed", "7"], []])
def test_a_sweep_resumed_for_another_fleet_seed_or_watch_is_refused(tmp_path, monkeypatch, capsys, change):
    """A point's key does not name the fleet, the seed or the moment it is judged: results measured
    for a 400-node fleet watched 12 periods never answer for 1,000 nodes, another seed or 6 periods."""
    monkeypatch.setenv("STORMLAB_STATE_DIR", str(tmp_path / "state"))
    out = tmp_path / "sweep"
    argv = ["sweep", "--quick", "--out", str(out), "--panels", "2015", "--blip-racks", "1", "--blip", "5s", "--gsis", "2",
            "--live", "0", "--jobs", "1", "--json"]  # fmt: skip
    assert cli.main(argv) == 0
    before = (out / "model.csv").read_text()
    unquick = [a for a in argv if a != "--quick"] if not change else argv
    assert cli.main([*unquick, *change]) == 2
    err = capsys.readouterr().err
    assert "holds a sweep measured for other settings" in err
    said = {"--watch": "watch_periods 12", "--seed": "seed 2015 there, 7 now"}
    assert said.get(change[0] if change else "", "nodes_per_rack 40 there, 100 now") in err
    assert (out / "model.csv").read_text() == before
