"""The Python API's documentation: the README example runs as written, docs/api.md is current (issue #40)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from devtools import apidoc

REPO = Path(__file__).resolve().parents[2]


def _readme_example() -> str:
    text = (REPO / "README.md").read_text()
    block = text.split("<!-- api:begin -->", 1)[1].split("<!-- api:end -->", 1)[0]
    return block.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_example_is_short_and_runs_as_written(tmp_path: Path) -> None:
    code = _readme_example()
    lines = [line for line in code.splitlines() if line.strip()]
    assert len(lines) <= 16, len(lines)
    for needle in ("keras.Model", "graphir.place", "plan.report()", "plan.to_tf()"):
        assert needle in code, needle
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout.splitlines()
    assert "fits: True" in out[0] and "'cpu1'" in out[0], out  # spread over more than one device
    assert out[1].strip().startswith("makespan:"), out
    assert out[2] == "same as Keras: True", out


def test_api_reference_is_current() -> None:
    assert not apidoc.stale(REPO), f"docs/api.md out of date: run `{apidoc.WRITE_COMMAND}`"


def test_apidoc_check_fails_in_one_line_then_write_fixes_it(tmp_path: Path, capsys) -> None:
    assert apidoc.main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("apidoc: error: ") and apidoc.WRITE_COMMAND in err and len(err.splitlines()) == 1
    assert apidoc.main(["--write", "--root", str(tmp_path)]) == 0
    assert apidoc.main(["--check", "--root", str(tmp_path)]) == 0
    assert (tmp_path / "docs" / "api.md").read_text() == (REPO / "docs" / "api.md").read_text()
