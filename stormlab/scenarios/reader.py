"""Reads scenario files: every error names the file, the line and the field (exit code 2)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import fields
from typing import Any

import yaml

from chaos import catalog
from stormcore.documents import compose_yaml, finite
from stormcore.settings import (
    DEFAULT_PROFILE,
    POLICY_TIMEOUTS,
    USER_POLICIES,
    LabSettings,
    SettingsError,
    parse_bool,
    parse_duration,
    parse_value,
    profile,
)
from stormlab.engine.reading import PROBES
from stormlab.responder.desk import ANSWERS, TEAM
from stormlab.responder.monitoring import MONITORING
from stormlab.responder.moves import ROLES
from stormlab.scenarios.autopilot import MOVES, Rules
from stormlab.scenarios.scenario import ACTIONS, FAULTS, KINDS, Check, Compare, Inject, Scenario, ScenarioError, Step, one_table

# Step arguments: every fault argument of the catalog, "pick" (N racks chosen by the seed) and a note's text.
ARG_KEYS = tuple(sorted({a.key for f in catalog.FAULTS.values() for a in f.args} | {"pick", "text", "fix", "severity", "alert"}))
TOP_KEYS = (
    "title",
    "description",
    "profile",
    "settings",
    "steady_state",
    "steady_state_within",
    "steps",
    "rollback",
    "stop_when",
    "scoring",
    "compare",
    "injects",
    "monitoring",
)
# A scenario is handed to every team's lab (a room's, a game day's): whoever wrote it is not the
# person whose lab runs it, so it names the lab's own retry policies, never code to load.
OWN_POLICIES_ONLY = (
    "a scenario names the lab's own retry policies (immediate, exponential, full-jitter, decorrelated-jitter, optionally "
    "+budget, +adaptive or +breaker), not a file or an entry point: a policy of your own runs from your own command "
    "line (stormlab up --retry-policy FILE, stormlab certify FILE), checked and under limits"
)
NUMERIC_KEYS = {a.key for f in catalog.FAULTS.values() for a in f.args if a.kind in (catalog.NUMBER, catalog.INTEGER)} | {"pick"}


MAX_BYTES = 256 * 1024  # the flagship scenario is 6 kB


def load(text: str, source: str = "scenario") -> Scenario:
    root = compose_yaml(text, source, MAX_BYTES, ScenarioError, "a scenario")  # its size, nesting and aliases bounded
    if root is None:
        raise ScenarioError(f"{source}: empty file")
    return _Reader(source).scenario(root)


def closest(word: str, known: Iterable[str]) -> str:
    """``" (did you mean blip?)"`` for a name close to a known one."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, node: yaml.Node, path: str, message: str) -> ScenarioError:
        return ScenarioError(f"{self.source}:{node.start_mark.line + 1}: {path}: {message}")

    def mapping(self, node: yaml.Node, path: str, known: tuple[str, ...]) -> dict[str, yaml.Node]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, path, "must be a mapping")
        out = {}
        for key, value in node.value:
            if key.value not in known:
                raise self.fail(key, f"{path}.{key.value}", f"unknown field; known: {', '.join(known)}")
            out[key.value] = value
        return out

    def need(self, fields_: dict, node: yaml.Node, path: str, name: str) -> yaml.Node:
        if name not in fields_:
            raise self.fail(node, path, f"missing field {name!r}")
        return fields_[name]

    def text(self, node: yaml.Node, path: str) -> str:
        if not isinstance(node, yaml.ScalarNode) or not str(node.value).strip():
            raise self.fail(node, path, "must be text")
        return str(node.value)

    def number(self, node: yaml.Node, path: str) -> float:
        try:
            return finite(self.text(node, path))
        except ValueError:
            raise self.fail(node, path, f"must be a number, got {node.value!r}") from None

    def duration(self, node: yaml.Node, path: str) -> float:
        try:
            value = parse_duration(self.text(node, path))
        except SettingsError:
            raise self.fail(node, path, f"not a duration: {node.value!r} (try 5s, 500ms, 2m)") from None
        if value < 0 or value > 24 * 3600:
            raise self.fail(node, path, "must be between 0 and 24h")
        return value

    def items(self, node: yaml.Node, path: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, path, "must be a list")
        return list(node.value)

    def scenario(self, root: yaml.Node) -> Scenario:
        top = self.mapping(root, "scenario", TOP_KEYS)
        title = self.text(self.need(top, root, "scenario", "title"), "title")
        name = self.text(top["profile"], "profile") if "profile" in top else DEFAULT_PROFILE
        try:
            base = profile(name)
        except SettingsError as exc:
            raise self.fail(top["profile"], "profile", str(exc)) from None
        settings = self.settings(top.get("settings"), base)
        checks = (
            tuple(
                self.check(n, f"steady_state[{i}]", timed=False, held=False)
                for i, n in enumerate(self.items(top["steady_state"], "steady_state"))
            )
            if "steady_state" in top
            else ()
        )
        steps_node = self.need(top, root, "scenario", "steps")
        steps = tuple(self.step(n, f"steps[{i}]") for i, n in enumerate(self.items(steps_node, "steps")))
        if not steps:
            raise self.fail(steps_node, "steps", "needs at least one step")
        rollback = (
            tuple(
                self.step(n, f"rollback[{i}]", allowed=("fault", "action")) for i, n in enumerate(self.items(top["rollback"], "rollback"))
            )
            if "rollback" in top
            else ()
        )
        seen: set[str] = set()
        for step in [x for s in steps for x in (s, *s.autopilot, *s.watch)]:
            if step.name in seen:
                raise ScenarioError(f"{self.source}:{step.line}: {step.path}.name: step names must be unique: {step.name}")
            seen.add(step.name)
        # the rules' autopilot's moves are named as in stormlab/scenarios/autopilot.py: comparisons may measure from them
        names = sorted(seen | ({m.name for m in MOVES} if any(s.rules is not None for s in steps) else set()))
        onset = None
        if "scoring" in top:
            scoring = self.mapping(top["scoring"], "scoring", ("onset",))
            onset = self.text(self.need(scoring, top["scoring"], "scoring", "onset"), "scoring.onset")
            if onset not in names:
                raise self.fail(scoring["onset"], "scoring.onset", f"no step named {onset!r}")
        compare = (
            tuple(self.compare(n, f"compare[{i}]", names) for i, n in enumerate(self.items(top["compare"], "compare")))
            if "compare" in top
            else ()
        )
        description = self.text(top["description"], "description") if "description" in top else ""
        stops = (
            tuple(self.check(n, f"stop_when[{i}]", timed=False) for i, n in enumerate(self.items(top["stop_when"], "stop_when")))
            if "stop_when" in top
            else ()
        )
        after = self.duration(top["steady_state_within"], "steady_state_within") if "steady_state_within" in top else 0.0
        listed = self.items(top["injects"], "injects") if "injects" in top else []
        injects = tuple(self.inject(n, f"injects[{i}]") for i, n in enumerate(listed))
        if len({i.name for i in injects}) < len(injects):
            raise self.fail(top["injects"], "injects", "inject names must be unique (an ack names its inject)")
        monitoring = self.text(top["monitoring"], "monitoring") if "monitoring" in top else MONITORING[0]
        if monitoring not in MONITORING:
            raise self.fail(top["monitoring"], "monitoring", f"one of {', '.join(MONITORING)}, got {monitoring!r}")
        return Scenario(title, name, settings, checks, steps, rollback, onset, compare, description, stops, after, injects, monitoring)

    def inject(self, node: yaml.Node, path: str) -> Inject:
        """A message at a time (``at``) or on a condition (``when``), to a role or the team, with
        what it expects back (``expect``: ack, post or note) ``within`` a time."""
        m = self.mapping(node, path, ("name", "at", "when", "to", "message", "expect", "within", "names_tables"))
        name = self.text(self.need(m, node, path, "name"), f"{path}.name")
        to = self.text(self.need(m, node, path, "to"), f"{path}.to")
        if to not in (*ROLES, TEAM):
            raise self.fail(m["to"], f"{path}.to", f"a role ({', '.join(ROLES)}) or {TEAM}, got {to!r}")
        if ("at" in m) == ("when" in m):
            raise self.fail(node, path, "needs at (a time of the run) or when (a condition), one of them")
        answer = self.text(m["expect"], f"{path}.expect") if "expect" in m else "ack"
        if answer not in ANSWERS:
            raise self.fail(m["expect"], f"{path}.expect", f"one of {', '.join(ANSWERS)}, got {answer!r}")
        names = "names_tables" in m and self.switch(m["names_tables"], f"{path}.names_tables")
        if names and answer != "post":
            raise self.fail(m["names_tables"], f"{path}.names_tables", "goes with expect: post (the post names the tables)")
        return Inject(
            name=name,
            to=to,
            message=self.text(self.need(m, node, path, "message"), f"{path}.message"),
            line=node.start_mark.line + 1,
            at_s=self.duration(m["at"], f"{path}.at") if "at" in m else None,
            when=self.check(m["when"], f"{path}.when", timed=False) if "when" in m else None,
            answer=answer,
            within_s=self.duration(m["within"], f"{path}.within") if "within" in m else 300.0,
            names_tables=names,
        )

    def switch(self, node: yaml.Node, path: str) -> bool:
        try:
            return parse_bool(self.text(node, path))
        except SettingsError as exc:
            raise self.fail(node, path, str(exc)) from None

    def settings(self, node: yaml.Node | None, base: LabSettings) -> LabSettings:
        if node is None:
            return base
        known = tuple(f.name for f in fields(LabSettings))
        values = {}
        for key, value in self.mapping(node, "settings", known).items():
            f = next(f for f in fields(LabSettings) if f.name == key)
            try:
                values[key] = parse_value(f, self.text(value, f"settings.{key}"))
            except SettingsError as exc:
                raise self.fail(value, f"settings.{key}", str(exc).removeprefix(f"{key}: ")) from None
            if key in POLICY_TIMEOUTS and values[key].startswith(USER_POLICIES):
                raise self.fail(value, f"settings.{key}", OWN_POLICIES_ONLY)
        try:
            return base.replace(**values)
        except SettingsError as exc:
            raise self.fail(node, "settings", str(exc)) from None

    def check(self, node: yaml.Node, path: str, timed: bool = True, held: bool = True) -> Check:
        """``timed``: needs ``within``; ``held``: may say ``for`` how long it must hold."""
        known = ("probe", "above", "below", "table", "expr") + (("within",) if timed else ()) + (("for",) if held else ())
        m = self.mapping(node, path, known)
        probe_ = self.text(self.need(m, node, path, "probe"), f"{path}.probe")
        if probe_ not in PROBES:
            raise self.fail(m["probe"], f"{path}.probe", f"unknown probe {probe_!r}; known: {', '.join(PROBES)}")
        if "above" not in m and "below" not in m:
            raise self.fail(node, path, "needs above, below or both")
        if (probe_ == "table_error_ratio") != ("table" in m):
            raise self.fail(node, path, "table goes with the table_error_ratio probe, and that probe needs it")
        if (probe_ == "promql") != ("expr" in m):
            raise self.fail(node, path, "expr (a PromQL expression) goes with the promql probe, and that probe needs it")
        above, below = (self.number(m[k], f"{path}.{k}") if k in m else None for k in ("above", "below"))
        check = Check(
            probe_,
            above,
            below,
            table=self.text(m["table"], f"{path}.table") if "table" in m else None,
            within_s=self.duration(m["within"], f"{path}.within") if "within" in m else 0.0,
            expr=self.text(m["expr"], f"{path}.expr") if "expr" in m else None,
            for_s=self.duration(m["for"], f"{path}.for") if "for" in m else 0.0,
        )
        if timed and not check.within_s:
            raise self.fail(node, path, "missing field 'within' (how long the condition may take)")
        if check.for_s > check.within_s > 0:
            raise self.fail(node, path, "'for' cannot be longer than 'within'")
        return check

    def step(self, node: yaml.Node, path: str, allowed: tuple[str, ...] = KINDS, watched: bool = False) -> Step:
        """One step; ``watched``: an operator phase's watch, whose expectation has the phase as its time."""
        m = self.mapping(node, path, ("name", "at", "after", "jitter", "args", "expect_failure", *KINDS))
        kinds = [k for k in KINDS if k in m]
        if len(kinds) != 1 or kinds[0] not in allowed:
            raise self.fail(node, path, f"needs exactly one of {', '.join(allowed)}")
        kind = kinds[0]
        name = self.text(m["name"], f"{path}.name") if "name" in m else f"{kind} {path}"
        common: dict[str, Any] = {"name": name, "kind": kind, "line": node.start_mark.line + 1, "path": path}
        if "at" in m and "after" in m:
            raise self.fail(node, path, "give at (from the start) or after (from the step before), not both")
        for key in ("at", "after", "jitter"):
            if key in m:
                common[f"{key}_s"] = self.duration(m[key], f"{path}.{key}")
        args = self.args(m.get("args"), f"{path}.args")
        if kind == "fault":
            fault = self.text(m["fault"], f"{path}.fault")
            if fault not in FAULTS:
                raise self.fail(m["fault"], f"{path}.fault", f"unknown fault {fault!r}{closest(fault, FAULTS)}; known: {', '.join(FAULTS)}")
            if fault not in ("resume-metadata",) and "duration" not in args:
                raise self.fail(node, f"{path}.args", "missing field 'duration': every fault ends by itself")
            return Step(**common, fault=fault, args=args)
        if kind == "action":
            action = self.text(m["action"], f"{path}.action")
            if action not in ACTIONS:
                raise self.fail(
                    m["action"], f"{path}.action", f"unknown action {action!r}{closest(action, ACTIONS)}; known: {', '.join(ACTIONS)}"
                )
            failure = m.get("expect_failure")
            try:
                expect_failure = failure is not None and parse_bool(self.text(failure, f"{path}.expect_failure"))
            except SettingsError as exc:
                raise self.fail(m["expect_failure"], f"{path}.expect_failure", str(exc)) from None
            return Step(**common, action=action, args=args, expect_failure=expect_failure)
        if kind == "wait":
            return Step(**common, wait_s=self.duration(m["wait"], f"{path}.wait"))
        if kind == "expect":
            return Step(**common, check=self.check(m["expect"], f"{path}.expect", timed=not watched))
        op = self.mapping(m["operator"], f"{path}.operator", ("time_limit", "recovered", "autopilot", "rules", "watch"))
        limit = self.duration(self.need(op, m["operator"], f"{path}.operator", "time_limit"), f"{path}.operator.time_limit")
        recovered = self.check(self.need(op, m["operator"], f"{path}.operator", "recovered"), f"{path}.operator.recovered", timed=False)
        auto = (
            tuple(
                self.step(n, f"{path}.operator.autopilot[{i}]", allowed=("action", "wait", "expect", "fault"))
                for i, n in enumerate(self.items(op["autopilot"], f"{path}.operator.autopilot"))
            )
            if "autopilot" in op
            else ()
        )
        rules = self.rules(op["rules"], f"{path}.operator.rules") if "rules" in op else None
        if rules is not None and auto:
            raise self.fail(op["rules"], f"{path}.operator.rules", "an autopilot plays by rules or by steps, not both")
        watch = (
            tuple(
                self.step(n, f"{path}.operator.watch[{i}]", allowed=("expect",), watched=True)
                for i, n in enumerate(self.items(op["watch"], f"{path}.operator.watch"))
            )
            if "watch" in op
            else ()
        )
        return Step(**common, time_limit_s=limit, check=recovered, autopilot=auto, rules=rules, watch=watch)

    def rules(self, node: yaml.Node, path: str) -> dict:
        """The autopilot's rules: thresholds by name, each checked now."""
        m = self.mapping(node, path, tuple(f.name for f in fields(Rules)))
        values = {key: self.text(value, f"{path}.{key}") for key, value in m.items()}
        try:
            Rules.from_args(values)
        except ValueError as exc:
            raise self.fail(node, path, str(exc)) from None
        return values

    def args(self, node: yaml.Node | None, path: str) -> dict:
        if node is None:
            return {}
        m = self.mapping(node, path, ARG_KEYS)
        out = {}
        for key, value in m.items():
            text = self.text(value, f"{path}.{key}")
            if key in catalog.timed_keys():
                self.duration(value, f"{path}.{key}")
            if key in NUMERIC_KEYS:
                number = self.number(value, f"{path}.{key}")
                if number < 0:
                    raise self.fail(value, f"{path}.{key}", "must not be negative")
            out[key] = text
        return out

    def compare(self, node: yaml.Node, path: str, names: list[str]) -> Compare:
        m = self.mapping(node, path, ("what", "in_2015", "in_account", "measure", "span_2015", "span_account"))
        # the account's figure: in_account (any incident's), or in_2015 (the name 2015's scenarios were written with)
        said = [k for k in ("in_account", "in_2015") if k in m]
        spans = [k for k in ("span_account", "span_2015") if k in m]
        if len(said) != 1 or len(spans) > 1:
            raise self.fail(
                node, path, "give the account's figure once: in_account (or in_2015), and at most one span_account (or span_2015)"
            )
        what, in_2015, measure = (self.text(self.need(m, node, path, k), f"{path}.{k}") for k in ("what", said[0], "measure"))
        kind, _, ref = measure.partition(":")
        probe = ""
        if kind == "window":
            ref, _, probe = ref.rpartition(":")
        refs = ref.split("..") if kind in ("elapsed", "window") else [ref]
        two = kind in ("elapsed", "window")
        if kind not in ("mean", "elapsed", "window") or len(refs) != (2 if two else 1) or any(r not in names for r in refs):
            raise self.fail(
                m["measure"],
                f"{path}.measure",
                "must be mean:STEP (an expect step), elapsed:STEP..STEP or window:STEP..STEP:PROBE, naming steps of this scenario",
            )
        if kind == "window" and one_table(probe)[1] is None and (probe not in PROBES or probe in ("promql", "table_error_ratio")):
            raise self.fail(
                m["measure"],
                f"{path}.measure",
                f"window:…:PROBE needs a probe of the lab (table_error_ratio=TABLE for one table's); probes: {', '.join(PROBES)}",
            )
        span = self.duration(m[spans[0]], f"{path}.{spans[0]}") if spans else None
        return Compare(what, in_2015, measure, span)
