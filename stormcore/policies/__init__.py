"""A retry policy the lab did not write: a user's class, a policy file, or a library's configuration.

The ``retry_policy`` setting names the lab's own policies (``immediate``, ``full-jitter+budget``
…) or one of these, as ``resolve`` writes them:

- ``python:/abs/file.py:Name``: ``Name`` in that file: a class meeting the protocol
  (stormcore/retry.py, docs/policies.md; one instance per rack), an instance of one (copied per
  rack), a tenacity ``Retrying`` (or a function decorated with ``@retry``), or a urllib3 ``Retry``;
- ``file:/abs/policy.yaml`` (or ``.json``): a stormlab policy file (policy.schema.json), a gRPC
  service config (``methodConfig`` … ``retryPolicy``, ``retryThrottling``) or an Envoy route's
  ``retry_policy``, told apart by what they hold;
- ``entry:name``: a class registered by a package under the entry point group
  ``stormlab.policies``.

Anything that does not meet the protocol, raises, or answers nonsense (a negative, NaN or
unbounded delay) is refused with a PolicyError (exit code 2) before a lab starts: ``probe`` puts
every policy through a storm of misses first. Delays are profile seconds: ``build`` converts
them for a run at another speed, and a policy that breaks its promises later is stopped
(``Guarded``).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.util
import inspect
import logging
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from stormcore import retry
from stormcore.documents import load_yaml
from stormcore.policies import declared, from_envoy, from_grpc, from_tenacity, from_urllib3, limits
from stormcore.policies.errors import PolicyError
from stormcore.settings import RETRY_POLICIES, RETRY_WRAPPERS, USER_POLICIES, LabSettings, SettingsError

log = logging.getLogger("stormlab.policies")
PREFIXES = USER_POLICIES  # the setting's own list of the forms
ENTRY_POINT_GROUP = "stormlab.policies"
MAX_DELAY_S = 3600.0  # profile seconds: a retry later than this is not a retry (nor a policy this lab can judge)
POLICY_FILE_SUFFIXES = (".yaml", ".yml", ".json")
MAX_FILE_BYTES = 256 * 1024  # a policy file, a gRPC service config or an Envoy route: a few kB


@dataclass(frozen=True)
class Loaded:
    """A policy ready to run: how to make one (per rack), and what it is, in words."""

    spec: str
    kind: str  # "python class", "policy file", "tenacity", "urllib3 Retry", "gRPC service config", "Envoy retry policy"
    make: Callable[[], retry.RetryPolicy]
    attempt_timeout_s: float | None = None  # the policy's own per-attempt timeout (the lab's allowance), if it has one
    maps: tuple[str, ...] = ()  # what an adapter read and how it runs it

    @property
    def label(self) -> str:
        return short_name(self.spec)


def is_spec(name: str) -> bool:
    return name.startswith(PREFIXES)


def short_name(spec: str) -> str:
    """What a person calls it: the file and name, not the whole path."""
    if spec.startswith("python:"):
        path, _, name = spec[len("python:") :].rpartition(":")
        return f"{Path(path).name}:{name}"
    if spec.startswith("file:"):
        return Path(spec[len("file:") :]).name
    return spec.removeprefix("entry:")


def source_file(spec: str) -> Path | None:
    """The file a spec reads, if it names one."""
    if spec.startswith("python:"):
        return Path(spec[len("python:") :].rpartition(":")[0])
    if spec.startswith("file:"):
        return Path(spec[len("file:") :])
    return None


def resolve(text: str, cwd: Path | None = None) -> str:
    """What a person typed (``./my_policy.py:MyPolicy``, ``policy.yaml``, a registered name, a
    lab policy) as the setting's value, loaded and probed apart: PolicyError if it cannot run."""
    return checked(text, cwd).spec


def checked(text: str, cwd: Path | None = None) -> limits.Described:
    """What a person typed, and what it is: a policy of theirs is loaded and probed in a child
    process under the limits (its code never runs in this one); PolicyError if it cannot run, or
    runs past a limit."""
    spec = _spec(text, cwd)
    if not is_spec(spec):
        return limits.Described(spec, "the lab's", spec, None, ())
    return limits.check(spec, short_name(spec))


