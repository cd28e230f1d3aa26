"""The house: imports point down only, and nothing hides an import inside a function.

  stormlab/                  the operator's side, in rooms (below, top first):
    cli.py                     the `stormlab` command
    rooms/                     training rooms: many teams' game days, the facilitator's console
    scenarios/                 game days: the scenario language, its runner, scoring, reports, replay
    incidents/                 each incident's own code (its story, model, certificate, guard) and the registry of units
    runs/, responder/          what starts and measures labs (demo, bench, soak, sweep, ...);
                               the responder's side (the runbook, moves, alerts, the desk, roles)
    artefacts/                 what is drawn and generated (charts, the map, API and k8s docs)
    model/                     the reference model and the sweep's grid, in virtual time
    engine/                    what runs a lab: launcher, supervisor, observation, speed, compose
  chaos/                     the fault tool: catalog, leases, backends, the chaos commands
  metadata_service/, storage_node/, services/   the emulated world
  stormcore/                 the ground floor every process imports, importing none of them

A module that calls itself pure does no I/O. Read from the source (ast), so a new module is
checked the day it is written.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("stormcore", "metadata_service", "storage_node", "services", "chaos", "stormlab")
WORLD = ("metadata_service", "storage_node", "services")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = modules()


def _resolve(name: str) -> str | None:
    """The project module an import names (a submodule if there is one), or None."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports(path: Path, root: Path = ROOT) -> tuple[set[str], list[str]]:
    """(project modules imported, imports found inside a function or method)."""
    tree = ast.parse(path.read_text())
    inside: list[str] = []
    found: set[str] = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                names = (
                    [a.name for a in child.names]
                    if isinstance(child, ast.Import)
                    else [f"{child.module}.{a.name}" for a in child.names]
                    if child.module
                    else []
                )
                if in_function:
                    inside.append(f"{path.relative_to(root)}:{child.lineno}")
                found.update(m for m in map(_resolve, names) if m)
            visit(child, nested)

    visit(tree, False)
    return found, inside


