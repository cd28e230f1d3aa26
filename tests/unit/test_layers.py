"""The house: imports point down only, and nothing hides an import inside a function.

  stormlab/                  the operator's side: CLI root, launcher, demo, game days, the model
  chaos/                     the fault tool: catalog, leases, backends, the chaos commands
  metadata_service/, storage_node/, services/   the emulated world
  stormcore/                    the ground floor every process imports, importing none of them

Read from the source (ast), so a new module is checked the day it is written.
"""

import ast
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
