"""Optional extras: graphir/extras.py, pyproject's extras, and the one-line error of a missing one."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
import types
from pathlib import Path

import pytest

from graphir.errors import GraphIRError
from graphir.extras import EXTRAS, MissingExtraError, install_command, require

ROOT = Path(__file__).resolve().parents[2]
REPORT_GIR = ROOT / "tests" / "filecheck" / "emit" / "report.gir"
OPTIONAL = sorted({package for packages in EXTRAS.values() for package in packages})

# Run in a fresh interpreter: `BLOCKED` (a JSON list of top-level packages) cannot be imported, as
# if they were not installed; then `CODE` runs.
BLOCKER = textwrap.dedent(
    """
    import json, sys

    BLOCKED = set(json.loads(sys.argv[1]))

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    """
)


def run_blocked(blocked: list[str], code: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = BLOCKER + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script, json.dumps(blocked), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=300,
    )


def run_driver_blocked(blocked: list[str], *argv: str) -> subprocess.CompletedProcess[str]:
    return run_blocked(blocked, "from graphir.driver import run\nsys.exit(run(sys.argv[2:]))\n", *argv)


# ------------------------------------------------------------------------------------ require


def test_require_returns_the_module() -> None:
    cp_model = require("ortools.sat.python.cp_model", "solvers", "place{algo=ilp}")
    assert cp_model.__name__ == "ortools.sat.python.cp_model"
    assert hasattr(cp_model, "CpModel")


def test_missing_package_is_one_line_naming_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ortools", None)  # `import ortools` raises ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "ortools.sat.python.cp_model", raising=False)
    with pytest.raises(MissingExtraError) as caught:
        require("ortools.sat.python.cp_model", "solvers", "place{algo=ilp}")
    error = caught.value
    assert isinstance(error, GraphIRError)
    assert error.render() == "error: place{algo=ilp} needs ortools: pip install 'graphir[solvers]'"
    assert (error.package, error.extra, error.what) == ("ortools", "solvers", "place{algo=ilp}")
    assert error.__cause__ is None and error.__suppress_context__


def test_broken_package_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    # pymetis is installed but one of its own imports fails: not "missing", a broken install.
    def exec_module(module: types.ModuleType) -> None:
        import graphir_no_such_dependency  # noqa: F401

    class BrokenFinder:
        def find_spec(self, name: str, path: object = None, target: object = None) -> object:
            if name != "pymetis":
                return None
            from importlib.machinery import ModuleSpec

            loader = types.SimpleNamespace(create_module=lambda spec: None, exec_module=exec_module)
            return ModuleSpec(name, loader)

    monkeypatch.delitem(sys.modules, "pymetis", raising=False)
    monkeypatch.setattr(sys, "meta_path", [BrokenFinder(), *sys.meta_path])
    with pytest.raises(MissingExtraError) as caught:
        require("pymetis", "solvers", "place{algo=metis}")
    line = caught.value.one_line()
    assert line.startswith("error: place{algo=metis} needs pymetis, which fails to import (ModuleNotFoundError: ")
    assert "graphir_no_such_dependency" in line
    assert line.endswith(": pip install 'graphir[solvers]'")
    assert "\n" not in caught.value.render()


def test_install_command() -> None:
    assert install_command("tf") == "pip install 'graphir[tf]'"


# --------------------------------------------------------------------------- pyproject's extras


def _requirement_name(requirement: str) -> str:
    name = requirement
    for stop in "<>=!~[; ":
        name = name.split(stop, 1)[0]
    return name.lower()


def test_pyproject_extras_match_the_table() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_requirement_name(r) for r in project["dependencies"]}
    assert core == {"numpy", "attrs", "networkx", "onnx"}
    extras = project["optional-dependencies"]
    for extra, packages in EXTRAS.items():
        assert {_requirement_name(r) for r in extras[extra]} == set(packages), extra
    # `all` is every extra of the table (through the self-reference graphir[...]).
    (everything,) = extras["all"]
    assert everything.startswith("graphir[")
    assert set(everything[len("graphir[") : everything.index("]")].split(",")) == set(EXTRAS)


def test_make_installs_every_extra() -> None:
    makefile = (ROOT / "Makefile").read_text()
    install_lines = [line for line in makefile.splitlines() if "pip install" in line and not line.startswith("#")]
    assert install_lines, "no pip install line in the Makefile"
    # `make mutation` adds the `mutation` extra (cosmic-ray) on top of the venv that $(STAMP) built
    # with '.[dev,all]'; every other install line installs every extra.
    mutation = [line for line in install_lines if "'.[mutation]'" in line]
    assert len(mutation) == 1, mutation
    # The venv's install brings uv first (one line installing uv alone), whose pip interface installs graphir.
    uv = [line for line in install_lines if "pip install -q 'uv==$(UV_VERSION)'" in line]
    assert len(uv) == 1, uv
    graphir = [line for line in install_lines if line not in mutation + uv]
    assert any("uv pip install" in line for line in graphir)
    assert any("python -m pip install" in line for line in graphir)  # when uv cannot be installed
    for line in graphir:
        assert "'.[dev,all]'" in line, line


# -------------------------------------------------------------------------- without the extras


def test_core_imports_without_any_extra() -> None:
    done = run_blocked(
        OPTIONAL,
        """
        import graphir, graphir.passes, graphir.importers, graphir.backends, graphir.driver
        import graphir.importers.tf, graphir.passes.place.ilp, graphir.passes.place.metis
        import graphir.passes.place.baechi, graphir.backends.report, graphir.backends.report.timeline
        loaded = sorted(name for name in sys.modules if name.partition(".")[0] in BLOCKED)
        print(json.dumps(loaded))
        """,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_place_ilp_without_ortools_is_a_one_line_error() -> None:
    done = run_driver_blocked(["ortools"], str(REPORT_GIR), "--passes=place{algo=ilp}")
    assert done.returncode == 1
    assert done.stderr == "error: place{algo=ilp} needs ortools: pip install 'graphir[solvers]'\n"
    assert done.stdout == ""


def test_place_m_sct_without_scipy_is_a_one_line_error() -> None:
    done = run_driver_blocked(["scipy"], str(REPORT_GIR), "--passes=place{algo=m-sct}")
    assert done.returncode == 1
    assert done.stderr == "error: place{algo=m-sct} needs scipy: pip install 'graphir[solvers]'\n"


def test_report_without_matplotlib(tmp_path: Path) -> None:
    # The table alone needs no matplotlib ...
    done = run_driver_blocked(["matplotlib"], str(REPORT_GIR), "--emit=report")
    assert done.returncode == 0, done.stderr
    assert "makespan" in done.stdout
    # ... the pictures do, and nothing is written when they cannot be drawn.
    done = run_driver_blocked(["matplotlib"], str(REPORT_GIR), "--emit=report", "-o", str(tmp_path / "r.txt"))
    assert done.returncode == 1
    assert done.stderr == "error: --emit=report -o needs matplotlib: pip install 'graphir[report]'\n"
    assert list(tmp_path.iterdir()) == []


def test_tensorflow_import_without_tensorflow(tmp_path: Path) -> None:
    graph = tmp_path / "g.pbtxt"
    graph.write_text('node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }\n')
    done = run_driver_blocked(["tensorflow"], str(graph))
    assert done.returncode == 1
    assert done.stderr == "error: importing a TensorFlow graph needs tensorflow: pip install 'graphir[tf]'\n"
