"""Re-batching in the IR: the same training graph at another batch size, without TensorFlow.

:func:`rebatch` rewrites a module at batch ``b``: the batch dimension is found symbolically from the
graph's batch inputs (:func:`batch_sources`: the placeholders and graph inputs whose leading
dimension is the module's batch ``B``, :func:`graphir.passes.transform.batching.module_batch`) and
propagated through every op by the batch rules of :mod:`graphir.passes.transform.batch_rules`, both
ways, until each tensor dimension and each element of each small constant is known to carry the
batch or not. Then:

* every result type with a batch dimension of size ``c*B`` gets ``c*b`` there;
* every shape-carrying constant (``Reshape`` targets, ``Fill``/``BroadcastTo``/``Tile``/random shapes,
  ``Slice``/``StridedSlice`` bounds that span the batch, the shape vectors TensorFlow's gradients
  bake, the loss's mean divisor ``G*S`` and the ``Prod`` it comes from) gets ``c*b`` for ``c*B``;
* a constant tensor with a batch dimension (an attention mask) is sliced to the first ``b`` along
  it (a larger batch needs the ``B`` slices to be equal: they are repeated);
* ``Placeholder`` shape params follow their result type.

Node names, ops, params other than those, edges and annotations are kept: a placement of the
original applies to the result. A profiled module's costs are rescaled by the ratio of the
analytical roofline times at the new and old shapes (:func:`scaled_costs`, as the data-parallel
rewrite always did), and ``mem`` is recomputed analytically. A graph where the batch cannot be proven
is refused with one line naming the node (:class:`~graphir.errors.PassError`).

This replaces re-tracing with TensorFlow (:mod:`graphir.passes.transform.batching`), which a frozen
GraphDef with its batch baked into constants does not allow; the tests keep re-tracing as a cross-check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

import numpy as np

from graphir.annotations import Cost, Mem
from graphir.attributes import DenseTensor
from graphir.clone import clone_module
from graphir.errors import PassError
from graphir.ir import ExternalTensor, Module, Node, Value
from graphir.passes.profile.roofline import analyze_graph, kind_times, node_memory
from graphir.passes.transform.batch_rules import NO, SOME, BatchFacts, analyze_batch, const_array
from graphir.passes.transform.batching import module_batch
from graphir.types import TensorType

__all__ = ["batch_sources", "rebatch", "recompute_mem", "scaled_costs"]

_PLACEHOLDERS = ("tf.Placeholder", "tf.PlaceholderWithDefault")


def batch_sources(module: Module, batch: int) -> list[Value]:
    """The values whose leading dimension is ``batch``: placeholders' results and graph inputs."""
    sources = [v for v in module.graph.inputs if _leading(v) == batch]
    for node in module.graph.nodes:
        if node.op in _PLACEHOLDERS and node.outputs and _leading(node.outputs[0]) == batch:
            sources.append(node.outputs[0])
    return sources


def _leading(value: Value) -> int | None:
    shape = value.type.shape
    return shape[0] if shape and isinstance(shape[0], int) else None


