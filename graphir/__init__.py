"""graphir: a typed graph-IR compiler-pass framework for placing DL dataflow graphs on devices."""

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

__version__ = "0.1.0"

__all__ = [
    "BackendError",
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
