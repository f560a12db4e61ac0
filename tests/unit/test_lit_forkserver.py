"""The lit tests' ``graphir-opt`` fork server (tests/filecheck/forkserver/) answers as the console script does.

Each command runs twice, through the server's client and as the real ``graphir-opt``: the exit
status, stdout and stderr must be the same bytes (a success with output, a pipeline error, an
argparse usage error, the input read from stdin, an output file written relative to the working
directory).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "tests" / "filecheck" / "forkserver"
VENV_BIN = Path(sys.executable).parent

MODULE = """\
module @m {
  graph @main(%x : f32[4]) {
    %a = onnx.Relu(%x) : (f32[4]) -> f32[4]
    %dead = onnx.Neg(%x) : (f32[4]) -> f32[4]
    return %a
  }
}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The server on a socket of its own; its stdin pipe closes at the end (it exits)."""
    socket_path = str(tmp_path_factory.mktemp("fs") / "s")
    process = subprocess.Popen(
        [sys.executable, str(FOLDER / "server.py"), socket_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert process.stdout is not None and process.stdout.readline().strip() == b"ready"
    yield socket_path
    assert process.stdin is not None
    process.stdin.close()
    assert process.wait(timeout=30) == 0
    process.stdout.close()
    assert not os.path.exists(socket_path)  # removed on the way out


def _both(server: str, args: list[str], cwd: Path, stdin: str = "") -> tuple[tuple, tuple]:
    """(status, stdout, stderr) of the client (through the server) and of the real graphir-opt."""
    results = []
    for via_server in (True, False):
        env = {**os.environ, "PATH": f"{FOLDER}{os.pathsep}{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        env.pop("GRAPHIR_OPT_SERVER", None)
        if via_server:
            env["GRAPHIR_OPT_SERVER"] = server
        command = [str(FOLDER / "graphir-opt") if via_server else str(VENV_BIN / "graphir-opt"), *args]
        run = subprocess.run(command, input=stdin, capture_output=True, text=True, cwd=cwd, env=env, timeout=60)
        results.append((run.returncode, run.stdout, run.stderr))
    return results[0], results[1]


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (["m.gir", "--passes=dce"], 0),
        (["m.gir", "--passes=dce,nope"], 1),
        (["m.gir", "--no-such-flag"], 1),
        (["-", "--passes=dce"], 0),
    ],
)
def test_client_answers_as_the_console_script(server, tmp_path, args, status):
    (tmp_path / "m.gir").write_text(MODULE)
    through_server, real = _both(server, args, tmp_path, stdin=MODULE)
    assert through_server == real
    assert real[0] == status
    assert (real[1] if status == 0 else real[2]) != ""  # each case says something


def test_output_file_is_written_in_the_client_directory(server, tmp_path):
    (tmp_path / "m.gir").write_text(MODULE)
    through_server, real = _both(server, ["m.gir", "--passes=dce", "-o", "out.gir"], tmp_path)
    assert through_server == real == (0, "", "")
    written = (tmp_path / "out.gir").read_text()
    assert "%dead" not in written and "onnx.Relu" in written
