"""The layering contracts (`make lint`, python -m devtools.importlint) hold, and catch what they forbid."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.importlint import REPO, run_lint_imports, stage


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stage(tmp_path_factory.mktemp("importlint"))


def _check(staged: Path) -> tuple[int, str]:
    result = run_lint_imports(staged, REPO / "pyproject.toml")
    return result.returncode, result.stdout + result.stderr


def _append(path: Path, text: str) -> str:
    before = path.read_text()
    path.write_text(before + text)
    return before


def test_the_tree_keeps_every_contract(staged):
    status, report = _check(staged)
    assert status == 0, report
    assert "2 kept, 0 broken" in report


def test_an_upward_import_from_the_core_breaks_the_layers(staged):
    target = staged / "graphir" / "verifier.py"
    before = _append(target, "\nimport graphir.passes.place  # deliberate upward import\n")
    try:
        status, report = _check(staged)
    finally:
        target.write_text(before)
    assert status != 0
    assert "layers: tools -> driver -> passes -> backends -> IR core BROKEN" in report
    assert "graphir.verifier -> graphir.passes.place" in report


def test_a_backend_importing_a_pass_breaks_the_layers(staged):
    target = staged / "graphir" / "backends" / "summary.py"
    before = _append(target, "\nfrom graphir.passes.place import problem  # deliberate upward import\n")
    try:
        status, report = _check(staged)
    finally:
        target.write_text(before)
    assert status != 0
    assert "graphir.backends.summary -> graphir.passes.place" in report


def test_a_module_level_tensorflow_import_in_the_core_is_refused_a_lazy_one_is_not(staged):
    target = staged / "graphir" / "simulator.py"
    before = _append(target, "\n\ndef _lazy():\n    import tensorflow\n\n    return tensorflow\n")
    try:
        status, report = _check(staged)
        assert status == 0, report  # inside a function: allowed
        target.write_text(before + "\nimport scipy  # deliberate module-level import\n")
        status, report = _check(staged)
    finally:
        target.write_text(before)
    assert status != 0
    assert "graphir.simulator imports scipy at module level" in report


def test_a_new_core_module_must_be_placed_in_a_layer(staged):
    target = staged / "graphir" / "unlisted_module.py"
    target.write_text('"""A core module nobody listed."""\n')
    try:
        status, report = _check(staged)
    finally:
        target.unlink()
    assert status != 0
    assert "unlisted_module" in report
