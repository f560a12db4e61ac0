"""The core names nothing above it: no import of an upper layer, no module name of one held as data.

import-linter (``make lint``) sees ``import`` statements; it cannot see a module named in a string
and imported with ``importlib.import_module`` (how the core used to load the built-in passes,
emitters and the zoo source). This test reads every module of the core (``graphir/``, the folders
of the upper layers excluded) as source, never importing it, and fails on:

* an ``import`` or ``from ... import`` of an upper layer, at any depth (function-level imports
  included; ``if TYPE_CHECKING:`` ones too);
* a string constant that names a module of an upper layer (``"graphir.passes"``,
  ``"graphir.backends.tf"``, ``"devtools.x"``...), wherever it stands: a tuple of plugin names, an
  ``import_module`` argument, an error message.

What does not count, and why:

* docstrings (of modules, classes, functions, and the string under an assignment that documents
  it): prose cross-references such as ``:mod:`graphir.passes.profile.roofline``` tell a reader
  where the other half of a protocol lives; they load nothing. Comments are not read at all.
* the ``group=`` argument of an ``entry_points(...)`` call: ``graphir.passes`` is also the name of
  the entry-point group third-party passes register in, a public name that happens to equal the
  package's; the core names the group, not the module.
* the package facade ``graphir/__init__.py`` naming :data:`FACADE_TARGET`, the Python API
  (issue #40: ``graphir.place(...)``): the facade resolves the API's names from the driver layer on
  first use (a module ``__getattr__``, typed by an ``if TYPE_CHECKING:`` import), so importing
  ``graphir`` or any core module still loads no upper layer (checked below). Any other upper
  module named there, or the API named anywhere else in the core, fails.

A second check runs the core alone in a fresh interpreter: parsing, presets and GPU shorthands
work, no upper layer is imported, and a host cluster without a registered resolver is one line.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "graphir"
UPPER_FOLDERS = ("passes", "backends", "driver", "tools")
"""Folders mapped into the ``graphir`` package above the core; never read as core (they live outside graphir/)."""

FACADE = CORE / "__init__.py"
FACADE_TARGET = "graphir.driver.api"
"""The one upper module the package facade may name: the Python API it re-exports lazily."""

UPWARD = re.compile(r"\b(?:graphir\.(?:passes|backends|driver|tools)|devtools)\b")
"""A module name of an upper layer: the four mapped packages and the developer scripts."""


def _core_files() -> list[Path]:
    return [
        path
        for path in sorted(CORE.rglob("*.py"))
        if "__pycache__" not in path.parts and path.relative_to(CORE).parts[0] not in UPPER_FOLDERS
    ]


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the string constants that are docstrings (definition docstrings and attribute docstrings)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        statements: list[ast.stmt] = [s for s in body if isinstance(s, ast.stmt)]
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and statements:
            first = statements[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
        for before, after in zip(statements, statements[1:], strict=False):
            if (
                isinstance(before, ast.Assign | ast.AnnAssign)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
            ):
                found.add(id(after.value))
    return found


def _entry_point_groups(tree: ast.Module) -> set[int]:
    """ids of the string constants passed as ``group=`` to an ``entry_points(...)`` call."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name != "entry_points":
            continue
        for keyword in node.keywords:
            if keyword.arg == "group" and isinstance(keyword.value, ast.Constant):
                found.add(id(keyword.value))
    return found


def upward_references(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: what`` for every import of, or string naming, a module above the core in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    exempt = _docstrings(tree) | _entry_point_groups(tree)
    where = path.relative_to(root).as_posix()
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{where}:{node.lineno}: import {a.name}" for a in node.names if UPWARD.match(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if UPWARD.match(node.module):
                found.append(f"{where}:{node.lineno}: from {node.module} import ...")
            elif node.module == "graphir":  # from graphir import passes
                found += [
                    f"{where}:{node.lineno}: from graphir import {a.name}"
                    for a in node.names
                    if a.name in UPPER_FOLDERS
                ]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in exempt:
            found += [f"{where}:{node.lineno}: string names {m.group(0)}" for m in UPWARD.finditer(node.value)]
    return found


def _allowed(path: Path, line: str) -> bool:
    """The facade's references to the Python API (module docstring)."""
    api_import = line.endswith(f"from {FACADE_TARGET} import ...")
    return path == FACADE and (api_import or line.endswith("names graphir.driver"))


def test_the_core_names_no_module_above_it():
    files = _core_files()
    assert len(files) > 50, "the core's modules were not found"
    found = [line for path in files for line in upward_references(path) if not _allowed(path, line)]
    assert not found, "the core points up (register from above instead; see graphir.driver):\n" + "\n".join(found)
    facade = ast.parse(FACADE.read_text())
    named = {
        node.value
        for node in ast.walk(facade)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and UPWARD.match(node.value)
    }
    imported = {node.module for node in ast.walk(facade) if isinstance(node, ast.ImportFrom) and node.module}
    assert named == {FACADE_TARGET}, named  # the facade's strings name the API module and nothing else above
    assert {m for m in imported if UPWARD.match(m)} == {FACADE_TARGET}


def test_the_check_sees_what_it_forbids(tmp_path):
    """A plugin tuple, a late import and an error message are caught; prose and the entry-point group are not."""
    path = tmp_path / "sample.py"
    path.write_text(
        '''"""Cross-reference in prose: :mod:`graphir.passes.place` (allowed)."""
import importlib.metadata

PLUGINS = ("graphir.backends.tf",)
"""Attribute docstring naming graphir.tools.zoo (allowed)."""


def load():
    from graphir.passes import place

    importlib.metadata.entry_points(group="graphir.passes")
    raise ValueError("import devtools.regress first")
'''
    )
    found = sorted(line.split(": ", 1)[1] for line in upward_references(path, tmp_path))
    assert found == ["from graphir.passes import ...", "string names devtools", "string names graphir.backends"]


def test_the_core_runs_alone():
    """Only the core imported: presets and shorthands resolve, a host cluster asks for a resolver in one line."""
    code = """
import sys
from graphir.cluster import ClusterError
from graphir.parser import parse_module
from graphir.pipeline import parse_pipeline
from graphir.errors import PassOptionError

text = 'module @m {cluster = "%s"} {\\n  graph @main(%%x : f32[4]) {\\n    return %%x\\n  }\\n}\\n'
assert parse_module(text % "pesto").cluster.spec == "pesto"
assert len(parse_module(text % "4xV100").cluster.devices) == 4
for spec in ("2xcpu", "2xcpu-workers", "cluster.toml"):
    try:
        parse_module(text % spec).cluster
    except ClusterError as exc:
        message = str(exc)
        assert "no cluster resolver is registered" in message and "\\n" not in message, message
    else:
        raise AssertionError(spec + " resolved without a resolver")
try:
    parse_pipeline("place")
except PassOptionError as exc:
    assert "known passes: none" in str(exc), str(exc)
upper = sorted(m for m in sys.modules if m.split(".")[:2] in (["graphir", "passes"], ["graphir", "backends"],
               ["graphir", "driver"], ["graphir", "tools"]) or m.split(".")[0] == "devtools")
assert not upper, upper
print("ok")
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120, cwd=ROOT
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
