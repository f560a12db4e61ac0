r"""The module import graph of the package, read from the source, and the cycles in it (issue 38, point 5).

A cycle between modules makes a module's meaning depend on import order (a name is missing
when its module is half-initialised), hides which module owns a concept, and is what a late
import or an ``# noqa: E402`` papers over. So graphir has none, counting every import:

* every ``import`` and ``from ... import`` statement at any depth: module level, inside a function
  or method, inside ``try``/``if``/``with`` blocks. A function-level import is a dependency like
  any other, only deferred: moving an import into a function hides a cycle, it does not remove it;
* ``importlib.import_module("literal")`` and ``__import__("literal")`` with a literal module name.

The imports of an ``if TYPE_CHECKING:`` block do not count. They never run, and with ``from
__future__ import annotations`` the names they bind can serve only annotations: any use at run
time needs a real import, which counts. What they express is a type that refers to another
module's type, and the IR is such a recursive type (a :class:`~graphir.regions.Region` param
holds a :class:`~graphir.ir.Graph` whose nodes hold params); splitting it by module is what
``TYPE_CHECKING`` is for. ``--type-checking`` lists the cycles they would close, for the record.

An edge goes to the module the statement names, resolved the way Python resolves it:
``import a.b.c`` and ``from a.b import c`` (``c`` a submodule) depend on ``a.b.c``;
``from a.b import name`` (``name`` defined in ``a/b/__init__.py``) depends on ``a.b``. The implicit
import of the parent packages (``a`` and ``a.b`` run first) is not an edge: a package's
``__init__`` imports its members (a registry is filled from above) and the members never import
their package's ``__init__`` back, so those parent runs close no cycle.

The modules are those of the installed package: ``graphir/`` is ``graphir``, ``passes/``
``graphir.passes``, ``backends/`` ``graphir.backends``, ``driver/`` ``graphir.driver``, ``tools/`` ``graphir.tools`` (as
``pyproject.toml``'s package-dir maps them). Imports of anything outside the package are ignored.

Usage: ``python -m devtools.importcycles`` prints each cycle, modules in import order, and exits 1
when there is one (0 otherwise); ``tests/unit/test_import_cycles.py`` runs the same check.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
"""The checkout (``devtools/`` is one level below it)."""

PACKAGE_FOLDERS = {
    "graphir": "graphir",
    "graphir.passes": "passes",
    "graphir.backends": "backends",
    "graphir.driver": "driver",
    "graphir.tools": "tools",
}
"""Package -> source folder, as ``pyproject.toml``'s package-dir maps them."""

MAPPED = ("passes", "backends", "driver", "tools")
"""Folders of ``graphir/`` that would shadow a mapped package (skipped when walking ``graphir/``)."""

_DYNAMIC_IMPORTS = ("import_module", "__import__")
"""Call names whose literal first argument is a module name (``importlib.import_module``, ``__import__``)."""


def package_modules(package: str, folder: Path) -> dict[str, Path]:
    """The modules of ``package`` whose source is ``folder``, by dotted name (a package by its own name).

    The core (``graphir``) skips the folders of the mapped packages above it (:data:`MAPPED`).
    """
    modules: dict[str, Path] = {}
    for path in sorted(folder.rglob("*.py")):
        relative = path.relative_to(folder)
        if "__pycache__" in relative.parts:
            continue
        if package == "graphir" and relative.parts[0] in MAPPED:
            continue
        parts = list(relative.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join([package, *parts])] = path
    return modules


def module_files(repo: Path = REPO) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, file ``__init__.py``)."""
    modules: dict[str, Path] = {}
    for package, folder in PACKAGE_FOLDERS.items():
        modules.update(package_modules(package, repo / folder))
    return modules


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _known(name: str, modules: Mapping[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a module of the package (``None`` outside it)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in modules:
            return prefix
    return None


def _absolute(module: str, path: Path, level: int, target: str | None) -> str:
    """The absolute module name of a relative ``from`` import (``level`` dots) in ``module``."""
    base = module.split(".")
    if not _is_package(path):
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def _is_type_checking(node: ast.AST) -> bool:
    """Whether ``node`` is ``if TYPE_CHECKING:`` (or ``if typing.TYPE_CHECKING:``)."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(tree: ast.AST, type_checking: bool) -> Iterator[ast.AST]:
    """Every node below ``tree``; the bodies of ``if TYPE_CHECKING:`` blocks only when ``type_checking``."""
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        yield node
        if not type_checking and _is_type_checking(node):
            assert isinstance(node, ast.If)
            pending.extend(node.orelse)
            continue
        pending.extend(ast.iter_child_nodes(node))


