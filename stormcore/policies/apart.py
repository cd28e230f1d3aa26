"""``python -m stormcore.policies.apart SPEC``: a user's policy loaded and probed in this process,
apart from the command that asked (stormcore/policies/limits.py), under the limits.

Prints ``call: WHERE`` before each call into the policy's code (so a process killed in one is
named), then one line of JSON: ``{"ok": true, "kind": ..., "label": ..., "attempt_timeout_s": ...,
"maps": [...]}`` or ``{"ok": false, "error": ...}`` (exit code 2).
"""

from __future__ import annotations

import json
import sys

from stormcore import policies
from stormcore.policies import limits
from stormcore.policies.errors import PolicyError


def say(where: str) -> None:
    print(limits.CALL_LINE + where, flush=True)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m stormcore.policies.apart SPEC", file=sys.stderr)
        return 2
    spec = argv[0]
    limits.impose()
    try:
        where = f"{policies.short_name(spec)}: loading it"
        say(where)
        loaded = limits.call(lambda: where, policies.load, spec, limit_s=limits.LOAD_LIMIT_S)
        policies.probe(loaded, note=say)
    except PolicyError as exc:
        print(json.dumps({"ok": False, "error": str(exc)}), flush=True)
        return 2
    answer = {"kind": loaded.kind, "label": loaded.label, "attempt_timeout_s": loaded.attempt_timeout_s, "maps": list(loaded.maps)}
    print(json.dumps({"ok": True, **answer}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