GRAPH = {name: imports(path)[0] - {name} for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            strong(v)
    return found


def top(module: str) -> str:
    return module.split(".")[0]


def arrows(source: tuple[str, ...], target: tuple[str, ...]) -> list[str]:
    return sorted(f"{m} -> {d}" for m, deps in GRAPH.items() if top(m) in source for d in deps if top(d) in target and top(d) != top(m))


def test_the_project_has_modules_to_check():
    assert len(MODULES) > 40 and all(p in {top(m) for m in MODULES} for p in PACKAGES)


def test_no_import_circles_between_modules():
    assert _cycles(GRAPH) == []


def test_no_import_circles_between_packages():
    packages: dict[str, set[str]] = {}
    for m, deps in GRAPH.items():
        packages.setdefault(top(m), set()).update(top(d) for d in deps if top(d) != top(m))
    assert _cycles(packages) == []


def test_no_import_inside_a_function():
    inside = [where for path in MODULES.values() for where in imports(path)[1]]
    assert inside == []


def test_the_ground_floor_imports_nothing_above_it():
    assert arrows(("stormcore",), PACKAGES[1:]) == []


def test_the_emulated_world_never_imports_the_operators_tools():
    assert arrows(WORLD + ("chaos",), ("stormlab",)) == []


# The operator's rooms, each above the ones it may import; rooms on one floor never meet.
ROOMS = {
    "stormlab.cli": 8,
    "stormlab.rooms": 7,
    "stormlab.scenarios": 6,
    "stormlab.incidents": 5,
    "stormlab.runs": 4,
    "stormlab.responder": 4,
    "stormlab.artefacts": 3,
    "stormlab.model": 2,
    "stormlab.engine": 1,
}


def room(module: str) -> str | None:
    return next((r for r in ROOMS if module == r or module.startswith(r + ".")), None)


def test_every_module_of_the_operators_side_is_in_a_room():
    corridor = [m for m in MODULES if top(m) == "stormlab" and m != "stormlab" and room(m) is None]
    assert corridor == []


def test_a_room_imports_only_rooms_below_it():
    upward = sorted(
        f"{m} -> {d}"
        for m, deps in GRAPH.items()
        if room(m)
        for d in deps
        if room(d) and room(d) != room(m) and ROOMS[room(d)] >= ROOMS[room(m)]  # type: ignore[index]
    )
    assert upward == []


def test_no_room_holds_more_than_30_percent_of_the_operators_side():
    """A room that grows past 30% of stormlab/'s lines is several rooms under one name (the game-day
    wing was 48% before it became responder/, scenarios/ and rooms/)."""
    lines: dict[str, int] = {}
    for m, path in MODULES.items():
        if room(m):
            lines[room(m)] = lines.get(room(m), 0) + len(path.read_text().splitlines())  # type: ignore[index]
    total = sum(lines.values())
    assert {r: round(n / total, 2) for r, n in lines.items() if n > 0.30 * total} == {}


def test_the_rooms_are_found_by_their_folder_names():
    for what in ("stormlab.runs.soak", "stormlab.runs.sweep", "stormlab.engine.launcher", "stormlab.scenarios.runner"):
        assert what in MODULES


PURE_CLAIM = re.compile(r"\(pure\b|\bpure\)|\bpure[:,]|^Pure\b|(?<=\. )Pure\b|Pure data", re.M)
IO_MODULES = {"aiohttp", "asyncio", "socket", "subprocess", "urllib", "csv", "sqlite3", "shutil", "tempfile", "docker", "kubernetes",
              "http", "requests", "os", "time", "threading", "signal"}  # fmt: skip
IO_CALLS = {"open", "print", "input"}
IO_METHODS = {"read_text", "write_text", "read_bytes", "write_bytes", "mkdir", "unlink", "iterdir", "glob", "monotonic", "sleep", "urlopen",
              "getenv"}  # fmt: skip


def io_used(tree: ast.Module) -> set[str]:
    """The I/O a module's code does: modules for it imported, files, the clock, printing (its
    ``__main__`` block aside: that is the module's command, not its logic)."""
    found: set[str] = set()
    body = [n for n in tree.body if not (isinstance(n, ast.If) and "__main__" in ast.unparse(n.test))]
    for node in (n for top_node in body for n in ast.walk(top_node)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names} & IO_MODULES
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level and node.module.split(".")[0] in IO_MODULES:
            found.add(node.module)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in IO_CALLS:
            found.add(f"{node.func.id}()")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in IO_METHODS:
            found.add(f".{node.func.attr}()")
    return found


def test_a_module_that_says_it_is_pure_does_no_io():
    claims = {name: ast.parse(path.read_text()) for name, path in MODULES.items()}
    claims = {name: tree for name, tree in claims.items() if PURE_CLAIM.search(ast.get_docstring(tree) or "")}
    assert len(claims) > 15  # the cores, the wire types, the catalog, the model's grid, the scoring ...
    assert {name: sorted(used) for name, tree in claims.items() if (used := io_used(tree))} == {}


def test_the_io_finder_finds_io():
    tree = ast.parse(
        "import os\nfrom pathlib import Path\n\ndef f(p):\n    print(p.read_text())\n\nif __name__ == '__main__':\n    open('x')\n"
    )
    assert io_used(tree) == {"os", "print()", ".read_text()"}


def test_metadata_service_and_storage_node_meet_only_through_the_wire_types():
    assert arrows(("metadata_service",), ("storage_node",)) == []
    assert arrows(("storage_node",), ("metadata_service",)) == []


@pytest.mark.parametrize(
    "graph, circle",
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c"]),
        ({"a": {"b"}, "b": set()}, None),
    ],
)
def test_the_circle_finder_finds_circles(graph, circle):
    assert _cycles(graph) == ([circle] if circle else [])


def test_an_import_inside_a_function_is_found(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("import os\n\ndef f():\n    from chaos import catalog\n    return catalog\n")
    found, inside = imports(source, tmp_path)
    assert found == {"chaos.catalog"} and inside == ["mod.py:4"]
