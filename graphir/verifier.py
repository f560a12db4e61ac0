"""The verifier: structural and annotation invariants, checked after every pass by default.

Checks, in order:
    1. use lists: every operand is a value of this graph with a producer (a node, a graph input or
       a constant), and every use recorded on a value matches an operand;
    2. acyclicity of the graph (a cycle error names its nodes);
    3. type agreement for ops with a type rule in :mod:`graphir.ops` (elementwise, MatMul, the graphir dialect);
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
from graphir.ops import type_rule_of
from graphir.topo import find_cycle, stable_topological_order


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


def _check_types(graph: Graph) -> None:
    for node in graph.nodes:
        rule = type_rule_of(node.op)  # the op's type rule in graphir.ops (None: unchecked)
        if rule is None:
            continue
        message = rule(node, [v.type for v in node.inputs], [v.type for v in node.outputs])
        if message is not None:
            raise _err(node, message)


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
