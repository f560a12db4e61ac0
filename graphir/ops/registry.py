"""The op registry: one :class:`OpDef` per op kind, with its type rule, cost, split rule and lowering.

Keys are op kinds in one of two spellings (see :mod:`graphir.ops` for why):

* a dialect-qualified name (``onnx.Conv``, ``tf.MatMul``, ``graphir.split``): that op only;
* a bare op type (``Relu``, ``Conv2DBackpropInput``): the op type in every dialect, the spelling of
  the cost estimators that ONNX, TensorFlow and ONNX's vendor domains share.

Each facet resolves on its own. The cost of an op is its qualified definition's cost, else its bare
type's (``onnx.Sum`` -> ``Sum``, an n-ary elementwise add; ``tf.Sum`` has a reduction cost of its
own). Type rules, split rules and lowerings are dialect-specific (layouts and semantics differ
between ONNX and TensorFlow) and resolve by the qualified name only.

Facets are registered with the decorators :func:`type_rule`, :func:`cost`, :func:`split_rule`,
:func:`lowering` and :func:`weight_layout` (or :func:`define`), which merge into the op's one
:class:`OpDef`. Setting a facet that is already set is an error, so two family modules cannot
silently disagree; plugins that want to replace a facet pass ``replace=True`` to :func:`define`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from graphir.ir import Node
    from graphir.types import TensorType

__all__ = [
    "OPS",
    "OpDef",
    "SplitRule",
    "bare_op",
    "cost",
    "cost_of",
    "define",
    "lowering",
    "lowering_of",
    "op_def",
    "split_of",
    "split_rule",
    "type_rule",
    "type_rule_of",
    "weight_layout",
    "weight_layout_of",
]

Shape = tuple[int, ...]
Estimate = tuple[float, float, int]
"""``(flops, bytes, temporary)`` of one op."""
Estimator = Callable[["Node", list["Shape | None"], list["Shape | None"], list[int], list[int]], "Estimate | None"]
"""``fn(node, input shapes, output shapes, input bytes, output bytes)`` -> :data:`Estimate`, or ``None`` when
a shape it needs is unknown (the caller then uses the bytes-only fallback). Symbolic dims arrive as 1."""
TypeRule = Callable[["Node", list["TensorType"], list["TensorType"]], "str | None"]
"""``fn(node, operand types, result types)`` -> an error message (``None``: the types agree)."""
Lowering = Callable[[Any, list[Any]], list[Any]]
"""``fn(cx, operands) -> results`` with ``cx`` a :class:`graphir.ops.lower_context.OpContext` (it
carries the ``tensorflow`` module, so defining a lowering needs no TensorFlow import)."""
WeightLayout = Callable[["Node"], "dict[int, tuple[int, ...]]"]
"""``fn(node)`` -> ONNX input position -> the permutation the op's lowering applies to a weight read
there (``Conv``'s filters: ONNX ``[M, C, k...]`` to TensorFlow's ``[k..., C, M]``). The lowering driver
stores a large weight that only such inputs read already permuted, and tells the lowering so
(``OpContext.laid_out``), instead of transposing it every step."""


@attrs.frozen
class SplitRule:
    """How FastT operation splitting cuts an op (FastT §5.2).

    Attributes:
        dims: the named dimensions OS-DPOS tries, in order (``batch``, ``channel``).
        plan: ``fn(node, dim, parts) -> SplitPlan``; raises ``SplitError`` saying why it cannot.
    """

    dims: tuple[str, ...]
    plan: Callable[..., Any]


@attrs.frozen
class OpDef:
    """Everything the compiler knows about one op kind; every facet is optional.

    Attributes:
        name: the op kind: qualified (``onnx.Conv``) or a bare op type (``Conv``, every dialect).
        type_rule: checks operand and result types (:data:`TypeRule`), run by the verifier.
        cost: the FLOP / byte / scratch estimator (:data:`Estimator`) of the analytical cost model.
        split: the operation-splitting rule (:class:`SplitRule`).
        lower: the TensorFlow lowering (:data:`Lowering`) of an ONNX-imported op.
        weight_layout: the layout its lowering reads weights in (:data:`WeightLayout`).
    """

    name: str
    type_rule: TypeRule | None = None
    cost: Estimator | None = None
    split: SplitRule | None = None
    lower: Lowering | None = None
    weight_layout: WeightLayout | None = None


OPS: dict[str, OpDef] = {}
"""Op kind -> definition. Read it through the lookups below; add to it with :func:`define`."""

_FACETS = ("type_rule", "cost", "split", "lower", "weight_layout")


def define(name: str, *, replace: bool = False, **facets: Any) -> OpDef:
    """Set facets (``type_rule``, ``cost``, ``split``, ``lower``, ``weight_layout``) of op kind ``name``.

    Returns:
        The op's definition.

    Raises:
        ValueError: an unknown facet, or a facet that is already set (unless ``replace``).
    """
    unknown = sorted(set(facets) - set(_FACETS))
    if unknown:
        raise ValueError(f"unknown op facet(s) {', '.join(unknown)}; expected one of {', '.join(_FACETS)}")
    current = OPS.get(name) or OpDef(name)
    for facet in facets:
        if getattr(current, facet) is not None and not replace:
            raise ValueError(f"op '{name}' already has a {facet}")
    OPS[name] = attrs.evolve(current, **facets)
    return OPS[name]


def _decorator(facet: str, names: tuple[str, ...]) -> Callable[[Any], Any]:
    def wrap(fn: Any) -> Any:
        for name in names:
            define(name, **{facet: fn})
        return fn

    return wrap


def type_rule(*names: str) -> Callable[[TypeRule], TypeRule]:
    """Decorator: the function is the type rule of the (qualified) op kinds ``names``."""
    return _decorator("type_rule", names)


def cost(*names: str) -> Callable[[Estimator], Estimator]:
    """Decorator: the function is the cost estimator of ``names`` (bare op types or qualified names)."""
    return _decorator("cost", names)


def lowering(*names: str) -> Callable[[Lowering], Lowering]:
    """Decorator: the function lowers ``names`` to TensorFlow; a name without a dialect means ``onnx.<name>``."""
    return _decorator("lower", tuple(n if "." in n else "onnx." + n for n in names))


def weight_layout(*names: str) -> Callable[[WeightLayout], WeightLayout]:
    """Decorator: the function gives the weight layout (:data:`WeightLayout`) of the ONNX ops ``names``."""
    return _decorator("weight_layout", tuple(n if "." in n else "onnx." + n for n in names))


def split_rule(dims: tuple[str, ...], *names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: the function plans the split of ``names``, which OS-DPOS tries on ``dims``."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            define(name, split=SplitRule(dims, fn))
        return fn

    return wrap


def bare_op(op: str) -> str:
    """The op type without dialect/domain (``onnx.com.microsoft.FusedConv`` -> ``FusedConv``)."""
    return op.rsplit(".", 1)[-1]


def op_def(op: str) -> OpDef | None:
    """The most specific definition of ``op``: under its qualified name, else its bare type."""
    return OPS.get(op) or OPS.get(bare_op(op))


def cost_of(op: str) -> Estimator | None:
    """The cost estimator of ``op``: its qualified definition's, else its bare type's."""
    definition = OPS.get(op)
    if definition is not None and definition.cost is not None:
        return definition.cost
    definition = OPS.get(bare_op(op))
    return definition.cost if definition is not None else None


def type_rule_of(op: str) -> TypeRule | None:
    """The type rule of the qualified op ``op`` (``None`` when it has none)."""
    definition = OPS.get(op)
    return definition.type_rule if definition is not None else None


def split_of(op: str) -> SplitRule | None:
    """The split rule of the qualified op ``op`` (``None`` when it cannot be split)."""
    definition = OPS.get(op)
    return definition.split if definition is not None else None


def lowering_of(op: str) -> Lowering | None:
    """The TensorFlow lowering of the qualified op ``op`` (``None`` when it has none)."""
    definition = OPS.get(op)
    return definition.lower if definition is not None else None


def weight_layout_of(op: str) -> WeightLayout | None:
    """The weight layout of the qualified op ``op`` (``None``: its lowering reads weights as ONNX lays them out)."""
    definition = OPS.get(op)
    return definition.weight_layout if definition is not None else None


def lowered_ops() -> Iterator[str]:
    """The qualified op names that have a TensorFlow lowering, in registration order."""
    return (name for name, definition in OPS.items() if definition.lower is not None)
