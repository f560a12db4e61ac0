"""Regions: typed graphs held by a node (``If``'s branches, ``Loop``'s and ``Scan``'s bodies).

The IR stays one flat DAG per graph (DESIGN.md): a node that holds regions is one node of its
graph, and each region is a :class:`~graphir.ir.Graph` of its own, kept as a **param** of the node
(a :class:`Region` value under the op's attribute name: ``then_branch``, ``else_branch``,
``body``). Holding regions in params keeps the change additive: every pass that copies a node's
params (cloning, re-batching, replication) keeps its regions, and every pass that walks the
enclosing graph sees the node as one unit, so fusion and placement put the whole body on one
device. Passes treat region graphs as immutable.

**Region boundary.** A region is isolated from the enclosing graph (as MLIR's
``IsolatedFromAbove``): it reads only its own inputs. The values of the enclosing graph a body
uses (ONNX subgraphs read them by name) are the node's **captured operands**: the last
``_captured_inputs`` operands of the node, and every region of the node receives all of them, in
that order, as its last inputs. The region's leading inputs are its formal arguments, as the op
defines them:

* ``If``: none; each branch returns one value per result of the node.
* ``Loop``: ``(iteration i64[], condition bool[], carried...)``; the body returns
  ``(condition, carried..., scan outputs...)``; the node returns the final carried values and each
  scan output stacked along a new leading axis.
* ``Scan``: ``(states..., scan slices...)``; the body returns ``(states..., scan output slices...)``.
* TensorFlow's ``While``/``StatelessWhile`` (regions ``cond`` and ``body``, both taking the loop
  variables) and ``If``/``StatelessIf`` (``then_branch``/``else_branch`` taking the operands after
  the condition).

:func:`check_regions` verifies this boundary (counts and element types; ranks where both sides
know them), which the verifier runs with each region graph's own checks.

**Text.** A region param prints as the word ``region`` among the params; the node line then ends
with ``{`` and the region graphs follow, one ``graph @<param name>(...) { ... }`` block each in the
params' order, closed by a line ``}``::

    %r = onnx.If(%c, %x) {then_branch = region, else_branch = region, _captured_inputs = 1} : (i1[], f32[2]) -> f32[2] {
      graph @then_branch(%x : f32[2]) {
        %a = onnx.Add(%x, %x) : (f32[2], f32[2]) -> f32[2]
        return %a
      }
      graph @else_branch(%x : f32[2]) {
        return %x
      }
    }

Names inside a region are its own (a region may reuse a name of the enclosing graph).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import attrs

from graphir.types import DType, TensorType

if TYPE_CHECKING:
    from graphir.ir import Graph, Node

__all__ = [
    "REGION_SLOT",
    "REGION_WORD",
    "Region",
    "captured_count",
    "check_regions",
    "has_regions",
    "node_regions",
    "walk_nodes",
]

REGION_WORD = "region"
"""How a region param prints among the params (its graph follows the node line)."""


@attrs.frozen(eq=False)
class Region:
    """A typed graph held by a node as one of its params (compared by identity).

    Attributes:
        graph: the region's graph: its inputs are the formal arguments then the node's captured
            operands, its outputs what the op defines (see the module docstring).
    """

    graph: Graph


class _RegionSlot:
    """The parser's placeholder for a ``region`` param until its graph block is read."""

    def __repr__(self) -> str:
        return "REGION_SLOT"


REGION_SLOT = _RegionSlot()
"""What the value grammar returns for the word ``region``; the node parser replaces it."""


def node_regions(node: Node) -> list[tuple[str, Region]]:
    """``(param name, region)`` of every region ``node`` holds, in params order."""
    if not node.params:
        return []
    return [(key, value) for key, value in node.params.items() if type(value) is Region]


def has_regions(node: Node) -> bool:
    """Whether ``node`` holds a region."""
    params = node.params
    return bool(params) and any(type(value) is Region for value in params.values())


def captured_count(node: Node) -> int:
    """How many trailing operands of ``node`` are values its regions capture."""
    count = node.params.get("_captured_inputs", 0)
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


