"""lit configuration for graphir's golden tests (`tests/filecheck/**/*.gir`).

Each test holds RUN lines such as
`// RUN: graphir-opt %s --passes='fuse{algo=cpd-topo window=4}' | filecheck %s`.
`graphir-opt` and `filecheck` are found on PATH, whose front is the repository's `.venv/bin`
(where `make` installs them), so the tests run the checked-out code whatever shell started lit.
Run with `make test` or `.venv/bin/lit -v tests/filecheck`.

The `graphir-opt` that RUN lines find first is `forkserver/graphir-opt`: it runs `graphir-opt` in a
fork of a server that imported graphir once (`forkserver/server.py`, started here), instead of
paying the imports (0.4-0.6 CPU s) on each of about 200 RUN lines. Each run is still a fresh fork
running the console script's entry point with the RUN line's arguments, directory, environment and
streams. `GRAPHIR_LIT_FORKSERVER=0` runs the real console script instead.
"""

# `config` and `lit_config` are injected by lit when it executes this file.
# ruff: noqa: F821

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import lit.formats

config.name = "graphir"
# The internal shell: lit 23 deprecates the external one (execute_external=True).
config.test_format = lit.formats.ShTest(False)
config.suffixes = [".gir"]
config.excludes = ["lit.cfg.py", "Output", "forkserver"]

config.test_source_root = os.path.dirname(os.path.abspath(__file__))
config.test_exec_root = config.test_source_root

_repo_root = Path(config.test_source_root).parents[1]
_venv_bin = _repo_root / ".venv" / "bin"
if _venv_bin.is_dir():
    config.environment["PATH"] = os.pathsep.join([str(_venv_bin), config.environment.get("PATH", "")])

# `%python` runs the interpreter that runs lit (the venv's, when started as .venv/bin/lit).
config.substitutions.append(("%python", sys.executable))


def _start_fork_server() -> None:
    """Start forkserver/server.py and put its client first on the tests' PATH (see the docstring)."""
    folder = Path(config.test_source_root) / "forkserver"
    socket_dir = tempfile.mkdtemp(prefix="graphir-lit-")
    atexit.register(shutil.rmtree, socket_dir, ignore_errors=True)
    socket_path = os.path.join(socket_dir, "server")
    # The server exits when its stdin closes: when this process (and lit's workers, which inherit
    # the pipe) end. Its stderr is lit's, so a failing preload shows its traceback.
    server = subprocess.Popen(
        [sys.executable, str(folder / "server.py"), socket_path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**config.environment, **{k: v for k, v in os.environ.items() if k == "GRAPHIR_FORKSERVER_CPU_LOG"}},
    )
    if server.stdout is None or server.stdout.readline().strip() != b"ready":
        lit_config.warning("the graphir-opt fork server did not start: the tests run the real graphir-opt")
        return
    # The pipe stays open until lit exits (atexit holds it; the config itself must stay picklable
    # for lit's workers).
    atexit.register(server.stdin.close)
    config.environment["GRAPHIR_OPT_SERVER"] = socket_path
    config.environment["PATH"] = os.pathsep.join([str(folder), config.environment["PATH"]])


if os.environ.get("GRAPHIR_LIT_FORKSERVER", "1") != "0":
    _start_fork_server()
