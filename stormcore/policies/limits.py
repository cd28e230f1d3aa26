"""A user's retry policy under limits: its code is run apart, each call within a time limit and the
whole within a memory limit, so a policy that blocks, spins or eats memory is refused (exit code 2,
naming the call) instead of hanging the command that runs it.

A policy file is executed: importing ``my_policy.py`` runs it, and so does every call the lab makes
to it. The command a person runs on their own file (``stormlab certify``, ``stormlab up
--retry-policy``) loads and probes it in a child process (``check``: ``python -m
stormcore.policies.apart SPEC``) and learns what it is from that child's answer; it never
imports the file itself. certify's model runs in worker processes that ``impose`` the same limits
on every call (``call``). A live rack runs the policy its owner started it with and no limits: by
then the probe and the model have run it.

Theory of operation: ``impose`` arms SIGALRM once; ``call`` starts a one-shot real-time timer
before the policy's code and stops it after. A timer that fires while the call runs raises
``Overran``, a BaseException, so a policy's own ``except Exception`` cannot swallow it (and the
timer keeps firing every 0.1 s after the first, for one that catches everything). Memory is the
process's address space (RLIMIT_AS) capped at what it had when the limits were imposed plus
``memory_bytes``: a policy that grows past it meets MemoryError in its own code.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from stormcore.policies.errors import PolicyError

CALL_LIMIT_S = 2.0  # one call of the policy's (making one, next_delay, record, ...): a retry decision takes microseconds
LOAD_LIMIT_S = 30.0  # importing its file, with whatever that imports
MEMORY_BYTES = 1 << 30  # what a policy may add to the process that runs it
CHECK_LIMIT_S = 120.0  # the whole check, load and probe, in its child: past it the child is killed

T = TypeVar("T")


class Overran(BaseException):
    """A call of the policy's that ran past its limit (BaseException: ``except Exception`` in the
    policy's own code does not catch it)."""


_limit_s: float | None = None  # set by impose(): calls are timed in this process
_memory_bytes = 0
_in_call = False  # the timer may fire a hair after the call returned: only a call in progress overran


def _overran(signum: int, frame: Any) -> None:
    if _in_call:
        raise Overran


def impose(call_limit_s: float = CALL_LIMIT_S, memory_bytes: int = MEMORY_BYTES) -> None:
    """Every later ``call`` in this process within ``call_limit_s``, and the process within its
    present address space plus ``memory_bytes`` (a process's initializer: a certify worker, the
    check's child). Only the main thread can take SIGALRM: call it there."""
    global _limit_s, _memory_bytes
    signal.signal(signal.SIGALRM, _overran)
    _limit_s, _memory_bytes = call_limit_s, memory_bytes
    cap = _address_space() + memory_bytes
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))


def _address_space() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def call(where: Callable[[], str], fn: Callable[..., T], *args: Any, limit_s: float | None = None) -> T:
    """``fn(*args)``: the policy's code. Where limits are imposed, one that runs past its time
    (``limit_s``, else the imposed call limit) or out of memory raises PolicyError naming ``where()``;
    elsewhere it is a plain call."""
    global _in_call
    if _limit_s is None:
        return fn(*args)
    limit = limit_s or _limit_s
    signal.setitimer(signal.ITIMER_REAL, limit, 0.1)
    _in_call = True
    try:
        return fn(*args)
    except Overran:
        raise PolicyError(f"{where()} did not return within {limit:g} s: refused (a retry decision takes microseconds)") from None
    except MemoryError:
        raise PolicyError(f"{where()} used more than the {_memory_bytes >> 20} MiB of memory a policy may: refused") from None
    finally:
        _in_call = False
        signal.setitimer(signal.ITIMER_REAL, 0)


@dataclass(frozen=True)
class Described:
    """What a checked policy is, as its child found it: enough for the command that asked, which
    never imports the file."""

    spec: str
    kind: str
    label: str
    attempt_timeout_s: float | None
    maps: tuple[str, ...]


CALL_LINE = "call: "  # the child says what it is about to call, so a child killed in one is named


def check(spec: str, label: str) -> Described:
    """The policy ``spec`` loaded and probed in a child process under the limits: what it is, or
    PolicyError (exit 2) saying what it did wrong, where."""
    argv = [sys.executable, "-m", "stormcore.policies.apart", spec]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CHECK_LIMIT_S)
        out, code = done.stdout, done.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        raise PolicyError(f"{_last_call(out, label)} did not end within {CHECK_LIMIT_S:g} s, the whole check's limit: refused") from None
    answer = _answer(out)
    if answer is None:
        why = f"was killed by signal {-code}" if code < 0 else f"ended with exit code {code}"
        raise PolicyError(f"{_last_call(out, label)}: the policy's process {why} ({done.stderr.strip()[-300:] or 'nothing said'}): refused")
    if not answer.get("ok"):
        raise PolicyError(str(answer.get("error")))
    timeout = answer.get("attempt_timeout_s")
    return Described(spec, str(answer["kind"]), str(answer["label"]), None if timeout is None else float(timeout), tuple(answer["maps"]))


def _answer(out: str) -> dict[str, Any] | None:
    lines = [line for line in out.splitlines() if line.startswith("{")]
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _last_call(out: str, label: str) -> str:
    calls = [line.removeprefix(CALL_LINE) for line in out.splitlines() if line.startswith(CALL_LINE)]
    return calls[-1] if calls else f"{label}: loading it"
