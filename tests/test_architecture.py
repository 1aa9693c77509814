"""The package layout holds: each package imports only from those below it, no module import
circle (imports for typing and inside functions included), and an import inside a function says
why it is there (docs/architecture.md)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sgdeploy"
# Bottom to top: a package may import from itself and from those before it.
LAYERS = ("core", "logs", "sglang", "host", "profile", "deploy", "review", "cli")
# Modules at the package's root that any layer may use.
ROOT_MODULES = {"sgdeploy", "sgdeploy.__main__"}


@dataclass(frozen=True)
class ImportEdge:
    source: str  # the importing module
    target: str  # the imported module (a module, not a name inside it)
    line: int
    in_function: bool
    commented: bool


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts).removesuffix(".__init__")


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _targets(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.startswith("sgdeploy")]
    if node.level or not node.module or not node.module.startswith("sgdeploy"):
        return []
    return [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
            for a in node.names]


def _imports(module: str) -> Iterator[ImportEdge]:
    lines = MODULES[module].read_text(encoding="utf-8").splitlines()
    tree = ast.parse("\n".join(lines))
    in_function = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                   for n in ast.walk(f) if isinstance(n, ast.Import | ast.ImportFrom)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
        commented = "#" in lines[node.lineno - 1] or above.startswith("#") or _follows_commented(lines, node)
        for target in _targets(node) or ([""] if id(node) in in_function else []):
            yield ImportEdge(module, target, node.lineno, id(node) in in_function, commented)


def _follows_commented(lines: list[str], node: ast.stmt) -> bool:
    """An import in a group of imports whose first line carries the comment."""
    index = node.lineno - 2
    while index >= 0 and lines[index].strip().startswith(("from ", "import ", ")")):
        index -= 1
    return index >= 0 and lines[index].strip().startswith("#")


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


EDGES = [edge for module in MODULES for edge in _imports(module)]


def test_every_module_belongs_to_a_layer() -> None:
    stray = sorted(m for m in MODULES if m not in ROOT_MODULES and _layer(m) is None)
    assert not stray, f"modules outside the packages of docs/architecture.md: {stray}"


def test_each_package_imports_only_from_those_below_it() -> None:
    upward = [f"{e.source}:{e.line} imports {e.target}" for e in EDGES
              if e.target and (low := _layer(e.source)) and (high := _layer(e.target))
              and LAYERS.index(high) > LAYERS.index(low)]
    assert not upward, "\n".join(upward)


def test_no_import_circle() -> None:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for e in EDGES:
        if e.target in MODULES and e.target != e.source and not e.source.startswith(e.target + "."):
            graph[e.source].add(e.target)
    circle = _find_circle(graph)
    assert circle is None, " -> ".join(circle or [])


def _find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    return next((found for node in sorted(graph) if node not in state and (found := visit(node))), None)


def test_an_import_inside_a_function_says_why() -> None:
    silent = sorted({f"{e.source}:{e.line}" for e in EDGES if e.in_function and not e.commented})
    assert not silent, "an import inside a function needs a comment saying why it is not at the top:\n" + \
        "\n".join(silent)


@pytest.mark.parametrize("layer", LAYERS)
def test_the_guard_sees_each_package(layer: str) -> None:
    assert any(_layer(m) == layer for m in MODULES)
