"""No import cycles among namesrv's modules, type-checking imports included.

A cycle makes the import order matter and the layers impossible to read off the code; the
graph is read from the sources (ast), so an import hidden under `if TYPE_CHECKING:` counts.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "namesrv"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, known: set[str]) -> set[str]:
    """The namesrv modules `path` imports (a package import counts as its __init__)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module in known and node.level == 0:
            # `from package import submodule` imports the submodule; any other name is the module's own
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in known else node.module)
    return found


def graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    known = set(paths)
    edges = {name: imports(path, known) - {name} for name, path in paths.items()}
    # Importing a.b.c runs a/__init__ and a/b/__init__ first, but those do not import a.b.c back
    # unless they say so: only written imports are edges.
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_checker_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_namesrv_has_no_import_cycles() -> None:
    edges = graph()
    assert len(edges) > 40
    assert cycles(edges) == []


def package_of(module: str) -> str:
    """The node of `module` in the package graph: namesrv.a.b and namesrv.a are namesrv.a."""
    return ".".join(module.split(".")[:2])


def package_graph(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """`edges` collapsed to packages (a top-level module such as namesrv.cli is its own node)."""
    packages: dict[str, set[str]] = {package_of(name): set() for name in edges}
    for name, targets in edges.items():
        packages[package_of(name)].update(package_of(target) for target in targets)
    for name, targets in packages.items():
        targets.discard(name)
    return packages


def test_the_package_graph_collapses_modules() -> None:
    edges = {"namesrv.a.x": {"namesrv.b.y", "namesrv.a"}, "namesrv.a": set(), "namesrv.b.y": {"namesrv.c"},
             "namesrv.c": {"namesrv.a.x"}, "namesrv": {"namesrv.c"}}
    assert package_graph(edges) == {"namesrv.a": {"namesrv.b"}, "namesrv.b": {"namesrv.c"},
                                    "namesrv.c": {"namesrv.a"}, "namesrv": {"namesrv.c"}}


def test_namesrv_packages_have_no_import_cycles() -> None:
    """Layers read off the packages: no package imports, however indirectly, one that imports it."""
    edges = graph()
    packages = package_graph(edges)
    assert len(packages) > 10
    found = cycles(packages)
    # Within a strongly connected component every edge between two of its packages lies on a cycle.
    offending = sorted(f"{source} -> {target}" for component in found for source, targets in edges.items()
                       for target in targets if package_of(source) in component
                       and package_of(target) in component and package_of(source) != package_of(target))
    assert found == [], f"package import cycles {found}, through these imports:\n" + "\n".join(offending)
