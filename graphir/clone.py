"""Copying a module: the IR's deep copy for trial rewrites (FastT's OS-DPOS tries splits on copies)."""

# Copies are built through the graph's private tables (the checked API's cost per node on a
# 100k-node graph), as the parser does.
# pyright: reportPrivateUsage=false

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from graphir.attributes import ParamValue
from graphir.ir import Graph, Module, Node, Value
from graphir.types import TensorType


def add_copy(
    graph: Graph,
    source: Node,
    name: str,
    output_names: Sequence[str],
    output_types: Sequence[TensorType],
    params: dict[str, ParamValue],
    annotations: dict[str, Any],
) -> Node:
    """Add a copy of ``source`` (its op and location) to ``graph``, without operands (rewrites that copy nodes).

    The same node as ``graph.add_node(source.op, [], output_types, name=name, output_names=output_names)``
    with ``params``, ``source.loc`` and ``annotations`` set, made without the checks when they cannot
    fail: ``annotations`` must hold values their declarations accept unchanged (a valid node's,
    or renamed strings), and ``params`` and ``annotations`` fresh dicts the node may own. When
    ``name`` or a result name is taken, the checked path runs (a node name made unique, a result
    name refused). The caller connects operands and calls :meth:`~graphir.ir.Graph.touch_all`
    with the annotation keys after the batch.
    """
    taken = graph._node_names
    values = graph._values
    if name in taken or any(out in values for out in output_names):
        node = graph.add_node(source.op, [], output_types, name=name, output_names=output_names)
        node.params = params
        node.loc = source.loc
        for key, value in annotations.items():
            node.set_annotation(key, value)
        return node
    return graph.add_node_unchecked(
        source.op, name, output_names, output_types, params, annotations, source._loc, source._line
    )


def clone_module(module: Module) -> Module:
    """A copy of ``module`` for trial rewrites: same names, insertion order, params and annotations.

    Constant data is shared by reference (never copied); the cluster object is shared. Because the
    insertion order is kept, the copy's array view numbers its nodes exactly like the original's,
    so a placer run on the copy and on the original gives the same answer.

    The names and annotations of a valid graph are already unique and checked, so the nodes are
    added through :meth:`~graphir.ir.Graph.add_node_unchecked` (what the `.gir` parser does), use
    lists are appended operand by operand as :meth:`~graphir.ir.Node.add_input` would, and each
    node's control inputs are added in one call (a step's final op may wait on thousands of nodes).
    """
    source = module.graph
    graph = Graph(source.name)
    values: dict[Value, Value] = {}
    for value in source.inputs:
        values[value] = graph.add_input(value.name, value.type)
    for value in source.constants:
        values[value] = graph.add_constant(value.name, value.type, value.const)
    nodes: dict[Node, Node] = {}
    add_node = graph.add_node_unchecked
    for node in source.nodes:
        outputs = node.outputs
        copy = add_node(
            node.op,
            node.name,
            [v.name for v in outputs],
            [v.type for v in outputs],
            dict(node.params),
            dict(node._annotations),  # checked when the source node got them
            node._loc,  # a parsed node's lazy location stays lazy
            node._line,
        )
        nodes[node] = copy
        for original, new in zip(outputs, copy.outputs, strict=True):
            values[original] = new
    for node, copy in nodes.items():
        inputs = copy.inputs
        for value in node.inputs:
            new = values[value]
            new.uses.append((copy, len(inputs)))
            inputs.append(new)
        if node.control_inputs:
            copy.add_control_inputs([nodes[control] for control in node.control_inputs])
    graph.touch_all(source._annotation_keys)  # the keys the source's nodes may hold
    graph.set_outputs(values[v] for v in source.outputs)
    graph._uses_exact_version = graph._version  # every use was appended with its operand, as the parser does
    clone = Module(module.name, graph, module.cluster_spec, dict(module.metadata))
    clone.set_cluster(module.cluster)
    return clone
