"""No import cycle between graphir's modules, function-level imports included, and no E402 to hide one (issue 38.5).

The graph is read from the source (:mod:`devtools.importcycles`: every import at any depth, the
literal ``importlib.import_module`` calls too; ``if TYPE_CHECKING:`` blocks aside, see its
docstring for why).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from devtools.importcycles import (
    PACKAGE_FOLDERS,
    REPO,
    cycles,
    describe,
    import_graph,
    imports_of,
    module_files,
    strongly_connected,
)


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, int]]:
    return import_graph()


def _report(graph: dict[str, dict[str, int]], found: list[list[str]]) -> str:
    return "\n".join(describe(graph, cycle) for cycle in found)


def test_no_import_cycle_between_modules(graph):
    found = cycles(graph)
    assert not found, "import cycles (module:line of the import of the next, in order):\n" + _report(graph, found)


def test_the_graph_sees_every_package_folder_and_resolves_submodules(graph):
    assert set(graph) == set(module_files())
    for package in PACKAGE_FOLDERS:
        assert package in graph
    # `from graphir.passes.place import problem` names the submodule, not the package.
    assert "graphir.passes.place.problem" in graph["graphir.passes.place.refine"]
    assert "graphir.passes.place" not in graph["graphir.passes.place.refine"]


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_function_level_import_closes_a_cycle_and_a_type_checking_one_does_not(tmp_path):
    repo = _write(
        tmp_path,
        {
            "graphir/__init__.py": "",
            "graphir/a.py": "from graphir.b import f\n",
            "graphir/b.py": "def f():\n    from graphir import a\n    return a\n",
            "graphir/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from graphir.d import D\n",
            "graphir/d.py": "import graphir.c\n",
            "graphir/e.py": "import importlib\ndef load():\n    importlib.import_module('graphir.f')\n",
            "graphir/f.py": "from graphir.e import load\n",
            "passes/__init__.py": "",
            "passes/p.py": "from graphir.passes import q\n",
            "passes/q.py": "import graphir.passes.p as p\n",
            "backends/__init__.py": "",
            "tools/__init__.py": "",
        },
    )
    graph = import_graph(repo)
    found = cycles(graph)
    assert found == [["graphir.a", "graphir.b"], ["graphir.e", "graphir.f"], ["graphir.passes.p", "graphir.passes.q"]]
    assert describe(graph, found[0]) == "graphir.a:1 -> graphir.b:2 -> graphir.a"
    assert cycles(graph, ignore={("graphir.e", "graphir.f")}) == [found[0], found[2]]
    typed = import_graph(repo, type_checking=True)
    assert ["graphir.c", "graphir.d"] in cycles(typed)
    assert strongly_connected({"x": ["y"], "y": ["z"], "z": ["x", "w"], "w": []}) == [["x", "y", "z"]]


def test_a_from_import_of_a_name_depends_on_the_package_of_a_submodule_on_the_submodule(tmp_path):
    repo = _write(
        tmp_path,
        {
            "graphir/__init__.py": "",
            "graphir/pkg/__init__.py": "NAME = 1\n",
            "graphir/pkg/sub.py": "",
            "graphir/user.py": "from graphir.pkg import NAME, sub\nfrom .pkg.sub import x\nimport numpy\n",
            "passes/__init__.py": "",
            "backends/__init__.py": "",
            "tools/__init__.py": "",
        },
    )
    modules = module_files(repo)
    found = sorted(imports_of("graphir.user", modules["graphir.user"], modules))
    assert found == [("graphir.pkg", 1), ("graphir.pkg.sub", 1), ("graphir.pkg.sub", 2)]


_E402 = re.compile(r"noqa:[^#\n]*\bE402\b")


def test_no_late_import_is_excused():
    excused = [
        f"{path.relative_to(REPO)}:{number}"
        for path in module_files().values()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _E402.search(line)
    ]
    assert not excused, f"`# noqa: E402` hides a late import (move the import up, or break the cycle): {excused}"


def test_ruff_checks_e402_on_the_package():
    ruff = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["ruff"]
    lint = ruff.get("lint", {})
    selected = lint.get("select", []) + lint.get("extend-select", [])
    assert any("E402".startswith(code) for code in selected), selected
    for key in ("ignore", "extend-ignore"):
        assert not any("E402".startswith(code) for code in lint.get(key, [])), (key, lint[key])
    folders = tuple(PACKAGE_FOLDERS.values())
    for pattern, codes in lint.get("per-file-ignores", {}).items():
        if pattern.split("/")[0].strip("*") in folders or pattern.startswith("*"):
            assert not any("E402".startswith(code) for code in codes), (pattern, codes)