def walk_nodes(graph: Graph) -> Iterator[Node]:
    """Every node of ``graph`` and, depth first after each holder, of the regions it holds."""
    for node in graph.nodes:
        yield node
        for _, region in node_regions(node):
            yield from walk_nodes(region.graph)


# --------------------------------------------------------------------------- boundary rules


def _same_kind(a: TensorType, b: TensorType) -> bool:
    """Element types equal and ranks equal where both are known (shapes may differ per trip or branch)."""
    if a.dtype is not b.dtype and DType.VARIANT not in (a.dtype, b.dtype):
        return False
    return a.rank is None or b.rank is None or a.rank == b.rank


def _sliced(t: TensorType, axis: int = 0) -> TensorType:
    """``t`` without its axis ``axis`` (a scan slice); unknown rank stays unknown."""
    if t.shape is None or not t.shape:
        return TensorType(t.dtype, None)
    axis = axis + len(t.shape) if axis < 0 else axis
    return TensorType(t.dtype, t.shape[:axis] + t.shape[axis + 1 :])


def _stacked(t: TensorType) -> TensorType:
    """``t`` with a new leading axis of unknown length (a stacked scan output)."""
    return TensorType(t.dtype, None if t.shape is None else (None, *t.shape))


_Boundary = Callable[
    ["Node", list[TensorType], list[TensorType]], "dict[str, tuple[list[TensorType], list[TensorType]]] | str"
]
"""``fn(node, operands without captures, results)`` -> region name -> (formal argument types, output
types) as the op expects them, or an error message."""


def _ints(node: Node, key: str) -> tuple[int, ...] | None:
    """``node.params[key]`` when it is a tuple of ints (ONNX ``ints``), else None."""
    value = node.params.get(key)
    if isinstance(value, tuple) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return value
    return None


def _onnx_inputs(node: Node, operands: list[TensorType]) -> list[TensorType | None]:
    absent = _ints(node, "_absent_inputs") or ()
    if not absent:
        return list(operands)
    gaps = set(absent)
    values = iter(operands)
    return [None if k in gaps else next(values) for k in range(len(operands) + len(gaps))]


def _if_boundary(node: Node, operands: list[TensorType], results: list[TensorType]):
    if len(operands) != 1:
        return f"has {len(operands)} operands besides its captures, expected 1 (the condition)"
    return {"then_branch": ([], results), "else_branch": ([], results)}


def _loop_boundary(node: Node, operands: list[TensorType], results: list[TensorType]):
    inputs = _onnx_inputs(node, operands)
    carried = [t for t in inputs[2:] if t is not None]
    if len(results) < len(carried):
        return f"has {len(carried)} carried values but {len(results)} results"
    scans = results[len(carried) :]
    formals = [TensorType(DType.I64, ()), TensorType(DType.BOOL, ()), *carried]
    outputs = [TensorType(DType.BOOL, ()), *carried, *[_sliced(t) for t in scans]]
    return {"body": (formals, outputs)}


def _scan_boundary(node: Node, operands: list[TensorType], results: list[TensorType]):
    scan_count = node.params.get("num_scan_inputs")
    if not isinstance(scan_count, int) or not 0 < scan_count <= len(operands):
        return f"has num_scan_inputs {scan_count!r} with {len(operands)} operands"
    states = operands[: len(operands) - scan_count]
    axes = _ints(node, "scan_input_axes") or (0,) * scan_count
    out_axes = _ints(node, "scan_output_axes") or (0,) * (len(results) - len(states))
    slices = [_sliced(t, a) for t, a in zip(operands[len(states) :], axes, strict=False)]
    if len(results) < len(states):
        return f"has {len(states)} states but {len(results)} results"
    scan_outs = [_sliced(t, a) for t, a in zip(results[len(states) :], out_axes, strict=False)]
    return {"body": ([*states, *slices], [*states, *scan_outs])}


