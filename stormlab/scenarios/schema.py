"""The JSON Schema of scenario files, for editors (scenarios/scenario.schema.json), written from
what the reader knows: the same keys, probes, faults, actions, arguments and settings (pure).

`python -m stormlab.scenarios.schema > scenarios/scenario.schema.json` writes it; a test keeps
the file the same and checks every scenario in scenarios/ against it. The reader stays the
judge of a file (it names the line and field and checks what a schema cannot: step names that
exist, a fault's arguments against its limits); the schema is its shape, for an editor's
completion and squiggles.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from stormcore.settings import DEFAULT_PROFILE, POLICY_TIMEOUTS, PROFILES, RETRY_POLICIES, RETRY_WRAPPERS, LabSettings, profile
from stormlab.engine.reading import PROBES
from stormlab.responder.desk import ANSWERS, TEAM
from stormlab.responder.monitoring import MONITORING
from stormlab.responder.moves import ROLES
from stormlab.scenarios.autopilot import Rules
from stormlab.scenarios.reader import ARG_KEYS, TOP_KEYS
from stormlab.scenarios.scenario import ACTIONS, FAULTS, KINDS

DURATION = {
    "description": "a duration: 5s, 500ms, 2m, 1h, or a number of seconds",
    "anyOf": [
        {"type": "string", "pattern": r"^\s*[0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?\s*([mM][sS]|[sSmMhH])?\s*$"},
        {"type": "number", "minimum": 0},
    ],
}
NUMBER = {"anyOf": [{"type": "number"}, {"type": "string", "pattern": r"^\s*-?[0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?\s*$"}]}
SWITCH = {"anyOf": [{"type": "boolean"}, {"enum": ["on", "off", "true", "false", "yes", "no", "1", "0", 1, 0]}]}
TEXT = {"type": "string", "minLength": 1}


def check(timed: bool, held: bool) -> dict[str, Any]:
    """A condition on a probe: ``timed`` needs ``within``, ``held`` may say ``for``."""
    props: dict[str, Any] = {
        "probe": {"enum": list(PROBES), "description": "what is measured (a field of the lab's sample)"},
        "above": NUMBER,
        "below": NUMBER,
        "table": {**TEXT, "description": "the table, with probe table_error_ratio"},
        "expr": {**TEXT, "description": "the PromQL expression, with probe promql (compose runs)"},
    }
    if timed:
        props["within"] = {**DURATION, "description": "how long the condition may take to hold"}
    if held:
        props["for"] = {**DURATION, "description": "how long it must hold in a row"}
    return {
        "type": "object",
        "required": ["probe", *(["within"] if timed else [])],
        "properties": props,
        "additionalProperties": False,
        "anyOf": [{"required": ["above"]}, {"required": ["below"]}],
        "allOf": [
            {
                "if": {"properties": {"probe": {"const": "table_error_ratio"}}},
                "then": {"required": ["table"]},
                "else": {"not": {"required": ["table"]}},
            },
            {"if": {"properties": {"probe": {"const": "promql"}}}, "then": {"required": ["expr"]}, "else": {"not": {"required": ["expr"]}}},
        ],
    }


def step(kinds: tuple[str, ...], path: str) -> dict[str, Any]:
    """A step that does exactly one of ``kinds``."""
    what: dict[str, Any] = {
        "fault": {"enum": list(FAULTS), "description": "a fault of the catalog (docs/chaos.md)"},
        "action": {"enum": list(ACTIONS), "description": "an operator's move (`stormlab ops`)"},
        "wait": DURATION,
        "expect": {"$ref": "#/$defs/expect"},
        "operator": {"$ref": "#/$defs/operator"},
    }
    props: dict[str, Any] = {
        "name": {**TEXT, "description": "unique in the file; scoring and compare name steps"},
        "at": {**DURATION, "description": "when, from the start of the run"},
        "after": {**DURATION, "description": "when, after the step before"},
        "jitter": {**DURATION, "description": "+/- this much on `at`, fixed by the seed"},
        "args": {"$ref": "#/$defs/args"},
        "expect_failure": SWITCH,
        **{k: what[k] for k in kinds},
    }
    return {
        "type": "object",
        "description": path,
        "properties": props,
        "additionalProperties": False,
        "oneOf": [{"required": [k]} for k in kinds],
        "not": {"required": ["at", "after"]},
    }


def settings() -> dict[str, Any]:
    base = profile(DEFAULT_PROFILE)
    props = {}
    for f in fields(LabSettings):
        kind = SWITCH if f.type in ("bool", bool) else DURATION if f.name.endswith("_s") else NUMBER if f.type != "str" else TEXT
        default = getattr(base, f.name)
        props[f.name] = {**kind, "description": f"{f.metadata['doc']} (2015 profile: {default if default != '' else 'empty'})"}
        if "choices" in f.metadata:
            props[f.name] = {"enum": list(f.metadata["choices"]), "description": f.metadata["doc"]}
        elif f.name in POLICY_TIMEOUTS:  # the lab's own policies only: a scenario hands no code to a lab (the reader's OWN_POLICIES_ONLY)
            pattern = f"^({'|'.join(RETRY_POLICIES)})(\\+({'|'.join(RETRY_WRAPPERS)}))?${'|^$' if default == '' else ''}"
            own = "the lab's own retry policies only (a policy of your own runs from your own command line)"
            props[f.name] = {"type": "string", "pattern": pattern, "description": f"{f.metadata['doc']}; in a scenario, {own}"}
        elif "min" in f.metadata and kind is NUMBER:  # a plain number's range (a duration's is the reader's)
            bounded = {
                "type": "integer" if f.type in ("int", int) else "number",
                "minimum": f.metadata["min"],
                "maximum": f.metadata["max"],
            }
            props[f.name] = {"anyOf": [bounded, NUMBER["anyOf"][1]], "description": props[f.name]["description"]}
    return {"type": "object", "properties": props, "additionalProperties": False}


def schema() -> dict[str, Any]:
    top: dict[str, Any] = {
        "title": TEXT,
        "description": {"type": "string"},
        "profile": {"enum": list(PROFILES)},
        "settings": settings(),
        "steady_state": {"type": "array", "items": check(timed=False, held=False), "description": "checked before and after"},
        "steady_state_within": {**DURATION, "description": "after the run, how long the steady state may take to return"},
        "steps": {"type": "array", "minItems": 1, "items": step(KINDS, "a step")},
        "rollback": {"type": "array", "items": step(("fault", "action"), "a rollback: always runs")},
        "stop_when": {"type": "array", "items": check(timed=False, held=True), "description": "abort and roll back when one holds"},
        "scoring": {"type": "object", "required": ["onset"], "properties": {"onset": TEXT}, "additionalProperties": False},
        "compare": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["what", "measure"],
                "oneOf": [{"required": ["in_account"]}, {"required": ["in_2015"]}],
                "properties": {
                    "what": TEXT,
                    "in_account": {**TEXT, "description": "the account's figure (the incident's own words)"},
                    "in_2015": {**TEXT, "description": "the account's figure (2015's scenarios: in_account's older name)"},
                    "measure": {"type": "string", "pattern": r"^(mean:.+|elapsed:.+\.\..+|window:.+\.\..+:[a-z0-9_]+(=[a-z0-9-]+)?)$"},
                    "span_account": {**DURATION, "description": "how long it took in the account, when it was a span of time"},
                    "span_2015": DURATION,
                },
                "additionalProperties": False,
            },
        },
        "injects": {
            "type": "array",
            "description": "messages to a role or the team, at a time or on a condition, with what each expects back",
            "items": {
                "type": "object",
                "required": ["name", "to", "message"],
                "oneOf": [{"required": ["at"]}, {"required": ["when"]}],
                "properties": {
                    "name": {**TEXT, "description": "unique: the ack names it"},
                    "to": {"enum": [*ROLES, TEAM]},
                    "message": TEXT,
                    "at": {**DURATION, "description": "a time of the run"},
                    "when": check(timed=False, held=True),
                    "expect": {"enum": list(ANSWERS), "description": "what is expected back (default ack)"},
                    "within": {**DURATION, "description": "how long the answer may take (default 5m)"},
                    "names_tables": {**SWITCH, "description": "with expect: post, the post names a table whose customers failed"},
                },
                "additionalProperties": False,
            },
        },
        "monitoring": {
            "enum": list(MONITORING),
            "description": "direct (default): the players' console shows the lab's readings; shared-fate: what the lab's own "
            "metrics service gives back, gaps and all (2015: CloudWatch was a consumer of the failing database)",
        },
    }
    assert set(top) == set(TOP_KEYS), "the schema and the reader know the same top-level keys"
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://stormlab.invalid/scenario.schema.json",
        "title": "stormlab scenario",
        "description": "A game day against the lab (docs/gameday.md). Written by `python -m stormlab.scenarios.schema`.",
        "type": "object",
        "required": ["title", "steps"],
        "properties": top,
        "additionalProperties": False,
        "$defs": {
            "expect": check(timed=True, held=True),
            "operator": {
                "type": "object",
                "required": ["time_limit", "recovered"],
                "properties": {
                    "time_limit": DURATION,
                    "recovered": check(timed=False, held=True),
                    "autopilot": {"type": "array", "items": step(("action", "wait", "expect", "fault"), "an autopilot move")},
                    "rules": {
                        "type": "object",
                        "description": "the autopilot plays by these rules instead of steps: thresholds on what a responder sees",
                        "properties": {f.name: {"type": ["string", "number"], "description": f.metadata["help"]} for f in fields(Rules)},
                        "additionalProperties": False,
                    },
                    "watch": {
                        "type": "array",
                        "description": "expectations met at any time while the phase lasts (judged under the autopilot)",
                        "items": {
                            "type": "object",
                            "required": ["expect"],
                            "properties": {"name": {"type": "string"}, "expect": check(timed=False, held=True)},
                            "additionalProperties": False,
                        },
                    },
                },
                "additionalProperties": False,
                "not": {"required": ["autopilot", "rules"]},
            },
            "args": {
                "type": "object",
                "properties": {k: {"type": ["string", "number", "boolean"]} for k in ARG_KEYS},
                "additionalProperties": False,
            },
        },
    }


def text() -> str:
    return json.dumps(schema(), indent=1) + "\n"


if __name__ == "__main__":
    print(text(), end="")
