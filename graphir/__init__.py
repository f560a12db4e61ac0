"""graphir: a typed graph-IR compiler-pass framework for placing DL dataflow graphs on devices.

The IR classes and errors below are the core's. The Python API (:func:`load`, :func:`place`,
:func:`parallelize`, :func:`compare`, :class:`Plan`) lives in the driver layer
(:mod:`graphir.driver.api`), above the passes and backends; this package facade names it for the
user's convenience and imports it on first use, so ``import graphir`` (and every core module)
loads only the core. It is the one place in ``graphir/`` that names a layer above the core
(``tests/unit`` holds it to these names).
"""

from typing import TYPE_CHECKING

from graphir.annotations import Cost, Mem
from graphir.attributes import DenseTensor, Opaque
from graphir.errors import (
    BackendError,
    GraphIRError,
    ImportError_,
    Location,
    ParseError,
    PassError,
    PassOptionError,
    PreconditionError,
    VerifyError,
)
from graphir.ir import ExternalTensor, Graph, Module, Node, Value, ValueKind
from graphir.types import DType, TensorType

if TYPE_CHECKING:
    from graphir.driver.api import Compared, Plan, compare, load, parallelize, place

__version__ = "0.1.0"

API_NAMES = ("Compared", "Plan", "compare", "load", "parallelize", "place")
"""The Python API's names, resolved from :mod:`graphir.driver.api` on first use."""

__all__ = [
    "BackendError",
    "Compared",
    "Plan",
    "compare",
    "load",
    "parallelize",
    "place",
    "Cost",
    "DType",
    "DenseTensor",
    "ExternalTensor",
    "Graph",
    "GraphIRError",
    "ImportError_",
    "Location",
    "Mem",
    "Module",
    "Node",
    "Opaque",
    "ParseError",
    "PassError",
    "PassOptionError",
    "PreconditionError",
    "TensorType",
    "Value",
    "ValueKind",
    "VerifyError",
]


def __getattr__(name: str) -> object:
    """The Python API's names (:data:`API_NAMES`), imported from the driver layer on first use."""
    if name in API_NAMES:
        import importlib

        return getattr(importlib.import_module("graphir.driver.api"), name)
    raise AttributeError(f"module 'graphir' has no attribute {name!r}")