def _scan8_boundary(node: Node, operands: list[TensorType], results: list[TensorType]):
    """Scan-8 (opset 8): operands ``(sequence_lens?, states..., scans...)`` with a batch axis 0.

    Scans have their sequence axis 1; the body sees one batch row's states and one step of its scans.
    """
    scan_count = node.params.get("num_scan_inputs")
    absent = _ints(node, "_absent_inputs") or ()
    own = operands if 0 in absent else operands[1:]
    if not isinstance(scan_count, int) or not 0 < scan_count <= len(own):
        return f"has num_scan_inputs {scan_count!r} with {len(own)} operands"
    states = [_sliced(t) for t in own[: len(own) - scan_count]]
    slices = [_sliced(_sliced(t)) for t in own[len(own) - scan_count :]]
    if len(results) < len(states):
        return f"has {len(states)} states but {len(results)} results"
    scan_outs = [_sliced(_sliced(t)) for t in results[len(states) :]]
    return {"body": ([*states, *slices], [*states, *scan_outs])}


def _tf_while_boundary(node: Node, operands: list[TensorType], results: list[TensorType]):
    return {"cond": (operands, [TensorType(DType.BOOL, None)]), "body": (operands, operands)}


def _tf_if_boundary(node: Node, operands: list[TensorType], results: list[TensorType]):
    if not operands:
        return "has no condition operand"
    return {"then_branch": (operands[1:], results), "else_branch": (operands[1:], results)}


BOUNDARIES: dict[str, _Boundary | tuple[_Boundary, ...]] = {
    "onnx.If": _if_boundary,
    "onnx.Loop": _loop_boundary,
    "onnx.Scan": (_scan_boundary, _scan8_boundary),
    "tf.While": _tf_while_boundary,
    "tf.StatelessWhile": _tf_while_boundary,
    "tf.If": _tf_if_boundary,
    "tf.StatelessIf": _tf_if_boundary,
}
"""Op -> its region boundary rule (or alternatives, one of which must hold: ``Scan`` opset 9+ or 8);
an op not listed may hold regions of any signature."""


def _types_text(types: list[TensorType]) -> str:
    return "(" + ", ".join(str(t) for t in types) + ")"


def check_regions(node: Node) -> str | None:
    """The first boundary error of ``node``'s regions (``None``: they agree with the op and the captures).

    Checks that every region takes the node's captured operand types as its last inputs, and, for
    the ops of :data:`BOUNDARIES`, the regions the op needs are present and their formal arguments
    and outputs agree in count and element type (rank too where both sides know it).
    """
    regions = node_regions(node)
    captures = captured_count(node)
    if captures > len(node.inputs):
        return f"captures {captures} operands but has {len(node.inputs)}"
    operand_types = [v.type for v in node.inputs]
    own, captured = operand_types[: len(operand_types) - captures], operand_types[len(operand_types) - captures :]
    for name, region in regions:
        inputs = [v.type for v in region.graph.inputs]
        if len(inputs) < captures or inputs[len(inputs) - captures :] != captured:
            return (
                f"region '{name}' takes {_types_text(inputs)}, which does not end with the "
                f"captured operand types {_types_text(captured)}"
            )
    rules = BOUNDARIES.get(node.op)
    if rules is None:
        return None
    first = None
    for rule in rules if isinstance(rules, tuple) else (rules,):
        message = _check_boundary(node, rule, own, regions, captures)
        if message is None:
            return None
        first = first or message
    return first


def _check_boundary(
    node: Node, rule: _Boundary, own: list[TensorType], regions: list[tuple[str, Region]], captures: int
) -> str | None:
    expected = rule(node, own, [v.type for v in node.outputs])
    if isinstance(expected, str):
        return expected
    present = dict(regions)
    for name, (formals, outputs) in expected.items():
        region = present.get(name)
        if region is None:
            return f"has no region '{name}'"
        args = [v.type for v in region.graph.inputs][: len(region.graph.inputs) - captures]
        if len(args) != len(formals) or not all(_same_kind(a, b) for a, b in zip(args, formals, strict=True)):
            return f"region '{name}' takes {_types_text(args)} before its captures, expected {_types_text(formals)}"
        results = [v.type for v in region.graph.outputs]
        if len(results) != len(outputs) or not all(_same_kind(a, b) for a, b in zip(results, outputs, strict=True)):
            return f"region '{name}' returns {_types_text(results)}, expected {_types_text(outputs)}"
    return None
