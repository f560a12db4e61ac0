"""lit configuration for graphir's golden tests (`tests/filecheck/**/*.gir`).

Each test holds RUN lines such as
`// RUN: graphir-opt %s --passes='fuse{algo=cpd-topo window=4}' | filecheck %s`.
`graphir-opt` and `filecheck` are found on PATH, whose front is the repository's `.venv/bin`
(where `make` installs them), so the tests run the checked-out code whatever shell started lit.
Run with `make test` or `.venv/bin/lit -v tests/filecheck`.
"""

# `config` and `lit_config` are injected by lit when it executes this file.
# ruff: noqa: F821

import os
import sys
from pathlib import Path

import lit.formats

config.name = "graphir"
# The internal shell: lit 23 deprecates the external one (execute_external=True).
config.test_format = lit.formats.ShTest(False)
config.suffixes = [".gir"]
config.excludes = ["lit.cfg.py", "Output"]

config.test_source_root = os.path.dirname(os.path.abspath(__file__))
config.test_exec_root = config.test_source_root

_repo_root = Path(config.test_source_root).parents[1]
_venv_bin = _repo_root / ".venv" / "bin"
if _venv_bin.is_dir():
    config.environment["PATH"] = os.pathsep.join([str(_venv_bin), config.environment.get("PATH", "")])

# `%python` runs the interpreter that runs lit (the venv's, when started as .venv/bin/lit).
config.substitutions.append(("%python", sys.executable))