def rebatch(module: Module, batch: int) -> Module:
    """``module`` at ``batch`` samples per step: same node names, ops and structure (module docstring).

    Args:
        module: a graph with batch inputs (a training or inference step).
        batch: the new batch size (>= 1).

    Returns:
        A new module; ``module`` is not changed.

    Raises:
        PassError: ``batch`` < 1, no batch input, or a node where the batch cannot be proven.
    """
    if batch < 1:
        raise PassError(f"batch must be >= 1, got {batch}")
    old = module_batch(module)
    result = clone_module(module)
    if batch == old:
        return result
    facts = analyze_batch(module.graph, old, batch_sources(module, old))
    graph = result.graph
    originals = {v.name: v for v in module.graph.values}
    for value in graph.values:
        labels = facts.dims[originals[value.name]]
        if any(label not in (None, NO) for label in labels):
            value.type = _scaled_type(value.type, labels, old, batch)
    for value in graph.constants:
        source = originals[value.name]
        value.const = _constant(source, value.const, facts, old, batch, value.name)
    for node in graph.nodes:
        if node.op == "tf.Const":
            source = originals[node.outputs[0].name]
            value = cast(DenseTensor, node.params.get("value"))  # a tf.Const's value: sliced, it stays dense
            data = _constant(source, value, facts, old, batch, node.name)
            if data is not None:
                node.params = {**node.params, "value": cast(DenseTensor, data)}
        elif node.op in _PLACEHOLDERS and "shape" in node.params and node.outputs:
            shape = node.outputs[0].type.shape
            if shape is not None:
                node.params = {**node.params, "shape": tuple(d if isinstance(d, int) else -1 for d in shape)}
    graph._touch()  # types changed in place
    _rescale(module, result)
    return result


