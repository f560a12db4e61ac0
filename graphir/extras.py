"""Optional dependencies: which pip extra brings which package, and one helper to import them.

``pip install graphir`` brings the IR, ONNX import, the list schedulers and the simulator (numpy,
attrs, networkx, onnx). Everything else is an extra of the distribution (see ``pyproject.toml``):

* ``tf``: TensorFlow (importer, lowering, measured profiling) and tf2onnx (the model zoo);
* ``ort``: onnxruntime (measured profiling, numeric reference runs);
* ``solvers``: ortools (``place{algo=ilp}``), pymetis (``place{algo=metis}``) and scipy (the LP of
  ``place{algo=m-sct}``);
* ``report``: matplotlib (the timeline pictures of ``--emit=report``);
* ``all``: every extra above.

Code that needs one of these packages imports it through :func:`require` at the point of use,
never at module level (the import-linter contract in ``pyproject.toml`` checks the core), so
``import graphir.passes`` works without any extra and a missing one surfaces as a one-line
:class:`MissingExtraError`::

    error: place{algo=ilp} needs ortools: pip install 'graphir[solvers]'
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from graphir.errors import GraphIRError, describe_exception

__all__ = ["EXTRAS", "MissingExtraError", "install_command", "require"]

EXTRAS: dict[str, tuple[str, ...]] = {
    "tf": ("tensorflow", "tf2onnx"),
    "ort": ("onnxruntime",),
    "solvers": ("ortools", "pymetis", "scipy"),
    "report": ("matplotlib",),
}
"""Extra name -> the top-level packages it installs (the ``all`` extra is their union)."""


def install_command(extra: str) -> str:
    """The shell command that installs ``extra``: ``pip install 'graphir[extra]'``."""
    return f"pip install 'graphir[{extra}]'"


class MissingExtraError(GraphIRError):
    """A feature needs a package of an optional extra that is not installed (or fails to import).

    The message names the feature, the package and the install command, on one line. It is not a
    failure of the pass that hit it, so the pass manager shows it as is (``pass_context`` is set:
    the message already names the feature, e.g. ``place{algo=ilp}``).

    Args:
        package: the top-level package that is missing (``ortools``).
        extra: the extra that installs it (``solvers``).
        what: the feature that needs it, as the user wrote it (``place{algo=ilp}``, ``--emit=report``).
        reason: why an installed package failed to import; empty when it is simply not installed.
    """

    def __init__(self, package: str, extra: str, what: str, reason: str = "") -> None:
        if reason:
            message = f"{what} needs {package}, which fails to import ({reason}): {install_command(extra)}"
        else:
            message = f"{what} needs {package}: {install_command(extra)}"
        super().__init__(message)
        self.package = package
        self.extra = extra
        self.what = what
        self.pass_context = True


def _is_missing(exc: ImportError, module_name: str) -> bool:
    """Whether ``exc`` says that ``module_name`` itself (or a parent package of it) is absent.

    A ``ModuleNotFoundError`` for some *other* module, raised while the package imports its own
    dependencies, means the package is installed but broken.
    """
    if not isinstance(exc, ModuleNotFoundError) or exc.name is None:
        return False
    return module_name == exc.name or module_name.startswith(exc.name + ".")


def require(module_name: str, extra: str, what: str) -> ModuleType:
    """Import ``module_name`` (dotted) from the optional ``extra`` and return it.

    Args:
        module_name: the module to import, e.g. ``"ortools.sat.python.cp_model"``.
        extra: the extra of :data:`EXTRAS` that installs its top-level package.
        what: the feature that needs it, for the error message.

    Raises:
        MissingExtraError: the package is not installed, or is installed but cannot be imported
            (blocked in ``sys.modules``, or one of its own dependencies is missing or broken).
    """
    package = module_name.partition(".")[0]
    assert package in EXTRAS[extra], f"{package} is not in the '{extra}' extra"
    module = sys.modules.get(module_name)
    if module is not None and sys.modules.get(package) is not None:
        return module
    try:
        # The package first: a submodule imported earlier stays importable even when the package
        # itself has been blocked since (``sys.modules[package] = None``).
        importlib.import_module(package)
        return importlib.import_module(module_name)
    except ImportError as exc:
        reason = "" if _is_missing(exc, module_name) else describe_exception(exc, limit=200)
        raise MissingExtraError(package, extra, what, reason) from None
