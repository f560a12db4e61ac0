"""Copying a module: the IR's deep copy for trial rewrites (FastT's OS-DPOS tries splits on copies)."""

from __future__ import annotations

from graphir.ir import Graph, Module, Node, Value


def clone_module(module: Module) -> Module:
    """A copy of ``module`` for trial rewrites: same names, insertion order, params and annotations.

    Constant data is shared by reference (never copied); the cluster object is shared. Because the
    insertion order is kept, the copy's array view numbers its nodes exactly like the original's,
    so a placer run on the copy and on the original gives the same answer.
    """
    source = module.graph
    graph = Graph(source.name)
    values: dict[Value, Value] = {}
    for value in source.inputs:
        values[value] = graph.add_input(value.name, value.type)
    for value in source.constants:
        values[value] = graph.add_constant(value.name, value.type, value.const)
    nodes: dict[Node, Node] = {}
    for node in source.nodes:
        copy = graph.add_node(
            node.op, [], [v.type for v in node.outputs], name=node.name, output_names=[v.name for v in node.outputs]
        )
        copy.params = dict(node.params)
        copy.loc = node.loc
        for key, value in node.annotations.items():
            copy.set_annotation(key, value)
        nodes[node] = copy
        for original, new in zip(node.outputs, copy.outputs, strict=True):
            values[original] = new
    for node, copy in nodes.items():
        for value in node.inputs:
            copy.add_input(values[value])
        for control in node.control_inputs:
            copy.add_control_input(nodes[control])
    graph.set_outputs(values[v] for v in source.outputs)
    clone = Module(module.name, graph, module.cluster_spec, dict(module.metadata))
    clone.set_cluster(module.cluster)
    return clone