def _spec(text: str, cwd: Path | None) -> str:
    """The setting's value for what a person typed (nothing is loaded)."""
    text = text.strip()
    if not text:
        raise PolicyError("a retry policy: give a name, FILE.py:NAME, a policy file or an entry point")
    if is_spec(text):
        spec = text
    elif ".py:" in text or text.endswith(".py"):
        path, _, name = text.rpartition(":") if ".py:" in text else (text, "", "")
        if not name:
            raise PolicyError(f"{text}: say which class or object in the file: {text}:NAME")
        spec = f"python:{_existing(path, cwd)}:{name}"
    elif text.endswith(POLICY_FILE_SUFFIXES):
        spec = f"file:{_existing(text, cwd)}"
    elif _lab_policy(text):
        return text
    elif _entry_point(text) is not None:
        spec = f"entry:{text}"
    else:
        raise PolicyError(
            f"no retry policy {text!r}: the lab's are {', '.join(retry_names())}; or give FILE.py:NAME, a policy file "
            f"({', '.join(POLICY_FILE_SUFFIXES)}) or a name registered under the entry point group {ENTRY_POINT_GROUP}"
        )
    return spec


def retry_names() -> tuple[str, ...]:
    return RETRY_POLICIES + tuple(f"{p}+{w}" for p in RETRY_POLICIES[:1] for w in RETRY_WRAPPERS)


def _lab_policy(name: str) -> bool:
    try:
        LabSettings(retry_policy=name)
    except SettingsError:
        return False
    return True


def _existing(path: str, cwd: Path | None) -> Path:
    full = ((cwd or Path.cwd()) / path).resolve()
    if not full.is_file():
        raise PolicyError(f"no file {path} (looked for {full})")
    return full


def _entry_point(name: str) -> Any:
    found = entry_points(group=ENTRY_POINT_GROUP, name=name)
    return next(iter(found), None)


# -- loading -----------------------------------------------------------------------------------


@functools.cache
def load(spec: str) -> Loaded:
    """The policy a spec names (imported or read once per process). PolicyError if it cannot."""
    if spec.startswith("python:"):
        path, _, name = spec[len("python:") :].rpartition(":")
        module = _import_file(Path(path))
        if not hasattr(module, name):
            found = sorted(n for n, v in vars(module).items() if not n.startswith("_") and not inspect.ismodule(v))
            raise PolicyError(f"{Path(path).name} has no {name!r} (it has: {', '.join(found) or 'nothing public'})")
        return _from_object(spec, getattr(module, name), f"{Path(path).name}:{name}")
    if spec.startswith("file:"):
        return _from_file(spec, Path(spec[len("file:") :]))
    if spec.startswith("entry:"):
        name = spec[len("entry:") :]
        point = _entry_point(name)
        if point is None:
            raise PolicyError(f"no entry point {name!r} in the group {ENTRY_POINT_GROUP}")
        try:
            obj = point.load()
        except Exception as exc:
            raise PolicyError(f"the entry point {name!r} ({point.value}) did not load: {type(exc).__name__}: {exc}") from None
        return _from_object(spec, obj, point.value)
    raise PolicyError(f"not a policy spec: {spec!r} (python:…, file:… or entry:…)")


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise PolicyError(f"no file {path}")
    name = "stormlab_policy_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PolicyError(f"{path} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # a dataclass in the file looks its module up
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise PolicyError(f"{path.name} raised on import: {type(exc).__name__}: {exc}") from None
    return module


def _from_object(spec: str, obj: Any, where: str) -> Loaded:
    if from_tenacity.is_tenacity(obj):
        make, maps = from_tenacity.adapt(obj)
        return Loaded(spec, "tenacity", make, None, maps)
    if from_urllib3.is_retry(obj):
        make, maps = from_urllib3.adapt(obj)
        return Loaded(spec, "urllib3 Retry", make, None, maps)
    if inspect.isclass(obj):
        missing = [m for m in ("next_delay",) if not callable(getattr(obj, m, None))]
        if missing:
            raise PolicyError(f"{where} is not a retry policy: it has no next_delay(miss, rng) (docs/policies.md)")
        try:
            obj()
        except Exception as exc:
            raise PolicyError(f"{where}() raised: {type(exc).__name__}: {exc} (a policy class is made with no arguments)") from None
        return Loaded(spec, "python class", _filled(obj), _timeout(obj()), ())
    if callable(getattr(obj, "next_delay", None)):
        return Loaded(spec, "python object", _filled(lambda: copy.deepcopy(obj)), _timeout(obj), ())
    raise PolicyError(
        f"{where} is a {type(obj).__name__}, not a retry policy: give a class with next_delay(miss, rng), a tenacity "
        "Retrying or a urllib3 Retry (docs/policies.md)"
    )


def _timeout(policy: Any) -> float | None:
    value = getattr(policy, "attempt_timeout_s", None)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0.01 <= value <= 600:
        raise PolicyError(f"attempt_timeout_s must be seconds between 0.01 and 600, got {value!r}")
    return float(value)


