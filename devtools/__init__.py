"""Developer tools of the graphir repository: benchmarks, replication tables, fuzzing, mutation testing, doc generators.

Not part of the installed package (the wheel holds ``graphir`` only; ``tests/unit/test_packaging.py``
checks it): these modules run from a checkout, from its root, as ``python -m devtools.NAME`` (the
Makefile's targets do). They import the product as ``graphir.*`` (the editable install of
``make venv``) and each other as ``devtools.*``.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
"""The checkout (``devtools/`` is one level below it)."""


def child_env(**overrides: str) -> dict[str, str]:
    """This process's environment with ``overrides`` and the checkout first on ``PYTHONPATH``.

    A child started as ``python -m devtools.NAME`` then finds ``devtools`` whatever its working
    directory.
    """
    result = dict(os.environ, **overrides)
    rest = result.get("PYTHONPATH", "")
    result["PYTHONPATH"] = os.pathsep.join(part for part in (str(REPO), rest) if part)
    return result