def imports_of(
    module: str, path: Path, modules: Mapping[str, Path], type_checking: bool = False
) -> Iterator[tuple[str, int]]:
    """``(imported module, line)`` for every import of a package module in ``module``'s source.

    Args:
        module: The dotted name of the module read.
        path: Its source file.
        modules: Every module of the package (:func:`module_files`).
        type_checking: Also the imports inside ``if TYPE_CHECKING:`` blocks (off for the check).
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in _walk(tree, type_checking):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _known(alias.name, modules)
                if target is not None:
                    yield target, node.lineno
        elif isinstance(node, ast.ImportFrom):
            source = node.module if node.level == 0 else _absolute(module, path, node.level, node.module)
            if source is None:
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                target = submodule if submodule in modules else _known(source, modules)
                if target is not None:
                    yield target, node.lineno
        elif isinstance(node, ast.Call) and node.args:
            function = node.func
            name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
            first = node.args[0]
            if name in _DYNAMIC_IMPORTS and isinstance(first, ast.Constant) and isinstance(first.value, str):
                # the named module itself; one without source (a C extension such as
                # graphir._girtext) runs only its parent packages, which are no edge (above)
                if first.value in modules:
                    yield first.value, node.lineno


def import_graph(repo: Path = REPO, type_checking: bool = False) -> dict[str, dict[str, int]]:
    """``{module: {imported module: first line}}`` over the package (self-imports dropped).

    ``type_checking`` also counts the imports of ``if TYPE_CHECKING:`` blocks (see the module docstring).
    """
    modules = module_files(repo)
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges: dict[str, int] = {}
        for target, line in imports_of(module, path, modules, type_checking):
            if target != module:
                edges[target] = min(line, edges.get(target, line))
        graph[module] = edges
    return graph


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted, in sorted order (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in graph:
                    continue
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def shortest_cycle(graph: Mapping[str, Iterable[str]], component: Sequence[str]) -> list[str]:
    """A shortest cycle through the component's first module, modules in import order (first not repeated)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for succ in sorted(graph[node]):
                if succ not in members:
                    continue
                if succ == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return path[::-1]
                if succ not in previous:
                    previous[succ] = node
                    following.append(succ)
        frontier = following
    raise AssertionError(f"no cycle through {start} in its own component")


def cycles(graph: Mapping[str, Mapping[str, int]], ignore: Iterable[tuple[str, str]] = ()) -> list[list[str]]:
    """One shortest cycle per strongly connected component, after dropping the ``ignore`` edges."""
    dropped = set(ignore)
    kept = {module: [t for t in targets if (module, t) not in dropped] for module, targets in graph.items()}
    return [shortest_cycle(kept, component) for component in strongly_connected(kept)]


def describe(graph: Mapping[str, Mapping[str, int]], cycle: Sequence[str], component_size: int | None = None) -> str:
    """``a:12 -> b:40 -> a`` (each module with the line of its import of the next)."""
    steps = [f"{module}:{graph[module][cycle[(at + 1) % len(cycle)]]}" for at, module in enumerate(cycle)]
    size = f" (component of {component_size} modules)" if component_size else ""
    return " -> ".join([*steps, cycle[0]]) + size


def main(argv: Sequence[str] | None = None) -> int:
    """Print the cycles of the package's import graph; exit 1 when there is one."""
    parser = argparse.ArgumentParser(prog="python -m devtools.importcycles", description=__doc__.splitlines()[0])
    parser.add_argument("--components", action="store_true", help="also list every module of each component")
    parser.add_argument(
        "--type-checking", action="store_true", help="count the imports of `if TYPE_CHECKING:` blocks too"
    )
    args = parser.parse_args(argv)
    graph = import_graph(type_checking=args.type_checking)
    components = strongly_connected({module: list(targets) for module, targets in graph.items()})
    for component in components:
        cycle = shortest_cycle({module: list(targets) for module, targets in graph.items()}, component)
        print(describe(graph, cycle, len(component)))
        if args.components:
            print("    " + " ".join(component))
    print(f"{len(components)} cyclic components, {sum(map(len, components))} modules in them")
    return 1 if components else 0


if __name__ == "__main__":
    sys.exit(main())