def _filled(make: Callable[[], Any]) -> Callable[[], retry.RetryPolicy]:
    """A user's policy with the protocol's optional parts (record, admits, sent, finished) filled in."""

    def made() -> retry.RetryPolicy:
        return _Filled(make())

    return made


class _Filled:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._record = getattr(inner, "record", None)
        self._admits = getattr(inner, "admits", None)
        self._sent = getattr(inner, "sent", None)
        self._finished = getattr(inner, "finished", None)

    def next_delay(self, miss: retry.Miss, rng: random.Random) -> float | None:
        return self.inner.next_delay(miss, rng)

    def record(self, ok: bool, now: float = 0.0) -> None:
        if self._record is not None:
            self._record(ok, now)

    def admits(self, now: float) -> bool:
        return True if self._admits is None else self._admits(now)

    def sent(self, retry: bool, now: float) -> None:
        if self._sent is not None:
            self._sent(retry, now)

    def finished(self, retry: bool, now: float) -> None:
        if self._finished is not None:
            self._finished(retry, now)


def _from_file(spec: str, path: Path) -> Loaded:
    if not path.is_file():
        raise PolicyError(f"no file {path}")
    try:
        doc = load_yaml(path.read_text(), path.name, MAX_FILE_BYTES, PolicyError, "a policy file")  # bounded, numbers finite
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{path.name} is not YAML or JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise PolicyError(f"{path.name} must hold a mapping (a policy file, a gRPC service config or an Envoy retry_policy)")
    if from_grpc.is_service_config(doc):
        make, timeout, maps = from_grpc.adapt(doc)
        return Loaded(spec, "gRPC service config", make, timeout, maps)
    if from_envoy.is_envoy(doc):
        make, timeout, maps = from_envoy.adapt(doc)
        return Loaded(spec, "Envoy retry policy", make, timeout, maps)
    make, timeout, maps = declared.adapt(doc)
    return Loaded(spec, "policy file", make, timeout, maps)


# -- checking ----------------------------------------------------------------------------------


def check_delay(delay: Any, where: str) -> float | None:
    """A delay as the protocol allows it (None, or finite seconds in 0..MAX_DELAY_S), else PolicyError."""
    if delay is None:
        return None
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        raise PolicyError(f"{where} returned {delay!r} ({type(delay).__name__}): a delay is seconds (a number) or None")
    if math.isnan(delay) or delay < 0 or delay > MAX_DELAY_S:
        raise PolicyError(f"{where} returned {delay!r}: a delay is between 0 and {MAX_DELAY_S:g} seconds (None: give up)")
    return float(delay)


def probe(loaded: Loaded, rounds: int = 3, note: Callable[[str], None] | None = None) -> None:
    """Put the policy through what a rack does in a storm before any lab runs it: a run of misses
    of every kind, successes between, the breaker's question. PolicyError on an exception, a
    wrong answer, or a policy that answers two rngs of one seed differently. Each call goes
    through ``limits.call`` (timed where limits are imposed: the check's child), told to ``note``
    first."""

    def step(what: str, fn: Callable[..., Any], *args: Any) -> Any:
        if note is not None:
            note(what)
        try:
            return limits.call(lambda: what, fn, *args)
        except PolicyError:
            raise
        except Exception as exc:  # named by the call that raised, not by the step around it
            raise PolicyError(f"{what} raised {type(exc).__name__}: {exc}") from None

    answers = []
    for _ in range(2):
        policy = step(f"{loaded.label}: making one", loaded.make)
        rng, said, now = random.Random(2015), [], 0.0
        for r in range(rounds):
            outcomes: tuple[str, ...] = ()
            last, began = 0.0, now
            for attempt in range(1, 31):
                outcome = retry.OUTCOMES[(attempt + r) % len(retry.OUTCOMES)]
                outcomes += (outcome,)
                now += 1.0
                where = f"{loaded.label}: next_delay after miss {attempt} ({outcome})"
                before = f"{loaded.label}: before miss {attempt} ({outcome}),"
                admitted = step(f"{before} admits", policy.admits, now)
                if admitted is True:
                    step(f"{before} sent", policy.sent, attempt > 1, now - 0.5)
                    step(f"{before} finished", policy.finished, attempt > 1, now)
                step(f"{before} record", policy.record, False, now)
                miss = retry.Miss(attempt, outcome, now - began, last, outcomes)
                delay = check_delay(step(where, policy.next_delay, miss, rng), where)
                if not isinstance(admitted, bool):
                    raise PolicyError(f"{loaded.label}: admits() returned {admitted!r}, not True or False")
                said.append(delay)
                if delay is None:
                    break
                last, now = delay, now + delay
            after = f"{loaded.label}: an attempt that succeeded,"
            step(f"{after} sent", policy.sent, False, now)
            step(f"{after} finished", policy.finished, False, now + 0.5)
            step(f"{after} record", policy.record, True, now + 0.5)
        answers.append(said)
    if answers[0] != answers[1]:
        raise PolicyError(
            f"{loaded.label}: two runs with one seed chose different delays ({answers[0][:4]} … vs {answers[1][:4]} …): draw "
            "jitter from the rng the lab passes (the same seed must give the same storm)"
        )


