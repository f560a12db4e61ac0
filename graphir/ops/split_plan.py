"""What an op's split rule returns (:class:`SplitPlan`), and helpers the split rules share.

A split rule (the ``split`` facet of an :class:`~graphir.ops.OpDef`, a
:class:`~graphir.ops.registry.SplitRule`) gets ``(node, dim, parts)`` and returns how FastT operation
splitting (FastT §5.2) cuts the op into ``parts`` parts along ``dim`` (``"batch"``, ``"channel"`` or an
integer axis of the result), or raises :class:`SplitError` saying why it cannot, in words that
follow "it" (``"has no channel dimension"``). Parts have balanced sizes (the first ``d mod n`` parts one
larger). The rewrite that applies a plan is :mod:`graphir.passes.transform.split_rewrite`.
"""

# Its private helpers serve this package's op families, which import them (unused here).
# pyright: reportUnusedFunction=false
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

from graphir.attributes import ParamValue
from graphir.errors import PassError

if TYPE_CHECKING:
    from graphir.ir import Node, Value

__all__ = ["Dim", "SplitError", "SplitPlan"]

Dim = str | int
"""``"batch"``, ``"channel"`` or an integer axis of the op's result."""


class SplitError(PassError):
    """An op cannot be split as asked; the message says why in one line."""


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    """How to split one op: the result axis and, per operand, ``(axis, sizes)`` or ``None`` (shared)."""

    out_axis: int
    sizes: tuple[int, ...]
    operands: tuple[tuple[int, tuple[int, ...]] | None, ...]
    params: dict[str, ParamValue]


def _balanced(total: int, parts: int) -> tuple[int, ...]:
    base, extra = divmod(total, parts)
    return tuple(base + (1 if i < extra else 0) for i in range(parts))


def _shape(value: Value) -> tuple[int, ...]:
    shape = value.type.shape
    assert shape is not None
    return tuple(int(d) for d in cast(tuple[int, ...], shape))  # split plans are made for static shapes


def _int_param(node: Node, key: str, default: int) -> int:
    value = node.params.get(key, default)
    return int(value) if isinstance(value, (int, bool)) else default


def _broadcast_plan(node: Node, out_axis: int, parts: int, params: dict[str, ParamValue] | None = None) -> SplitPlan:
    """Cut every operand that carries ``out_axis`` of the result (numpy broadcasting); share the rest."""
    out = _shape(node.outputs[0])
    rank = len(out)
    if not 0 <= out_axis < rank:
        raise SplitError(f"its axis {out_axis} is out of range for result type {node.outputs[0].type}")
    sizes = _balanced(out[out_axis], parts)
    operands: list[tuple[int, tuple[int, ...]] | None] = []
    for k, value in enumerate(node.inputs):
        shape = _shape(value)
        aligned = out_axis - (rank - len(shape))
        if aligned < 0 or shape[aligned] == 1:
            operands.append(None)
        elif shape[aligned] == out[out_axis]:
            operands.append((aligned, sizes))
        else:
            raise SplitError(
                f"its operand #{k} {value.type} does not broadcast to {node.outputs[0].type} on axis {out_axis}"
            )
    return SplitPlan(out_axis, sizes, tuple(operands), dict(node.params if params is None else params))


def _named_axis(node: Node, dim: Dim, channel_axis: int | None) -> int:
    rank = len(_shape(node.outputs[0]))
    if dim == "batch":
        return 0
    if dim == "channel":
        if channel_axis is None or rank < 2:
            raise SplitError("has no channel dimension")
        return channel_axis
    assert isinstance(dim, int)
    return dim + rank if dim < 0 else dim


def _bias_plan(bias: tuple[int, ...], out: tuple[int, ...], axis: int, sizes: tuple[int, ...]) -> Any:
    aligned = axis - (len(out) - len(bias))
    if aligned < 0 or bias[aligned] == 1:
        return None
    return (aligned, sizes)
