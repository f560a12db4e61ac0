"""The verifier: structural and annotation invariants, checked after every pass by default.

Checks, in order:
    1. use lists: every operand is a value of this graph with a producer (a node, a graph input or
       a constant), and every use recorded on a value matches an operand;
    2. acyclicity of the graph (a cycle error names its nodes);
    3. type agreement for ops with a known type rule (elementwise, MatMul, the graphir dialect);
    4. annotations: devices exist in the module's cluster; ``order`` is a permutation
       ``0..k-1`` on each device; ``colocate``d nodes share a device; ``affinity`` is respected;
    5. acyclicity of the quotient graph of ``group`` annotations (a cycle error names the groups
       and one member of each).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from graphir.errors import Location, VerifyError
from graphir.ir import Graph, Module, Node, ValueKind
from graphir.topo import find_cycle, stable_topological_order
from graphir.types import TensorType

_UNARY_SAME_TYPE = frozenset(
    "Relu Sigmoid Tanh Abs Neg Exp Log Sqrt Reciprocal Floor Ceil Erf Softplus Selu Elu LeakyRelu "
    "HardSigmoid Identity Dropout Softmax LogSoftmax LRN".split()
)
_BINARY_SAME_DTYPE = frozenset("Add Sub Mul Div Pow Max Min Sum Mean".split())


def _node_loc(node: Node) -> Location:
    if node.loc is not None:
        # Point at the op name on the node's source line.
        source = node.loc.source_line or ""
        col = source.find(node.op) + 1 if node.op in source else node.loc.col
        return Location(node.loc.file, node.loc.line, col, node.loc.source_line, node.loc.node)
    return Location(node=node.name)


def _err(node: Node, message: str) -> VerifyError:
    return VerifyError(f"'{node.op}' op '{node.name}' {message}", _node_loc(node))


def _check_uses(graph: Graph) -> None:
    for node in graph.nodes:
        for k, value in enumerate(node.inputs):
            if value.graph is not graph:
                raise _err(node, f"operand #{k} '%{value.name}' is not a value of graph '{graph.name}'")
            if value.kind is ValueKind.RESULT and (value.producer is None or value.producer.graph is not graph):
                raise _err(node, f"operand #{k} '%{value.name}' has no producer in graph '{graph.name}'")
            if (node, k) not in value.uses:
                raise _err(node, f"operand #{k} '%{value.name}' is missing from its use list")
        for control in node.control_inputs:
            if control.graph is not graph or node not in control.control_users:
                raise _err(node, f"control input '{control.name}' is not a node of graph '{graph.name}'")
        for value in node.outputs:
            for user, k in value.uses:
                if user.graph is not graph or k >= len(user.inputs) or user.inputs[k] is not value:
                    raise _err(node, f"result '%{value.name}' has a stale use by '{user.name}'")
    for value in graph.outputs:
        if value.graph is not graph:
            raise VerifyError(f"graph output '%{value.name}' is not a value of graph '{graph.name}'")


def _dtype_of(types: list[TensorType]) -> set[str]:
    return {t.dtype.short for t in types}


def _check_types(graph: Graph) -> None:
    for node in graph.nodes:
        kind = node.op.split(".", 1)[-1] if node.dialect == "onnx" else ""
        in_types = [v.type for v in node.inputs]
        out_types = [v.type for v in node.outputs]
        if kind in _UNARY_SAME_TYPE and in_types and out_types:
            if in_types[0].dtype != out_types[0].dtype:
                raise _err(node, f"result type {out_types[0]} does not match operand type {in_types[0]}")
            if in_types[0].is_static and out_types[0].is_static and in_types[0].shape != out_types[0].shape:
                raise _err(node, f"result type {out_types[0]} does not match operand type {in_types[0]}")
        elif kind in _BINARY_SAME_DTYPE and in_types:
            if len(_dtype_of(in_types + out_types)) > 1:
                joined = ", ".join(str(t) for t in in_types)
                raise _err(node, f"operands and result must share one element type, got ({joined}) -> {out_types[0]}")
        elif kind == "MatMul" and len(in_types) == 2:
            a, b = in_types
            if a.is_static and b.is_static and a.rank and b.rank and a.rank >= 2 and b.rank >= 2:
                assert a.shape is not None and b.shape is not None
                if a.shape[-1] != b.shape[-2]:
                    raise _err(node, f"operand shapes {a} and {b} have mismatched inner dimensions")
        elif node.op in ("graphir.split", "graphir.concat"):
            _check_split_concat(node, in_types, out_types)


def _check_split_concat(node: Node, in_types: list[TensorType], out_types: list[TensorType]) -> None:
    axis = node.params.get("axis")
    whole, parts = (in_types, out_types) if node.op == "graphir.split" else (out_types, in_types)
    if not isinstance(axis, int) or len(whole) != 1 or not parts:
        raise _err(node, "needs an integer 'axis', one whole tensor and at least one part")
    if not all(t.is_static for t in whole + parts):
        return
    shape = whole[0].shape
    assert shape is not None
    if axis < 0 or axis >= len(shape):
        raise _err(node, f"axis {axis} is out of range for {whole[0]}")
    total = 0
    for part in parts:
        assert part.shape is not None
        if len(part.shape) != len(shape) or any(
            d != p for i, (d, p) in enumerate(zip(shape, part.shape, strict=True)) if i != axis
        ):
            raise _err(node, f"part {part} does not match {whole[0]} outside axis {axis}")
        total += part.shape[axis]  # type: ignore[operator]
    if total != shape[axis]:
        raise _err(node, f"parts add up to {total} along axis {axis}, expected {shape[axis]}")


def _check_annotations(module: Module) -> None:
    graph = module.graph
    devices: dict[str, str] | None = None
    by_device: dict[str, list[tuple[int, Node]]] = defaultdict(list)
    colocated: dict[str, tuple[str | None, Node]] = {}
    for node in graph.nodes:
        device = node.device
        if device is not None:
            if devices is None:
                devices = {d.name: d.kind for d in module.cluster.devices}
            if device not in devices:
                names = ", ".join(devices)
                raise _err(
                    node, f"is placed on unknown device '{device}' (cluster '{module.cluster.spec}' has {names})"
                )
            if node.affinity is not None and devices[device] not in node.affinity:
                raise _err(
                    node, f"runs only on {', '.join(node.affinity)} but is placed on '{device}' ({devices[device]})"
                )
        if node.order is not None:
            if device is None:
                raise _err(node, "has an 'order' but no 'device'")
            by_device[device].append((node.order, node))
        if node.colocate is not None:
            first = colocated.get(node.colocate)
            if first is None:
                colocated[node.colocate] = (device, node)
            elif first[0] != device:
                where = f"on '{device}'" if device is not None else "unplaced"
                other = f"on '{first[0]}'" if first[0] is not None else "unplaced"
                raise _err(
                    node,
                    f"is {where} but its colocation class '{node.colocate}' has '{first[1].name}' {other}",
                )
    for device, entries in sorted(by_device.items()):
        entries.sort(key=lambda e: e[0])
        for expected, (order, node) in enumerate(entries):
            if order != expected:
                raise _err(
                    node, f"has order {order} on '{device}', expected {expected}: orders must be 0..{len(entries) - 1}"
                )
    if by_device:
        _check_order_respects_dependencies(graph, by_device)


def _check_order_respects_dependencies(graph: Graph, by_device: dict[str, list[tuple[int, Node]]]) -> None:
    """Data edges plus each device's sequence must stay acyclic, or the schedule deadlocks."""
    index = graph.index()
    chain_src: list[int] = []
    chain_dst: list[int] = []
    for entries in by_device.values():
        positions = [index.position(node) for _, node in entries]
        chain_src.extend(positions[:-1])
        chain_dst.extend(positions[1:])
    src = np.concatenate([index.edge_src, np.asarray(chain_src, dtype=np.int64)])
    dst = np.concatenate([index.edge_dst, np.asarray(chain_dst, dtype=np.int64)])
    if stable_topological_order(index.num_nodes, src, dst) is not None:
        return
    cycle = [index.nodes[u].name for u in find_cycle(index.num_nodes, src, dst)]
    raise VerifyError(
        "the per-device 'order' deadlocks against the data dependencies: " + " -> ".join(cycle + cycle[:1])
    )


def check_quotient(graph: Graph) -> None:
    """Raise :class:`VerifyError` naming a cycle of the quotient graph of ``group``s, if any."""
    index = graph.index()
    quotient = index.quotient()
    if quotient.order is not None:
        return
    cycle = quotient.cycle()
    members = quotient.members()
    names = []
    for g in cycle:
        first = index.nodes[members[g][0]]
        gid = int(quotient.group_ids[g])
        names.append(f"group {gid} ('{first.name}')" if gid >= 0 else f"'{first.name}'")
    raise VerifyError(f"the quotient graph of groups has a cycle: {' -> '.join(names + names[:1])}")


def verify(module: Module) -> None:
    """Check every invariant of ``module``; raises :class:`~graphir.errors.VerifyError`."""
    graph = module.graph
    _check_uses(graph)
    graph.index()  # raises on a cycle, naming it
    _check_types(graph)
    _check_annotations(module)
    check_quotient(graph)
