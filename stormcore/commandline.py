"""What every stormlab command shares on its command line: one JSON document for scripts
(``--json`` on every command), errors said once with their exit codes, "did you mean", and old
flag names read with a deprecation message.

Under ``--json`` a command's answer is one document on stdout, its shape in docs/api.md:

- a command with a document of its own (``status``, ``chaos list``, ``bench`` …) prints it as
  before; on an error, the error document below is printed instead;
- every other command prints ``{"command", "exit_code", "ok", …what it did…, "said"}``: what it
  did is what the command told (:func:`tell`: a fault's lease, a move's answer, a room's links),
  ``said`` the lines it would have printed for a person (they go to stderr as they come);
- an error, from any command or from the command line itself: ``{"command", "exit_code", "ok":
  false, "error"}`` and whatever the command had told before it failed.

``scenario run --json`` is a stream (one document a line); its last line is its result or the error.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import json
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn, TextIO

from stormcore.errors import LabError, UsageError

EXIT_CODES = """exit codes (docs/cli.md):
  0    done
  1    no lab (or room) is up; the lab refused or did not answer
  2    bad input: nothing was changed
  130  interrupted"""
JSON_HELP = "one JSON document on stdout: what was done, or the error and its exit code (the lines for a person go to stderr)"
_told: list[dict[str, Any]] = []  # the answers being gathered, innermost last (a command runs one at a time)


def tell(**fields: Any) -> None:
    """What the running command did, for a script reading its ``--json`` document (nothing when
    no document is being gathered)."""
    if _told:
        _told[-1].update(fields)


class Parser(argparse.ArgumentParser):
    """The command line's parser: an error says what is wrong, suggests the closest name, and
    under ``--json`` is also one JSON document on stdout (exit 2)."""

    json_wanted = False  # set from the whole command line before parsing (a subcommand's parser cannot see it)

    def error(self, message: str) -> NoReturn:
        message = message + suggestion(self, message)
        if Parser.json_wanted:
            print(json.dumps({"command": self.prog, "exit_code": 2, "ok": False, "error": message}))
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    """``; did you mean status?`` for an unknown command or option close to a known one."""
    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if choice:
        word, known = choice.group(1), re.findall(r"'([^']*)'", choice.group(2))
    else:
        unknown = re.search(r"unrecognized arguments: (\S+)", message)
        if not unknown or not unknown.group(1).startswith("--"):
            return ""
        word, known = unknown.group(1).split("=")[0], sorted(options(parser))
        if word in known:
            return f"; {word} belongs to a command that does not take it here (see `{parser.prog} COMMAND --help`)"
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def options(parser: argparse.ArgumentParser) -> set[str]:
    """Every long option of ``parser`` and its subcommands."""
    found = {o for a in parser._actions if a.help != argparse.SUPPRESS for o in a.option_strings if o.startswith("--")}
    for child in subparsers(parser):
        found |= options(child)
    return found


def _inner(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers under ``parser`` that have subcommands of their own."""
    found = []
    for child in subparsers(parser):
        if subparsers(child):
            found += [child, *_inner(child)]
    return found


def subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    return [c for a in parser._actions if isinstance(a, argparse._SubParsersAction) for c in a.choices.values()]


def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command that runs (a parser with no subcommands), by its words after the program's."""
    chosen = [(name, c) for a in parser._actions if isinstance(a, argparse._SubParsersAction) for name, c in a.choices.items()]
    if not chosen:
        yield path, parser
    for name, child in chosen:
        yield from leaves(child, (*path, name))


