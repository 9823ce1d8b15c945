"""The shape of src/rollart, read statically with ast: no import circles, no private reaches across
packages, a docstring in every package, and the library never importing the shipped envs."""
from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "rollart"
DATA_DIRS = {"rollart.sandbox.harness"}
"""Folders of scripts copied into sandboxes and run there, never imported: not packages."""
OUTSIDE = {"envs", "recipes", "tests", "tools"}
"""Top-level packages of the repository the library must not import (users import them, not it)."""



@cache
def modules() -> dict[str, tuple[Path, ast.Module]]:
    """Every module of the library by dotted name (a package by its own name), parsed."""
    found = {}
    for path in sorted((SRC / ROOT).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if ".".join(parts[:-1]) in DATA_DIRS:
            continue
        found[".".join(parts)] = (path, ast.parse(path.read_text(), str(path)))
    return found


def subpackage(module: str) -> str:
    """``rollart.rollout.env_host`` -> ``rollart.rollout``; a top-level module (rollart.config) is its own."""
    return ".".join(module.split(".")[:2])


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _nodes(tree: ast.AST):
    """Every node, function bodies included, except what sits under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imports(module: str) -> list[tuple[str, list[str], int]]:
    """(imported module, names taken from it, line) for every import statement of ``module``; relative
    imports resolved."""
    path, tree = modules()[module]
    found = []
    for node in _nodes(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package_of(module, path).split(".")
                anchor = package[:len(package) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.append((base, [alias.name for alias in node.names], node.lineno))
    return found


@cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the library modules it imports (``from pkg import mod`` counts as importing pkg.mod)."""
    known = modules()
    graph = {}
    for module in known:
        targets = set()
        for base, names, _ in imports(module):
            for target in [f"{base}.{n}" for n in names] or [base]:
                if target in known:
                    targets.add(target)
                elif base in known:
                    targets.add(base)
        graph[module] = targets - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _self_like(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name != "_"


@cache
def private_definitions() -> dict[str, set[str]]:
    """Private name -> the sub-packages defining it: as a def or class, a class attribute, a module-level
    name, or an attribute assigned on self."""
    where: dict[str, set[str]] = {}
    for module, (_, tree) in modules().items():
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            if isinstance(node, (ast.Module, ast.ClassDef)):
                for stmt in node.body:
                    targets = stmt.targets if isinstance(stmt, ast.Assign) else \
                        [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
                    names.update(t.id for t in targets if isinstance(t, ast.Name))
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.attr for t in targets
                             if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self")
        for name in filter(_private, names):
            where.setdefault(name, set()).add(subpackage(module))
    return where


def private_reaches() -> list[str]:
    """``x._name`` where ``_name`` is defined only in other sub-packages, and ``from rollart.other import
    _name``; as "module:line: what"."""
    defined = private_definitions()
    found = []
    for module, (_, tree) in modules().items():
        own = subpackage(module)
        for node in _nodes(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr) and not _self_like(node.value):
                where = defined.get(node.attr, set())
                if where and own not in where:
                    found.append(f"{module}:{node.lineno}: .{node.attr} (defined in {', '.join(sorted(where))})")
        for base, names, line in imports(module):
            if base.startswith(ROOT + ".") and subpackage(base) != own:
                found += [f"{module}:{line}: from {base} import {n}" for n in names if _private(n)]
    return sorted(set(found))


def test_the_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}) == [["a", "b", "c"]]


def test_no_import_cycles_between_modules():
    assert cycles(import_graph()) == []


def test_no_import_cycles_between_subpackages():
    graph: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        graph.setdefault(subpackage(module), set()).update(subpackage(t) for t in targets)
    graph = {p: targets - {p, ROOT} for p, targets in graph.items()}
    assert cycles(graph) == []


def test_no_private_attribute_reached_across_subpackages():
    assert private_reaches() == []


def test_every_package_says_what_it_is_for():
    packages = sorted({".".join(p.relative_to(SRC).parts[:-1]) for p in (SRC / ROOT).rglob("*.py")} - DATA_DIRS)
    missing = [p for p in packages if not (SRC / p.replace(".", "/") / "__init__.py").exists()]
    undocumented = [p for p in packages if p in modules() and not ast.get_docstring(modules()[p][1])]
    assert (missing, undocumented) == ([], [])


def test_the_library_does_not_import_the_shipped_envs_recipes_or_tools():
    found = [f"{module}:{line}: {base}" for module in modules() for base, _, line in imports(module)
             if base.split(".")[0] in OUTSIDE]
    assert found == []