Told = Callable[[str], None]  # hears the name of a call into a user's policy that raised or broke a promise


class Guarded:
    """A user's policy as a rack, the lease manager or the model runs it: its delays checked at
    every call, converted from profile seconds at a run's speed. A call that raises, or a broken
    promise, raises PolicyError naming the call (strict: the model, which stops and says so) or is
    answered by the protocol's default for that call (live: a retry given up, an outcome not
    recorded, work admitted), counted by call in ``broken`` and logged once per call: a user's
    policy never ends the task that calls it. Each call goes through ``limits.call``: timed where
    limits are imposed (certify's model)."""

    def __init__(self, inner: retry.RetryPolicy, speed: float, label: str, strict: bool, told: Told | None = None) -> None:
        self.inner, self.speed, self.label, self.strict, self.told = inner, speed, label, strict, told
        self.broken: dict[str, int] = {}  # calls that raised or broke a promise, by the call's name

    def next_delay(self, miss: retry.Miss, rng: random.Random) -> float | None:
        s = self.speed
        if s != 1.0:
            miss = miss._replace(elapsed_s=miss.elapsed_s * s, last_delay_s=miss.last_delay_s * s)
        where = f"{self.label}: next_delay after miss {miss.attempt}"
        try:
            delay = check_delay(limits.call(lambda: where, self.inner.next_delay, miss, rng), where)
        except Exception as exc:
            return self._broke("next_delay", exc, None)
        return None if delay is None else delay / s

    def _call(self, what: str, default: Any, *args: Any) -> Any:
        try:
            return limits.call(lambda: f"{self.label}: {what}", getattr(self.inner, what), *args)
        except Exception as exc:
            return self._broke(what, exc, default)

    def _broke(self, what: str, exc: Exception, default: Any) -> Any:
        said = str(exc) if isinstance(exc, PolicyError) else f"{self.label}: {what} raised {type(exc).__name__}: {exc}"
        if self.strict:
            raise PolicyError(said) from None
        self.broken[what] = self.broken.get(what, 0) + 1
        if self.told is not None:  # the process's count (a metric), kept across the policies it builds
            self.told(what)
        if self.broken[what] == 1:  # once per call in the log: every failure after it is answered the same way
            log.warning("the retry policy broke the protocol (answered by the protocol's default, %r): %s", default, said)
        return default

    def record(self, ok: bool, now: float = 0.0) -> None:
        self._call("record", None, ok, now * self.speed)

    def admits(self, now: float) -> bool:
        return bool(self._call("admits", True, now * self.speed))

    def sent(self, retry: bool, now: float) -> None:
        self._call("sent", None, retry, now * self.speed)

    def finished(self, retry: bool, now: float) -> None:
        self._call("finished", None, retry, now * self.speed)


def broken_calls(policy: object) -> dict[str, int]:
    """How many calls into a user's policy raised or broke a promise, by call (none for the lab's own)."""
    return dict(policy.broken) if isinstance(policy, Guarded) else {}


def build(spec: str, speed: float = 1.0, strict: bool = True, told: Told | None = None) -> retry.RetryPolicy:
    """One rack's policy from its spec, in the time of a run at ``speed``; ``told`` hears the name
    of each call the policy could not answer (live only)."""
    loaded = load(spec)
    return Guarded(loaded.make(), speed, loaded.label, strict, told)


def named(name: str, s: LabSettings, strict: bool = True, told: Told | None = None) -> retry.RetryPolicy:
    """One policy object of ``name`` (the lab's, with ``s``' backoff and budget settings, or a
    user's spec) in the time of the run ``s`` is at."""
    if is_spec(name):
        return build(name, s.speed, strict, told)
    return retry.build(name, s.retry_base_s, s.retry_cap_s, s.budget_tokens, s.budget_ratio, s.breaker_failures, s.breaker_open_s)
