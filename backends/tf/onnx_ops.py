"""The ONNX -> TensorFlow op table, as the TensorFlow backend sees it: a view of :mod:`graphir.ops`.

Each op's lowering is the ``lower`` facet of its :class:`~graphir.ops.OpDef`, written next to its
type rule, cost and split rule in its op family's module (e.g. :mod:`graphir.ops.conv_pool` for
``onnx.Conv``; the NCHW handling, opset rules and exact compositions are documented there).
:data:`ONNX_OPS` maps each lowered op name (``onnx.Conv``, ``graphir.split``) to its lowering,
reading the registry on every access, so op kinds that plugins define later appear too.

TensorFlow is not imported here: lowerings receive it through :class:`~graphir.ops.OpContext`, so
importing this module (or asking :data:`ONNX_OPS` which ops are supported) does not load TensorFlow.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from graphir.ops import OpContext, lowered_ops, lowering_of, onnx_inputs, tf_dtype
from graphir.ops.registry import Lowering

__all__ = ["ONNX_OPS", "OpContext", "Converter", "onnx_inputs", "supported_op", "tf_dtype"]

Converter = Lowering
"""``fn(cx, operands) -> results``: operands in ONNX positions (``None`` for an absent optional input)."""


class _LoweringTable(Mapping[str, Lowering]):
    """Read-only mapping: lowered op name -> lowering, computed from the op registry."""

    def __getitem__(self, op: str) -> Lowering:
        convert = lowering_of(op)
        if convert is None:
            raise KeyError(op)
        return convert

    def __iter__(self) -> Iterator[str]:
        return lowered_ops()

    def __len__(self) -> int:
        return sum(1 for _ in lowered_ops())

    def __contains__(self, op: object) -> bool:
        return isinstance(op, str) and lowering_of(op) is not None


ONNX_OPS: Mapping[str, Lowering] = _LoweringTable()
"""IR op name (``onnx.Conv``, ``graphir.split``) -> lowering."""


def supported_op(op: str) -> bool:
    """True when ``op`` (an IR op name such as ``onnx.Conv``) has a TensorFlow lowering."""
    return lowering_of(op) is not None
