"""Modules imported at their first use (stormcore/later.py), and what a `stormlab` process imports."""

import builtins
import subprocess
import sys
import textwrap

import pytest

from stormcore.later import Later

HEAVY = ("matplotlib", "hypothesis", "schemathesis", "kubernetes")  # a chart, the fuzzer, the k8s backend


@pytest.fixture
def a_module(tmp_path, monkeypatch):
    """A module of our own on the path, counting how often it is run."""
    (tmp_path / "laterpkg").mkdir()
    (tmp_path / "laterpkg" / "__init__.py").write_text("")
    (tmp_path / "laterpkg" / "heavy.py").write_text(
        textwrap.dedent("""
            import builtins
            builtins.later_runs = getattr(builtins, "later_runs", 0) + 1
            ANSWER = 42
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "laterpkg.heavy"
    for name in ("laterpkg.heavy", "laterpkg"):
        sys.modules.pop(name, None)
    monkeypatch.delattr(builtins, "later_runs", raising=False)


def test_a_module_is_imported_at_its_first_name_read_and_only_once(a_module):
    heavy = Later(a_module)
    assert a_module not in sys.modules and heavy.installed  # found, not run
    assert heavy.ANSWER == 42 and heavy.ANSWER == 42
    assert a_module in sys.modules and heavy.load() is sys.modules[a_module]
    assert builtins.later_runs == 1  # type: ignore[attr-defined]


def test_a_module_not_installed_says_so_and_its_names_raise_the_import_error():
    missing = Later("no_such_package_here.sub")
    assert not missing.installed
    with pytest.raises(ModuleNotFoundError):
        missing.anything  # noqa: B018 - reading a name imports


def test_a_name_the_module_lacks_is_an_attribute_error(a_module):
    with pytest.raises(AttributeError):
        Later(a_module).NOT_THERE  # noqa: B018


def test_the_stormlab_command_imports_no_chart_fuzzer_or_k8s_client_until_used():
    """Building the whole command line (every `stormlab` process does) leaves them unimported:
    they cost ~1.2 s of a command's 2 s start before they were Later's."""
    probe = "import sys, stormlab.cli; stormlab.cli.build_parser(); print(' '.join(m for m in sys.modules if m.split('.')[0] in %r))"
    out = subprocess.run([sys.executable, "-c", probe % (HEAVY,)], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == []
