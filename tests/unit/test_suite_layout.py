"""The test suite's own layout: test modules share code through helpers.py and conftest.py only.

A test module that imports another couples the two (pytest collects the imported module's tests
under its own name too, and a rename breaks the importer): every shared graph, cluster, check or
fixture lives in tests/unit/helpers.py or tests/unit/conftest.py. The check reads every import,
at module level or inside a function, and the code passed to fresh interpreters as text
(``python -c "...; from helpers import ..."``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace

from helpers import HEAVY_MODULES, heavy_first

HERE = Path(__file__).resolve().parent
TEST_MODULES = {path.stem for path in HERE.glob("test_*.py")}
SHARED = {"helpers", "conftest"}
IMPORT_IN_TEXT = re.compile(r"(?:^|[\s;])(?:from\s+([A-Za-z_][\w.]*)\s+import|import\s+([A-Za-z_][\w.]*))")


def _imported(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``, and of every import in a string constant of it."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, "." * node.level + (node.module or "")))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for match in IMPORT_IN_TEXT.finditer(node.value):
                found.append((node.lineno, match.group(1) or match.group(2)))
    return found


def _test_module_imports(path: Path) -> list[str]:
    return [
        f"{path.name}:{line}: imports {module}"
        for line, module in _imported(path)
        if module.split(".")[0] in TEST_MODULES or module.startswith(("tests", "."))
    ]


def test_no_test_module_imports_another() -> None:
    offenders = [hit for path in sorted(HERE.glob("*.py")) for hit in _test_module_imports(path)]
    assert offenders == [], "share it through tests/unit/helpers.py or conftest.py:\n" + "\n".join(offenders)


def test_the_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Not vacuous: a module-level, a function-level, a relative and a quoted import are all found."""
    probe = tmp_path / "test_probe.py"
    # Spelt through a placeholder so that this file's own text names no test module.
    probe.write_text(
        "import {t}_ir\n"
        "from {t}_place_heft import check_placer\n"
        "def f():\n"
        "    from {t}_rig import x\n"
        "    from . import {t}_ops\n"
        "CODE = 'import sys; from {t}_place_ilp import run_ilp'\n"
        "from helpers import f32\n".format(t="test")
    )
    assert [hit.split(": ", 1)[1] for hit in _test_module_imports(probe)] == [
        "imports test_ir",
        "imports test_place_heft",
        "imports test_rig",
        "imports .",
        "imports test_place_ilp",
    ]


def _body(function: ast.FunctionDef) -> str:
    """The function's signature and body without its name and docstring (a copy under another name matches)."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return ast.dump(function.args) + "".join(ast.dump(statement) for statement in body)


def test_shared_helpers_are_defined_once() -> None:
    """``f32`` is defined in helpers.py only, and no test module holds a copy of a helpers.py function."""
    helpers = [node for node in ast.parse((HERE / "helpers.py").read_text()).body if isinstance(node, ast.FunctionDef)]
    assert {"f32", "random_module", "check_placer", "mesh_cluster", "mlp_training_step"} <= {f.name for f in helpers}
    copies = {_body(function): function.name for function in helpers}
    again = [
        f"{path.name}:{node.lineno}: def {node.name} (helpers.{copies.get(_body(node), node.name)})"
        for path in sorted(HERE.glob("*.py"))
        if path.name != "helpers.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and (node.name == "f32" or _body(node) in copies)
    ]
    assert again == [], "\n".join(again)


def test_heavy_modules_name_test_modules_once() -> None:
    """The schedule's list (helpers.HEAVY_MODULES, run first by conftest's hook) names real modules."""
    assert len(set(HEAVY_MODULES)) == len(HEAVY_MODULES)
    assert [name for name in HEAVY_MODULES if name.removesuffix(".py") not in TEST_MODULES] == []


def test_heavy_first_puts_the_heavy_modules_first_and_keeps_each_module_together() -> None:
    """conftest's hook: heavy modules first in HEAVY_MODULES' order; the others, and each module's tests, in order."""
    first, second = HEAVY_MODULES[0], HEAVY_MODULES[1]
    collected = ["test_a.py::x", f"{second}::s1", "test_b.py::y", f"{first}::f1", f"{second}::s2", f"{first}::f2"]
    items = [SimpleNamespace(path=Path("tests/unit") / nodeid.split("::")[0], nodeid=nodeid) for nodeid in collected]
    heavy_first(items)
    assert [item.nodeid for item in items] == [
        f"{first}::f1",
        f"{first}::f2",
        f"{second}::s1",
        f"{second}::s2",
        "test_a.py::x",
        "test_b.py::y",
    ]
