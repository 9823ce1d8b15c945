"""The shape of src/rollart, read statically with ast: no import circles, no private reaches across
packages, a docstring in every package, the library never importing the shipped envs, no module over 350 lines,
the run composed (no mixins in rollart.pipeline), no actor called by a method-name string, no handle or engine
probed with getattr (and a crippled source fails each of the last checks)."""
from __future__ import annotations

import ast
import re
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


MAX_LINES = 350
"""A module longer than this holds more than one concept: split it by concept."""


def test_no_module_is_longer_than_the_limit():
    long = {m: n for m, (path, _) in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_run_is_composed_not_mixed_in():
    """Every class of rollart.pipeline has at most one base, and none is another pipeline class: the run is a few
    explicit objects, not one object spread over mixins."""
    own = {node.name for m, (_, tree) in modules().items() if m.startswith("rollart.pipeline")
           for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    found = []
    for module, (_, tree) in modules().items():
        if not module.startswith("rollart.pipeline"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                names = [ast.unparse(b) for b in node.bases]
                if len(names) > 1 or own & set(names):
                    found.append(f"{module}:{node.lineno}: class {node.name}({', '.join(names)})")
    assert found == []


def _calls(tree: ast.AST):
    for node in _nodes(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            yield node


def test_no_actor_is_called_by_a_method_name_string():
    """Outside the actor runtime itself, actors are sent typed messages (rollart.messages): no
    ``handle.call("method", ...)``, no ``call_with`` (a reward endpoint's ``client.call(function, ...)`` names a
    user's reward function, not an actor method: it is not an actor call)."""
    found = []
    for module, (_, tree) in modules().items():
        if module.startswith("rollart.actors"):
            continue
        for node in _calls(tree):
            literal = node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
            if (node.func.attr == "call" and literal) or node.func.attr in ("call_with", "execute_rank"):
                found.append(f"{module}:{node.lineno}: {ast.unparse(node)[:80]}")
    assert found == []


def test_no_handle_or_engine_is_probed_with_getattr():
    """What an actor handle or an engine offers is declared (``rollart.actors.ActorRef``,
    ``rollart.engine.protocol.Engine``), never probed."""
    found = []
    for module, (_, tree) in modules().items():
        for node in _nodes(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                    and node.args and re.search(r"handle|engine", ast.unparse(node.args[0]), re.I)):
                found.append(f"{module}:{node.lineno}: {ast.unparse(node)[:80]}")
    assert found == []


def test_the_architecture_checks_can_fail():
    """Each check above on a crippled source: a mixin, a string call, a probe of a handle."""
    bad = ast.parse("class Run(Evaluations, Checkpointing): pass\n"
                    "async def f(h): await h.call('train_step', 1)\n"
                    "def g(handle): return getattr(handle, 'restarts', 0)\n")
    assert [len(n.bases) for n in ast.walk(bad) if isinstance(n, ast.ClassDef)] == [2]
    assert [n.func.attr for n in _calls(bad) if isinstance(n.args[0], ast.Constant)] == ["call"]
    assert [ast.unparse(n.args[0]) for n in ast.walk(bad)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr"] == ["handle"]