def every_command_answers_json(parser: argparse.ArgumentParser) -> None:
    """``--json`` on every command: one with a document of its own keeps it (``answered``: its
    own, or ``stream`` set by the command); the others gain the flag and answer with the envelope."""
    for inner in [parser, *_inner(parser)]:  # `stormlab --json status` as `stormlab status --json`
        inner.add_argument("--json", dest="json_early", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    for path, leaf in leaves(parser):
        own = any("--json" in a.option_strings for a in leaf._actions)
        if not own:
            leaf.add_argument("--json", action="store_true", help=JSON_HELP)
        leaf.set_defaults(command_words=" ".join(path), answered=leaf.get_default("answered") or ("own" if own else "envelope"))
        leaf.epilog = (leaf.epilog + "\n\n" if leaf.epilog else "") + EXIT_CODES


def anywhere(parser: argparse.ArgumentParser, *flags: str) -> None:
    """``parser``'s ``flags`` (options that take one value, e.g. ``--backend``) accepted after
    its subcommand too: ``chaos blip … --backend docker`` as ``chaos --backend docker blip …``.
    The copies default to nothing, so one given before the subcommand is kept."""
    for action in [a for a in parser._actions if set(a.option_strings) & set(flags)]:
        typed: dict[str, Any] = {"type": action.type} if action.type is not None else {}
        for _, leaf in leaves(parser):
            leaf.add_argument(
                *action.option_strings,
                dest=action.dest,
                choices=action.choices,
                metavar=action.metavar,
                default=argparse.SUPPRESS,
                help=action.help,
                **typed,
            )


def explain(parser: argparse.ArgumentParser, *examples: str, description: str | None = None) -> None:
    """A command's help page: its description (if it had none) and its examples, written as a
    person types them (a test parses every one)."""
    if description and not parser.description:
        parser.description = description
    shown = "\n".join(f"  {line}" for line in examples)
    parser.epilog = (parser.epilog + "\n\n" if parser.epilog else "") + f"example{'s' if len(examples) > 1 else ''}:\n{shown}"


def deprecated(parser: argparse.ArgumentParser, old: str, new: str, dest: str, **kwargs: Any) -> None:
    """``old`` still read, into ``new``'s place, with a message on stderr saying the new name."""

    class Deprecated(argparse.Action):
        said = new  # read by the table of old names (docs/cli.md)

        def __call__(self, p: argparse.ArgumentParser, ns: argparse.Namespace, values: Any, option: str | None = None) -> None:
            print(f"{p.prog}: {option} is now {new} ({option} still works, and will go in a later version)", file=sys.stderr)
            setattr(ns, self.dest, True if self.nargs == 0 else values)

    parser.add_argument(old, dest=dest, action=Deprecated, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)


def page_and_json(parser: argparse.ArgumentParser, block: str, made_by: str, what: str) -> None:
    """--page (``what`` into a Markdown page's ``<!-- BLOCK -->`` block as well) and --json (``what``
    as one JSON document on stdout instead of the table), as the measuring commands take them."""
    parser.add_argument(
        "--page", type=Path, help=f"also put {what} into this Markdown page's <!-- {block} --> block ({made_by}; default: none)"
    )
    parser.add_argument("--json", action="store_true", help=f"{what} as one JSON document on stdout instead of the table")


def bash_completion(parser: argparse.ArgumentParser, prog: str) -> str:
    """A bash (and zsh, through bashcompinit) completion script for ``parser``'s whole tree, written
    from the parser: commands, their flags, and the choices of a flag that has them."""
    words: dict[str, list[str]] = {}
    choices: dict[str, list[str]] = {}

    def walk(p: argparse.ArgumentParser, path: str) -> None:
        subs = [(name, child) for a in p._actions if isinstance(a, argparse._SubParsersAction) for name, child in a.choices.items()]
        flags = sorted({o for a in p._actions if a.help != argparse.SUPPRESS for o in a.option_strings if o.startswith("--")})
        words[path] = [name for name, _ in subs] + flags
        for a in p._actions:
            if a.choices and a.option_strings and a.help != argparse.SUPPRESS:
                for flag in a.option_strings:
                    choices[f"{path} {flag}"] = [str(c) for c in a.choices]
        for name, child in subs:
            walk(child, f"{path}/{name}")

    walk(parser, "")
    fn = "_" + re.sub(r"\W", "_", prog)
    known = " ".join(sorted(p for p in words if p))
    lines = [
        f"# {prog}'s completion (bash; zsh: autoload -U bashcompinit && bashcompinit first). Load it with",
        f'#   eval "$({prog} completion bash)"',
        f"{fn}() {{",
        '  local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" path="" i',
        "  for ((i = 1; i < COMP_CWORD; i++)); do",
        f'    case " {known} " in *" $path/${{COMP_WORDS[i]}} "*) path="$path/${{COMP_WORDS[i]}}" ;; esac',
        "  done",
        '  case "$path $prev" in',
        *(f'    "{key}") COMPREPLY=($(compgen -W "{" ".join(values)}" -- "$cur")); return ;;' for key, values in sorted(choices.items())),
        "  esac",
        '  case "$path" in',
        *(f'    "{path}") COMPREPLY=($(compgen -W "{" ".join(values)}" -- "$cur")) ;;' for path, values in sorted(words.items())),
        "  esac",
        "}",
        f"complete -F {fn} {prog}",
    ]
    return "\n".join(lines) + "\n"


class _Tee(io.TextIOBase):
    """Lines for a person: to stderr as they come, and kept for the document's ``said``."""

    def __init__(self, echo: TextIO) -> None:
        self.echo, self.kept = echo, io.StringIO()

    def write(self, text: str) -> int:
        self.echo.write(text)
        return self.kept.write(text)

    def flush(self) -> None:
        self.echo.flush()


def run(prog: str, args: argparse.Namespace, func: Callable[[argparse.Namespace], int]) -> int:
    """Run a parsed command: its errors on stderr with their exit codes (and, under ``--json``,
    as a document), Ctrl-C as 130."""
    if getattr(args, "json_early", False):
        args.json = True
    as_json = bool(getattr(args, "json", False))
    answered = getattr(args, "answered", "own")
    command = f"{prog} {getattr(args, 'command_words', '')}".strip()
    if not as_json:
        return _plain(prog, args, func)
    told: dict[str, Any] = {}
    _told.append(told)
    real = sys.stdout
    own = io.StringIO()
    tee = _Tee(sys.stderr)
    stream = answered == "stream"
    try:
        with contextlib.redirect_stdout(real if stream else tee if answered == "envelope" else own):
            code = _plain(prog, args, func, raise_errors=True)
    except (UsageError, LabError) as exc:
        print(
            json.dumps(
                {"command": command, "exit_code": exc.exit_code, "ok": False, "error": str(exc), **_result(own), **told}, default=str
            ),
            file=real,
        )
        return exc.exit_code
    except KeyboardInterrupt:
        print(json.dumps({"command": command, "exit_code": 130, "ok": False, "error": "interrupted", **told}, default=str), file=real)
        return 130
    except Exception as exc:  # a bug of ours: its traceback on stderr, and still one document for the script reading stdout
        traceback.print_exc()
        bug = f"unexpected {type(exc).__name__}: {exc} (a bug in stormlab: the traceback is on stderr)"
        print(json.dumps({"command": command, "exit_code": 1, "ok": False, "error": bug, **_result(own), **told}, default=str), file=real)
        return 1
    finally:
        _told.pop()
    if answered == "envelope":
        said = tee.kept.getvalue().splitlines()
        print(json.dumps({"command": command, "exit_code": code, "ok": code == 0, **told, "said": said}, default=str), file=real)
    elif not stream:
        real.write(own.getvalue())
    return code


def _result(own: io.StringIO) -> dict[str, Any]:
    """The command's own document, if it printed one before it failed (``chaos list`` when a holder
    did not answer lists the others), as the error document's ``result``."""
    text = own.getvalue().strip()
    if not text:
        return {}
    try:
        return {"result": json.loads(text)}
    except ValueError:
        return {"said": text.splitlines()}


def _plain(prog: str, args: argparse.Namespace, func: Callable[[argparse.Namespace], int], raise_errors: bool = False) -> int:
    try:
        return int(func(args))
    except (UsageError, LabError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        if raise_errors:
            raise
        return exc.exit_code
    except KeyboardInterrupt:
        if raise_errors:
            raise
        return 130
