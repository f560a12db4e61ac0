"""The compiled loops of the `.gir` text format (``graphir/_girtext.c``), or None when they were not built.

``setup.py`` compiles the module at install when a C compiler is there; without one, the parser
and the printer read and write every line in Python (the same results, slower). They look it up
here, each under its own name (``parser._NATIVE``, ``printer._NATIVE``), so a test can turn one
off without the other.
"""

from __future__ import annotations

import importlib
from typing import Any

girtext: Any
try:
    girtext = importlib.import_module("graphir._girtext")  # a C extension: no Python source to check
except ImportError:  # not compiled
    girtext = None
