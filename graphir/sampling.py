"""Seeded stand-in data for running a model whose inputs or weights are not at hand.

Profilers and numeric checks run real models: graph inputs get seeded random values, and constants
whose data is unavailable (a `.gir` that printed them as ``external``) get the same treatment.
"""

from __future__ import annotations

import numpy as np

from graphir.attributes import DenseTensor, numpy_dtype
from graphir.ir import ExternalTensor, Value
from graphir.types import TensorType


def random_array(type_: TensorType, rng: np.random.Generator) -> np.ndarray:
    """Data of ``type_``: floats standard normal x 0.1, others 0 (always a valid index or shape operand).

    Symbolic and unknown dimensions become 1.
    """
    shape = tuple(d if isinstance(d, int) else 1 for d in (type_.shape or ()))
    np_dtype = np.dtype(numpy_dtype(type_.dtype))
    if np_dtype.kind == "f":
        return (rng.standard_normal(shape) * 0.1).astype(np_dtype)
    return np.zeros(shape, dtype=np_dtype)


def constant_array(value: Value, rng: np.random.Generator) -> np.ndarray:
    """A constant's own data when it is available, else :func:`random_array` of its type."""
    data = value.const
    if isinstance(data, DenseTensor):
        return data.numpy()
    if isinstance(data, ExternalTensor) and data.loader is not None:
        return np.asarray(data.numpy())
    return random_array(value.type, rng)
