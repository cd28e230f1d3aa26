"""A user's policy under limits: its code runs apart from the command that asked, each call within
its time and the process within its memory, so a policy that blocks, spins or eats memory is
refused (exit 2, naming the call) instead of hanging certify or `stormlab up` for ever."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from stormcore import policies
from stormcore.policies import limits
from stormcore.policies.errors import PolicyError
from stormlab import cli


def write(tmp_path, source: str, name: str = "mine.py") -> str:
    (tmp_path / name).write_text(textwrap.dedent(source))
    return str(tmp_path / name)


BLOCKS = """
import time
class Stuck:
    def next_delay(self, miss, rng):
        time.sleep(3600)
"""
SPINS = """
class Spins:
    def admits(self, now):
        while True:
            try:
                while True:
                    pass
            except Exception:
                pass
    def next_delay(self, miss, rng):
        return 1.0
"""
EATS = """
class Hungry:
    def next_delay(self, miss, rng):
        self.hoard = bytearray(4 << 30)
        return 1.0
"""


@pytest.mark.parametrize(
    "source, name, refusal",
    [
        (BLOCKS, "Stuck", r"mine.py:Stuck: next_delay after miss 1 \(unreachable\) did not return within 2 s: refused"),
        (SPINS, "Spins", r"before miss 1 \(unreachable\), admits did not return within 2 s"),  # it swallows every exception
        (EATS, "Hungry", r"next_delay after miss 1 \(unreachable\) used more than the 1024 MiB of memory a policy may"),
    ],
    ids=["blocks", "spins and swallows every exception", "eats memory"],
)
def test_a_policy_that_blocks_spins_or_eats_memory_is_refused_naming_the_call(tmp_path, source, name, refusal):
    path = write(tmp_path, source)
    with pytest.raises(PolicyError, match=refusal):
        policies.resolve(f"{path}:{name}")


def test_a_file_that_exits_on_import_is_refused_not_the_command(tmp_path):
    path = write(tmp_path, "import os\nos._exit(7)\n")
    with pytest.raises(PolicyError, match=r"mine.py:P: loading it: the policy's process ended with exit code 7"):
        policies.resolve(f"{path}:P")


def test_the_command_that_asked_never_imports_the_file(tmp_path):
    path = write(tmp_path, "import pathlib, os\npathlib.Path(__file__).with_name(f'ran-{os.getpid()}').touch()\nclass Ok:\n"
                 "    def next_delay(self, miss, rng):\n        return 1.0\n")  # fmt: skip
    described = policies.checked(f"{path}:Ok")
    assert (described.kind, described.label) == ("python class", "mine.py:Ok")
    ran = [p.name for p in tmp_path.glob("ran-*")]
    assert len(ran) == 1 and ran[0] != f"ran-{os.getpid()}"  # imported once, in the child


def test_a_call_past_its_limit_raises_where_limits_are_imposed_and_is_plain_elsewhere():
    assert limits.call(lambda: "x", sum, [1, 2]) == 3  # not imposed in this process: a plain call
    script = textwrap.dedent(
        """
        import json, time
        from stormcore.policies import limits
        from stormcore.policies.errors import PolicyError
        limits.impose(0.2)
        said = [limits.call(lambda: "quick", sum, [1, 2])]
        try:
            limits.call(lambda: "P: next_delay after miss 3", time.sleep, 30)
        except PolicyError as exc:
            said.append(str(exc))
        time.sleep(0.5)  # the timer is off once the call is over
        print(json.dumps(said))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=20)
    overran = "P: next_delay after miss 3 did not return within 0.2 s: refused (a retry decision takes microseconds)"
    assert json.loads(done.stdout) == [3, overran]


def test_certify_refuses_a_policy_that_blocks_in_the_storm_with_exit_2(tmp_path, capsys):
    """The probe's misses pass; the model's storm meets the block: its worker names the call."""
    path = write(
        tmp_path,
        """
        import time
        class Late:
            calls = 0
            def next_delay(self, miss, rng):
                Late.calls += 1
                if Late.calls > 400:
                    time.sleep(3600)
                return 0.1
        """,
    )
    argv = ["certify", f"{path}:Late", "--live", "0", "--quick", "--jobs", "2", "--no-references", "--out", str(tmp_path / "cert")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "mine.py:Late: next_delay after miss" in err and "did not return within 2 s" in err
    assert not (tmp_path / "cert" / "certificate.json").exists()
