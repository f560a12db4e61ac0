r"""``make lint``'s layering check: import-linter over the tree as it installs, and graphir's own contract type.

graphir's source folders map onto one package (``graphir/`` is ``graphir``, ``passes/`` is
``graphir.passes``, ``backends/`` is ``graphir.backends``, ``driver/`` is ``graphir.driver``,
``tools/`` is ``graphir.tools``; see
``pyproject.toml``). import-linter (through grimp) finds a package's modules by walking its
folder, so it would never see ``passes/`` from ``graphir/``. :func:`stage` therefore copies the
Python files into ``build/importlint/graphir/`` in the installed shape, and :func:`main` runs
``lint-imports`` with that copy first on ``PYTHONPATH``. The contracts themselves live in
``pyproject.toml`` (``[tool.importlinter]``):

* a ``layers`` contract: ``graphir.tools`` above ``graphir.driver`` above ``graphir.passes`` above
  ``graphir.backends`` above the IR core (every other module of ``graphir``, listed by name; ``exhaustive`` makes a new
  core module fail the check until it is listed, so nothing lands in the core by accident);
* a ``module-level-forbidden`` contract (:class:`ModuleLevelForbiddenContract`, below): the core
  imports no TensorFlow, onnxruntime, ortools, scipy, pymetis or matplotlib *at module level*.
  An import inside a function (the TensorFlow importer's ``import tensorflow``) is allowed: it
  runs only when that input kind is read.

Usage: ``python -m devtools.importlint`` (what ``make lint`` runs); exit status 0 when every
contract is kept.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from importlinter import Contract, ContractCheck, fields, output

from devtools.importcycles import MAPPED, PACKAGE_FOLDERS

REPO = Path(__file__).resolve().parents[1]
"""The checkout (``devtools/`` is one level below it)."""

FOLDERS = {package.replace(".", "/"): folder for package, folder in PACKAGE_FOLDERS.items()}
"""Staged folder -> source folder, as ``pyproject.toml``'s package-dir maps them."""


def stage(destination: Path, repo: Path = REPO) -> Path:
    """Copy every ``.py`` file of the package into ``destination/graphir`` in its installed shape.

    Returns:
        ``destination`` (put it first on ``PYTHONPATH`` to import the staged copy).
    """
    root = destination / "graphir"
    if root.exists():
        shutil.rmtree(root)
    for staged, source in FOLDERS.items():
        for path in sorted((repo / source).rglob("*.py")):
            relative = path.relative_to(repo / source)
            if source == "graphir" and relative.parts[0] in MAPPED:
                continue  # never shadows a mapped package
            if "__pycache__" in relative.parts:
                continue
            target = destination / staged / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    return destination


def run_lint_imports(staged: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """Run ``lint-imports`` on the staged copy with ``config``; returns the finished process."""
    # The staged package first; the checkout after it for this module (the contract type of pyproject.toml).
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(staged), str(REPO))))
    command = [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"]
    return subprocess.run(
        [*command, "--config", str(config), "--no-cache"],
        cwd=staged,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


class ModuleLevelForbiddenContract(Contract):
    """The modules of ``container`` outside ``exclude`` import none of ``forbidden`` at module level.

    A module-level import is one whose statement starts in column 0 of its file; an import inside a
    function, method or ``if TYPE_CHECKING:`` block is indented and allowed.

    Configuration options:
        - container: the package whose modules are checked (``graphir``).
        - exclude: subpackages of ``container`` that are not checked (``graphir.passes``...).
        - forbidden: top-level external packages the checked modules must not import at module level.
    """

    type_name = "module-level-forbidden"

    container = fields.StringField()
    exclude = fields.ListField(subfield=fields.StringField(), required=False)
    forbidden = fields.ListField(subfield=fields.StringField())

    def check(self, graph, verbose: bool) -> ContractCheck:  # noqa: ANN001 - grimp's ImportGraph
        """Find every module-level import of a forbidden package by a checked module."""
        container = str(self.container)
        excluded = [str(name) for name in (self.exclude or [])]

        def checked(module: str) -> bool:
            inside = module == container or module.startswith(container + ".")
            return inside and not any(module == e or module.startswith(e + ".") for e in excluded)

        violations: list[dict[str, object]] = []
        for package in sorted(str(name) for name in self.forbidden):
            if package not in graph.modules:
                continue  # nobody imports it at all
            for importer in sorted(graph.find_modules_that_directly_import(package)):
                if not checked(importer):
                    continue
                for detail in graph.get_import_details(importer=importer, imported=package):
                    if _at_module_level(importer, int(detail["line_number"])):
                        violations.append({"importer": importer, "imported": package, "line": detail["line_number"]})
        return ContractCheck(kept=not violations, metadata={"violations": violations})

    def render_broken_contract(self, check: ContractCheck) -> None:
        """One line per module-level import of a forbidden package."""
        for item in check.metadata["violations"]:
            output.print_error(
                f"{item['importer']} imports {item['imported']} at module level (line {item['line']}): "
                "import it inside the function that needs it",
                bold=False,
            )
            output.new_line()


def _at_module_level(module: str, line_number: int) -> bool:
    """Whether line ``line_number`` of ``module``'s file starts in column 0."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return True  # cannot tell: count it
    lines = Path(spec.origin).read_text().splitlines()
    if not 0 < line_number <= len(lines):
        return True
    line = lines[line_number - 1]
    return not line[:1].isspace()


def main() -> int:
    """Stage the tree and run the contracts of ``pyproject.toml``; print import-linter's report."""
    staged = stage(REPO / "build" / "importlint")
    result = run_lint_imports(staged, REPO / "pyproject.toml")
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
