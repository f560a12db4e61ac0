"""Tensor types: element types and shapes with static or symbolic dimensions.

Types are frozen value objects; two equal types compare and hash equal. A dimension is a
non-negative ``int`` or a symbol name (``"batch"``); ``None`` stands for a dimension nothing is
known about (printed ``?``). A ``TensorType`` whose shape is ``None`` has unknown rank (``f32[*]``).

Sizes are exact Python ints. The array views (:mod:`graphir.index`) and the cost model store them
as int64 and float64, so a size is usable only up to :data:`MAX_TENSOR_BYTES`;
:meth:`TensorType.size_error` says why a type is beyond it, and the importers and the graph index
turn that into a one-line "size overflows" error naming the tensor.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable
from typing import TypeGuard

import attrs


class DType(enum.Enum):
    """Element types, with the short name used in `.gir` text and their size in bytes."""

    F16 = ("f16", 2)
    BF16 = ("bf16", 2)
    F32 = ("f32", 4)
    F64 = ("f64", 8)
    I8 = ("i8", 1)
    I16 = ("i16", 2)
    I32 = ("i32", 4)
    I64 = ("i64", 8)
    U8 = ("u8", 1)
    U16 = ("u16", 2)
    U32 = ("u32", 4)
    U64 = ("u64", 8)
    BOOL = ("i1", 1)
    C64 = ("c64", 8)
    C128 = ("c128", 16)
    STRING = ("str", 0)
    RESOURCE = ("resource", 0)
    VARIANT = ("variant", 0)
    F8E4M3 = ("f8e4m3", 1)
    F8E5M2 = ("f8e5m2", 1)
    I4 = ("i4", 1)
    U4 = ("u4", 1)
    TOKEN = ("token", 0)

    def __init__(self, short: str, itemsize: int):
        self.short = short
        self.itemsize = itemsize

    @classmethod
    def from_short(cls, short: str) -> DType:
        """Look a dtype up by its text name (``f32``); raises ``KeyError`` when unknown."""
        return _BY_SHORT[short]

    def __repr__(self) -> str:
        return f"DType.{self.name}"


_BY_SHORT = {d.short: d for d in DType}

Dim = int | str | None


def is_static_shape(shape: tuple[Dim, ...] | None) -> TypeGuard[tuple[int, ...]]:
    """Whether ``shape`` is known and every dimension an int (narrows it to ``tuple[int, ...]``)."""
    return shape is not None and all(isinstance(d, int) for d in shape)


MAX_TENSOR_BYTES = 1 << 53
"""Largest size (bytes, and elements, and any one dimension) of a tensor: 8 PiB, a thousand times
any device, exact in float64, and far enough below 2**63 that int64 sums over a graph's tensors
cannot wrap in practice (the graph index also checks the graph's total)."""
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_shape(_inst: object, _attr: object, shape: tuple[object, ...] | None) -> None:
    if shape is None:
        return
    for dim in shape:
        if isinstance(dim, bool) or not (dim is None or isinstance(dim, (int, str))):
            raise TypeError(f"dimension {dim!r} must be an int, a symbol name or None")
        if isinstance(dim, int) and dim < 0:
            raise ValueError(f"dimension {dim} is negative")
        if isinstance(dim, str) and not _SYMBOL.fullmatch(dim):
            raise ValueError(f"symbolic dimension {dim!r} must be an identifier ([A-Za-z_][A-Za-z0-9_]*)")


def _to_shape(shape: Iterable[Dim] | None) -> tuple[Dim, ...] | None:
    return None if shape is None else tuple(shape)


@attrs.frozen
class TensorType:
    """A tensor of ``dtype`` with ``shape`` (``None``: unknown rank).

    ``TensorType(DType.F32, (1, "batch", 224))`` prints as ``f32[1,batch,224]``.
    """

    dtype: DType
    shape: tuple[Dim, ...] | None = attrs.field(converter=_to_shape, validator=_check_shape)

    @property
    def rank(self) -> int | None:
        """Number of dimensions, or ``None`` when unknown."""
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        """True when every dimension is a known integer."""
        return is_static_shape(self.shape)

    @property
    def num_elements(self) -> int | None:
        """Element count when the shape is static, else ``None``."""
        shape = self.shape
        if not is_static_shape(shape):
            return None
        return math.prod(shape)

    @property
    def nbytes(self) -> int | None:
        """Size in bytes when the shape is static (sub-byte types round up), else ``None``."""
        count = self.num_elements
        if count is None:
            return None
        return count * self.dtype.itemsize

    def size_error(self) -> str | None:
        """Why this type's size is beyond :data:`MAX_TENSOR_BYTES` (``None`` when it is not).

        Checked on the known dimensions alone, so ``f32[?,4611686018427387904]`` is refused too.
        """
        if self.shape is None:
            return None
        known = [d for d in self.shape if isinstance(d, int)]
        if not known:
            return None
        big = max(known)
        if big > MAX_TENSOR_BYTES:
            return f"{self} has a dimension of {big}: size overflows (limit 2^53)"
        count = math.prod(known)
        if count > MAX_TENSOR_BYTES:
            return f"{self} has {count} elements: size overflows (limit 2^53)"
        if count * self.dtype.itemsize > MAX_TENSOR_BYTES:
            return f"{self} has {count * self.dtype.itemsize} bytes: size overflows (limit 2^53)"
        return None

    def nbytes_or(self, default: int = 0) -> int:
        """Size in bytes, or ``default`` when the shape is not static."""
        size = self.nbytes
        return default if size is None else size

    def __str__(self) -> str:
        if self.shape is None:
            return f"{self.dtype.short}[*]"
        if None in self.shape:
            dims = ",".join("?" if d is None else str(d) for d in self.shape)
        else:  # the common case without a generator: dims are ints or symbol strings
            dims = ",".join(map(str, self.shape))
        return f"{self.dtype.short}[{dims}]"