def _scaled_type(value_type: TensorType, labels: Sequence[int | None], old: int, batch: int) -> TensorType:
    shape = value_type.shape
    assert shape is not None
    dims = [
        (d // old) * batch if isinstance(d, int) and label not in (None, NO) else d
        for d, label in zip(shape, labels, strict=True)
    ]
    return TensorType(value_type.dtype, tuple(dims))


def _constant(
    source: Value, data: DenseTensor | ExternalTensor | None, facts: BatchFacts, old: int, batch: int, name: str
) -> DenseTensor | ExternalTensor | None:
    """The data of a constant at the new batch: sliced along a batch axis, batch elements rescaled."""
    labels = facts.dims[source]
    axis = next((k for k, label in enumerate(labels) if label not in (None, NO)), None)
    elements = facts.elements.get(source)
    scaled = elements is not None and SOME in elements
    if axis is None and not scaled:
        return data
    if axis is not None and scaled:
        raise PassError(f"cannot re-batch constant '{name}': both its shape and its values carry the batch")
    if isinstance(data, ExternalTensor):
        assert axis is not None
        loader = data.loader
        new_type = _scaled_type(data.type, labels, old, batch)
        if loader is None:
            return ExternalTensor(new_type, None)
        label = labels[axis]
        return ExternalTensor(new_type, lambda: _slice_batch(np.asarray(loader()), axis, label, old, batch, name))
    array = const_array(source)
    if array is None:
        raise PassError(f"cannot re-batch constant '{name}': its data is not available")
    if axis is not None:
        return DenseTensor.from_numpy(_slice_batch(array, axis, labels[axis], old, batch, name))
    assert elements is not None
    flat = array.reshape(-1).copy()
    for k, label in enumerate(elements):
        if label == SOME:
            flat[k] = flat[k] // old * batch if flat.dtype.kind in "iu" else flat[k] / old * batch
    return DenseTensor.from_numpy(flat.reshape(array.shape))


def _slice_batch(array: np.ndarray, axis: int, label: int | None, old: int, batch: int, name: str) -> np.ndarray:
    """``array`` with its batch axis cut (or repeated) from ``old`` to ``batch`` samples."""
    size = array.shape[axis]
    inner = 1 if label == SOME else int(label or 1)
    if label == SOME and size != old:
        raise PassError(f"cannot re-batch constant '{name}': where the batch lies in its axis {axis} is not known")
    outer = size // (old * inner)
    split = array.reshape(*array.shape[:axis], outer, old, inner, *array.shape[axis + 1 :])
    if batch <= old:
        part = np.take(split, np.arange(batch), axis=axis + 1)
    else:
        first = np.take(split, [0], axis=axis + 1)
        if not np.array_equal(np.broadcast_to(first, split.shape), split):
            raise PassError(
                f"cannot re-batch constant '{name}' to batch {batch}: its {old} samples along axis {axis} differ"
            )
        part = np.repeat(first, batch, axis=axis + 1)
    return np.ascontiguousarray(part.reshape(*array.shape[:axis], outer * batch * inner, *array.shape[axis + 1 :]))


# --------------------------------------------------------------------------- costs and memory


def _round(seconds: float) -> float:
    return float(f"{seconds:.12g}")


def scaled_costs(module: Module, originals: Sequence[Node], replicas: Sequence[Node]) -> list[Cost | None]:
    """Each original's cost times (roofline at the new node's shapes / roofline at the original's).

    ``module`` gives the cluster; ``originals[i]`` and ``replicas[i]`` are the same op at two batches.
    """
    return _rescaled(module, originals, replicas)[0]


def _signature(node: Node) -> tuple[object, ...]:
    return (*(v.type for v in node.inputs), *(v.type for v in node.outputs))


def _rescaled(
    module: Module, originals: Sequence[Node], replicas: Sequence[Node]
) -> tuple[list[Cost | None], dict[Node, int]]:
    """:func:`scaled_costs`, and the temporary bytes of the replicas it estimated (keyed by replica).

    An op whose operand and result types are unchanged keeps its cost (and is not estimated).
    """
    changed = [i for i, (a, b) in enumerate(zip(originals, replicas, strict=True)) if _signature(a) != _signature(b)]
    before = kind_times(module.cluster, [originals[i] for i in changed])[0]
    after, temporaries = kind_times(module.cluster, [replicas[i] for i in changed])
    slot = {i: k for k, i in enumerate(changed)}
    costs: list[Cost | None] = []
    for i, node in enumerate(originals):
        cost = node.cost
        if cost is None or i not in slot:
            costs.append(cost)
            continue
        k = slot[i]
        kinds: dict[str, float] = {}
        for kind, seconds in cost.times:
            ref = kind if kind in before else next(iter(before), None)  # a kind-independent cost: first kind
            base = float(before[ref][k]) if ref is not None else 0.0
            kinds[kind] = _round(seconds * float(after[ref][k]) / base) if ref is not None and base > 0 else seconds
        costs.append(Cost(kinds))
    return costs, {replicas[i]: int(temporaries[slot[i]]) for i in changed}


def recompute_mem(module: Module, temporary: Mapping[Node, int] | None = None) -> None:
    """Set every node's ``mem`` to the analytical accounting ``profile`` writes.

    ``temporary``: nodes whose temporary bytes are already known (the same op at the same shapes
    elsewhere); only the others are estimated.
    """
    nodes = module.graph.index().nodes
    persistent, activation = node_memory(nodes)
    known = temporary or {}
    rest = [node for node in nodes if node not in known]
    estimated = dict(zip(rest, analyze_graph(module.graph, rest).temporary.tolist(), strict=True)) if rest else {}
    made: dict[tuple[int, int, int], Mem] = {}  # Mem is a frozen value: equal ones are shared
    mems: list[Mem] = []
    for node, held, out in zip(nodes, persistent.tolist(), activation.tolist(), strict=True):
        key = (held, out, int(known[node] if node in known else estimated[node]))
        mem = made.get(key)
        if mem is None:
            mem = made[key] = Mem(*key)
        mems.append(mem)
    module.graph.annotate("mem", nodes, mems)


def _rescale(module: Module, result: Module) -> None:
    originals = list(module.graph.nodes)
    copies = [result.graph.node(n.name) for n in originals]
    temporaries: dict[Node, int] = {}
    if any(n.cost is not None for n in originals):
        costs, temporaries = _rescaled(result, originals, copies)
        for node, cost in zip(copies, costs, strict=True):
            if cost is not None:
                node.cost = cost
    if any(n.mem is not None for n in originals):
        for original, copy in zip(originals, copies, strict=True):  # unchanged ops keep their scratch
            if copy not in temporaries and original.mem is not None and _signature(original) == _signature(copy):
                temporaries[copy] = original.mem.temporary
        recompute_mem(result, temporaries)
