"""What people and programs hand the lab, read under one set of rules: numbers that are numbers,
JSON without NaN or infinities, YAML of bounded size, nesting and alias expansion.

Every reader of outside input asks here: the fault catalog, the settings and the web apps' number
fields (``is_number``, ``finite``), JSON bodies (``loads``), the scenario reader (``compose_yaml``)
and policy files (``load_yaml``, which refuses NaN and infinities in the data). NaN passes every
range check (``lo <= nan <= hi`` and ``nan < lo`` are both false), and once inside it comes back
out as JSON no client can read; so it is refused at the door, once, here.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import yaml

from stormcore.errors import UsageError

MAX_YAML_NODES = 20_000  # YAML nodes read, aliases counted each time they are used (a billion laughs stops here)
MAX_YAML_DEPTH = 32  # nesting: a scenario or a policy file is a few levels deep


class DocumentError(UsageError):
    """A document that cannot be read as what it says it is (exit code 2; a 400 on the wire)."""


def is_number(value: Any, integer: bool = False) -> bool:
    """A JSON number the lab can compute with: an int or a float, never a boolean, never NaN or
    an infinity; with ``integer``, one with no fraction (``8`` or ``8.0``, as JSON Schema's
    ``integer`` takes it: read it with :func:`whole`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int):
        return True
    return math.isfinite(value) and (not integer or value.is_integer())


def whole(value: Any) -> int | None:
    """An integer as JSON Schema has it (``8`` and ``8.0`` alike) as an int; None for anything else."""
    return int(value) if is_number(value, integer=True) else None


def is_decimal(text: str, most_digits: int = 18) -> bool:
    """``text`` is a whole number in ASCII digits (1 to ``most_digits`` of them): what an id, a
    port or a count in a request, a header or a file may be. ``str.isdigit`` also takes
    superscripts and other scripts' digits, which ``int`` then refuses (a 500) or reads."""
    return 0 < len(text) <= most_digits and text.isascii() and text.isdecimal()


def finite(text: str) -> float:
    """A number as a person types it (``"2.5"``, ``"1e3"``); ValueError for anything else, and for
    ``nan``, ``inf`` and what overflows to it (``1e999``)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {text!r}")
    return value


def dumps(value: Any) -> str:
    """A JSON value as the lab stores it (an item's value, a queue message's body): compact, UTF-8."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def encoded_bytes(value: Any) -> int:
    """The bytes a value takes once stored: what a size limit measures (not its ``repr``, which an
    emoji's four bytes, or its twelve as a JSON escape, pass as one character)."""
    return len(dumps(value).encode())


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number the lab takes")


SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # a \uD800-\uDFFF escape: half of a pair, or a lone half


def loads(raw: bytes | str) -> Any:
    """JSON as the standard reader reads it, but NaN, Infinity and numbers that overflow to an
    infinity are refused (ValueError): Python's reader takes them, and JSON has no such numbers.
    So is a string holding half a surrogate pair (``"\\ud800"``): Python's reader takes it, and no
    UTF-8 can hold it, so every size, store and page after the reader would fail on it (a 500)."""
    doc = json.loads(raw, parse_constant=_no_constant, parse_float=finite)
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    if SURROGATE_ESCAPE.search(text) and not _encodable(doc):
        raise ValueError("a string holds half of a surrogate pair (\\ud800 to \\udfff alone): not text")
    return doc


def _encodable(doc: Any) -> bool:
    stack = [doc]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            try:
                value.encode()
            except UnicodeEncodeError:
                return False
        elif isinstance(value, dict):
            stack.extend(value)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return True


def compose_yaml(
    text: str, source: str, max_bytes: int, error: type[UsageError] = DocumentError, what: str = "a document"
) -> yaml.Node | None:
    """A YAML document's tree (None when it is empty), checked before anything reads it: at most
    ``max_bytes``, MAX_YAML_NODES nodes once its aliases are expanded, MAX_YAML_DEPTH levels deep.
    ``error`` (a UsageError) says what is wrong, with the line."""
    if len(text) > max_bytes:
        raise error(f"{source}: {len(text):,} bytes; {what} may have at most {max_bytes:,}")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "somewhere"
        raise error(f"{source}: not YAML ({where}): {getattr(exc, 'problem', exc)}") from None
    except RecursionError:
        raise error(f"{source}: nested too deep (at most {MAX_YAML_DEPTH} levels)") from None
    if root is not None:
        _check_shape(root, source, error)
    return root


def _check_shape(root: yaml.Node, source: str, error: type[UsageError]) -> None:
    seen, stack = 0, [(root, 1)]
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > MAX_YAML_NODES:
            raise error(f"{source}: more than {MAX_YAML_NODES:,} YAML nodes once its aliases are expanded")
        if depth > MAX_YAML_DEPTH:
            raise error(f"{source}:{node.start_mark.line + 1}: nested deeper than {MAX_YAML_DEPTH} levels")
        if isinstance(node, yaml.SequenceNode):
            stack.extend((child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend((part, depth + 1) for pair in node.value for part in pair)


def load_yaml(text: str, source: str, max_bytes: int, error: type[UsageError] = DocumentError, what: str = "a document") -> Any:
    """A YAML (or JSON) document's data, checked as ``compose_yaml`` checks it."""
    root = compose_yaml(text, source, max_bytes, error, what)
    if root is None:
        return None
    loader = yaml.SafeLoader("")
    try:
        doc = loader.construct_document(root)
    except yaml.YAMLError as exc:
        raise error(f"{source}: not YAML: {getattr(exc, 'problem', exc)}") from None
    finally:
        loader.dispose()
    where = nonfinite(doc)
    if where is not None:
        raise error(f"{source}: {where} is not a number the lab takes (NaN or an infinity)")
    return doc


def nonfinite(doc: Any, path: str = "") -> str | None:
    """Where in a document (``backoff.base``) a float is NaN or an infinity, or None."""
    stack = [(doc, path)]
    while stack:
        value, at = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return at or "the document"
        if isinstance(value, dict):
            stack.extend((v, f"{at}.{k}" if at else str(k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(value))
    return None
