"""`stormlab ARGS` run in the test's own process, with exactly the environment a shell would give it."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import time
from collections.abc import Mapping

from stormlab.cli import main


def stormlab(argv: list[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """The command's exit code, stdout and stderr, as `subprocess.run` would give them: the same
    code without a new interpreter's start-up (an e2e test's commands took 6-18 s each as processes
    with stacks running). ``env`` is its whole environment for the call; the test's own comes back
    after it, whatever the command set (a compose command may remember the stack's token there)."""
    saved, out, err = dict(os.environ), io.StringIO(), io.StringIO()
    started = time.monotonic()
    try:
        os.environ.clear()
        os.environ.update(env)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    print(f"$ stormlab {' '.join(argv)} -> {code} in {time.monotonic() - started:.1f} s")
    return subprocess.CompletedProcess(["stormlab", *argv], code, out.getvalue(), err.getvalue())
