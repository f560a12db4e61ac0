"""The IR core: use lists under mutation, names, annotations and their versioning."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import f32

from graphir.annotations import Cost, Mem
from graphir.ir import Graph, Module, Node, Value, ValueKind
from graphir.types import DType, TensorType


def _uses(value: Value) -> list[tuple[str, int]]:
    return sorted((node.name, k) for node, k in value.uses)


def _check_use_lists(graph: Graph) -> None:
    """Every operand appears exactly once in its value's use list and vice versa."""
    expected: dict[int, list[tuple[Node, int]]] = {id(v): [] for v in graph.values}
    for node in graph.nodes:
        for k, value in enumerate(node.inputs):
            expected.setdefault(id(value), []).append((node, k))
    for value in graph.values:
        assert sorted(value.uses, key=lambda u: (u[0].name, u[1])) == sorted(
            expected[id(value)], key=lambda u: (u[0].name, u[1])
        ), value


# ----------------------------------------------------------------------------- construction


def test_add_node_records_producers_uses_and_kinds():
    g = Graph()
    x = g.add_input("x", f32(2))
    w = g.add_constant("w", f32(2))
    n = g.add_node("onnx.Add", [x, w], [f32(2)], name="add")
    assert x.kind is ValueKind.INPUT and w.kind is ValueKind.CONSTANT
    out = n.outputs[0]
    assert out.kind is ValueKind.RESULT and out.producer is n and out.output_index == 0
    assert out.name == "add" and out.graph is g
    assert _uses(x) == [("add", 0)] and _uses(w) == [("add", 1)]
    assert list(g.values) == [x, w, out]
    assert g.node("add") is n and g.value("add") is out
    assert n.dialect == "onnx"
    _check_use_lists(g)


def test_same_value_used_twice_records_two_uses():
    g = Graph()
    x = g.add_input("x", f32(2))
    n = g.add_node("onnx.Mul", [x, x], [f32(2)], name="sq")
    assert _uses(x) == [("sq", 0), ("sq", 1)]
    assert x.users == [n]
    m = g.add_node("onnx.Relu", [n.outputs[0]], [f32(2)], name="r")
    assert n.successors == [m] and m.predecessors == [n]
    g.remove_node(m)
    g.remove_node(n)
    assert x.uses == []


def test_multi_output_names_and_indices():
    g = Graph()
    x = g.add_input("x", f32(4))
    n = g.add_node("graphir.split", [x], [f32(2), f32(2)], name="s", params={"axis": 0})
    assert [v.name for v in n.outputs] == ["s", "s#1"]
    assert [v.output_index for v in n.outputs] == [0, 1]
    named = g.add_node("graphir.split", [x], [f32(2), f32(2)], output_names=["lo", "hi"])
    assert named.name == "lo" and [v.name for v in named.outputs] == ["lo", "hi"]
    with pytest.raises(ValueError, match="2 output names for 1 outputs"):
        g.add_node("onnx.Relu", [x], [f32(4)], output_names=["a", "b"])


def test_unique_names_for_nodes_and_values():
    g = Graph()
    x = g.add_input("x", f32(2))
    a = g.add_node("onnx.Relu", [x], [f32(2)])
    b = g.add_node("onnx.Relu", [x], [f32(2)])
    c = g.add_node("onnx.Relu", [x], [f32(2)], name="relu")
    assert [a.name, b.name, c.name] == ["relu", "relu_1", "relu_2"]
    assert len({v.name for v in g.values}) == len(list(g.values))
    # A node name may coincide with a value name in the other namespace.
    d = g.add_node("onnx.Relu", [x], [f32(2)], name="x")
    assert d.name == "x" and d.outputs[0].name == "x_1"
    assert g.unique_name("relu") == "relu_3"
    assert g.unique_name("fresh") == "fresh"


def test_duplicate_value_name_rejected():
    g = Graph()
    g.add_input("x", f32(2))
    with pytest.raises(ValueError, match="already defined"):
        g.add_input("x", f32(2))
    with pytest.raises(ValueError, match="already defined"):
        g.add_node("onnx.Relu", [g.value("x")], [f32(2)], output_names=["x"])


def test_foreign_input_rejected():
    g, h = Graph("g"), Graph("h")
    x = h.add_input("x", f32(2))
    with pytest.raises(ValueError, match="not a value of graph 'g'"):
        g.add_node("onnx.Relu", [x], [f32(2)])
    assert x.uses == []


# ----------------------------------------------------------------------------- removal


def test_remove_node_keeps_use_lists_exact(chain):
    module, a, b, c = chain
    g = module.graph
    extra = g.add_node("onnx.Add", [a.outputs[0], a.outputs[0]], [f32(4)], name="extra")
    assert _uses(a.outputs[0]) == [("b", 0), ("extra", 0), ("extra", 1)]
    g.remove_node(extra)
    assert _uses(a.outputs[0]) == [("b", 0)]
    assert extra.graph is None and "extra" not in [n.name for n in g.nodes]
    assert g.get_value("extra") is None and g.get_node("extra") is None
    _check_use_lists(g)
    # Its names are free again.
    again = g.add_node("onnx.Relu", [a.outputs[0]], [f32(4)], name="extra")
    assert again.name == "extra" and again.outputs[0].name == "extra"


def test_remove_used_node_fails_and_changes_nothing(chain):
    module, a, b, c = chain
    g = module.graph
    version = g._version
    with pytest.raises(ValueError, match="'a'.*used by b"):
        g.remove_node(a)
    with pytest.raises(ValueError, match="graph output"):
        g.remove_node(c)
    assert a in g and c in g and g._version == version
    assert _uses(g.value("x")) == [("a", 0)]
    with pytest.raises(ValueError, match="not in graph"):
        Graph("other").remove_node(a)


def test_remove_value():
    g = Graph()
    x = g.add_input("x", f32(2))
    w = g.add_constant("w", f32(2))
    n = g.add_node("onnx.Relu", [x], [f32(2)])
    g.remove_value(w)
    assert g.constants == [] and g.get_value("w") is None
    with pytest.raises(ValueError, match="still used"):
        g.remove_value(x)
    g.remove_node(n)
    g.remove_value(x)
    assert g.inputs == []


# ----------------------------------------------------------------------------- rewiring


def test_replace_all_uses_with_including_outputs(chain):
    module, a, b, c = chain
    g = module.graph
    new = g.add_node("onnx.Sigmoid", [a.outputs[0]], [f32(4)], name="new")
    g.set_outputs([b.outputs[0], c.outputs[0]])
    b.outputs[0].replace_all_uses_with(new.outputs[0])
    assert b.outputs[0].uses == []
    assert c.inputs == [new.outputs[0]]
    assert _uses(new.outputs[0]) == [("c", 0)]
    assert g.outputs == [new.outputs[0], c.outputs[0]]
    _check_use_lists(g)
    g.remove_node(b)  # now dead: removable
    assert [n.name for n in g.index().nodes] == ["a", "new", "c"]


def test_replace_all_uses_with_itself_is_a_no_op(chain):
    module, a, b, c = chain
    v = a.outputs[0]
    v.replace_all_uses_with(v)
    assert _uses(v) == [("b", 0)]


def test_replace_all_uses_with_when_used_twice():
    g = Graph()
    x = g.add_input("x", f32(2))
    y = g.add_input("y", f32(2))
    n = g.add_node("onnx.Mul", [x, x], [f32(2)], name="sq")
    x.replace_all_uses_with(y)
    assert n.inputs == [y, y] and x.uses == [] and _uses(y) == [("sq", 0), ("sq", 1)]


def test_set_input_and_add_input(chain):
    module, a, b, c = chain
    g = module.graph
    x = g.value("x")
    version = g._version
    c.set_input(0, a.outputs[0])
    assert g._version > version
    assert c.inputs == [a.outputs[0]]
    assert b.outputs[0].uses == []
    assert _uses(a.outputs[0]) == [("b", 0), ("c", 0)]
    c.add_input(x)
    assert c.inputs == [a.outputs[0], x]
    assert _uses(x) == [("a", 0), ("c", 1)]
    _check_use_lists(g)


def test_mutations_bump_the_structural_version(chain):
    module, a, b, c = chain
    g = module.graph
    seen = [g._version]

    def bumped():
        seen.append(g._version)
        return seen[-1] > seen[-2]

    n = g.add_node("onnx.Relu", [c.outputs[0]], [f32(4)], name="d")
    assert bumped()
    g.set_outputs(n.outputs)
    assert bumped()
    g.add_constant("k", f32(1))
    assert bumped()
    g.remove_value(g.value("k"))
    assert bumped()
    n.outputs[0].replace_all_uses_with(c.outputs[0])
    assert bumped()
    g.remove_node(n)
    assert bumped()


# ----------------------------------------------------------------------------- annotations


def test_typed_annotation_accessors(chain):
    _, a, _, _ = chain
    a.cost = 41.5e-6
    assert a.cost == Cost.of(41.5e-6)
    a.cost = {"V100": 1e-5, "P100": 2e-5}
    assert a.cost.time("P100") == 2e-5 and a.cost.time("T4") is None
    a.mem = Mem(persistent=10, activation=2)
    a.affinity = ["cpu", "V100"]
    assert a.affinity == ("cpu", "V100")
    a.group, a.colocate, a.device, a.order = 3, "k", "gpu0", 0
    a.kernel = "k7"
    a.start, a.finish = 1, 2.5
    assert isinstance(a.start, float) and a.finish == 2.5 and a.kernel == "k7"
    assert sorted(a.annotations) == [
        "affinity", "colocate", "cost", "device", "finish", "group", "kernel", "mem", "order", "start",
    ]  # fmt: skip


def test_annotations_view_is_read_only(chain):
    _, a, _, _ = chain
    with pytest.raises(TypeError):
        a.annotations["group"] = "not an int"  # type: ignore[index]


def test_cost_lookup_falls_back_to_default():
    cost = Cost({"default": 3.0, "V100": 1.0})
    assert cost.time("V100") == 1.0 and cost.time("P100") == 3.0 and cost.time() == 3.0
    assert Cost({"V100": 1.0}).default == 1.0
    assert Cost(()).default == 0.0


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("group", -1),
        ("group", "3"),
        ("group", True),
        ("group", 1.0),
        ("order", -2),
        ("device", ""),
        ("device", 3),
        ("colocate", ""),
        ("start", "1us"),
        ("finish", True),
        ("cost", -1e-6),
        ("cost", "fast"),
        ("cost", {"V100": -1}),
        ("mem", 1024),
        ("affinity", "cpu"),
        ("affinity", ["cpu", ""]),
    ],
)
def test_bad_annotation_values_raise(chain, key, value):
    _, a, _, _ = chain
    with pytest.raises(ValueError):
        a.set_annotation(key, value)
    assert key not in a.annotations


@pytest.mark.parametrize(("key", "value"), [("cost", float("inf")), ("start", float("nan")), ("finish", float("inf"))])
def test_non_finite_times_rejected(chain, key, value):
    _, a, _, _ = chain
    with pytest.raises(ValueError):
        a.set_annotation(key, value)


def test_mem_fields_must_be_non_negative():
    with pytest.raises(ValueError):
        Mem(persistent=-1)


def test_unknown_annotation_key(chain):
    _, a, _, _ = chain
    with pytest.raises(KeyError, match="unknown annotation 'colour'"):
        a.set_annotation("colour", "red")


def test_deleting_annotations(chain):
    module, a, _, _ = chain
    g = module.graph
    a.device = "gpu0"
    a.group = 2
    version = g._annotation_version
    del a.device
    assert a.device is None and "device" not in a.annotations
    assert g._annotation_version > version
    version = g._annotation_version
    a.del_annotation("device")  # absent: nothing happens
    assert g._annotation_version == version
    a.group = None  # None deletes
    assert "group" not in a.annotations and g._annotation_version > version
    a.cost = 1.0
    a.clear_annotations()
    assert dict(a.annotations) == {}


def test_annotation_change_refreshes_annotation_arrays_but_keeps_topology(chain):
    module, a, b, c = chain
    g = module.graph
    index = g.index()
    assert list(index.groups()) == [-1, -1, -1]
    assert np.isnan(index.times()).all()
    structural = g._version
    b.group = 5
    a.cost = 2.0
    assert g._version == structural
    assert g.index() is index  # topology and CSR are not rebuilt
    assert list(index.groups()) == [-1, 5, -1]
    assert index.times()[0] == 2.0
    a.mem = Mem(persistent=64)
    assert list(index.persistent_bytes()) == [64, 0, 0]
    # Removing an annotation refreshes too.
    del b.group
    assert list(index.groups()) == [-1, -1, -1]
    assert g.index() is index


def test_module_cluster_resolution():
    g = Graph()
    module = Module("m", g)
    assert module.cluster.spec == "4xV100" and len(module.cluster.devices) == 4
    module.cluster_spec = "2xA100-nvlink"
    assert module.cluster.device_names == ("gpu0", "gpu1")
    assert module.cluster.device("gpu1").kind == "A100"
    assert module.cluster.link("gpu0", "gpu1").bandwidth == 50e9


def test_annotate_sets_a_column_as_set_annotation_would(chain):
    graph = chain[0].graph
    nodes = list(graph.nodes)
    version = graph._annotation_version
    assert graph.annotate("group", nodes, [k % 2 for k in range(len(nodes))]) == len(nodes)
    assert [n.group for n in nodes] == [k % 2 for k in range(len(nodes))]
    assert graph._annotation_version == version + 1
    # The same values again change nothing and leave the version alone.
    assert graph.annotate("group", nodes, [k % 2 for k in range(len(nodes))]) == 0
    assert graph._annotation_version == version + 1
    # None removes; values are checked by the declaration; unknown keys are refused.
    assert graph.annotate("group", nodes[:1], [None]) == 1
    assert nodes[0].group is None
    with pytest.raises(ValueError):
        graph.annotate("device", nodes[:1], [""])
    with pytest.raises(KeyError):
        graph.annotate("no-such-key", nodes[:1], [1])


def test_control_edges_on_nodes_that_share_the_empty_control_lists():
    # Nodes without control edges share one empty tuple; the first edge must give each end its own
    # list, so an edge added to one node never shows up on another.
    g = Graph()
    x = g.add_input("x", f32(1))
    a, b, c = (g.add_node("test.op", [x], [f32(1)], name=name) for name in "abc")
    assert a.control_inputs == () and b.control_users == ()
    b.add_control_input(a)
    assert list(b.control_inputs) == [a] and list(a.control_users) == [b]
    assert len(c.control_inputs) == 0 and len(c.control_users) == 0
    assert len(a.control_inputs) == 0 and len(b.control_users) == 0
    c.add_control_input(a)
    assert list(a.control_users) == [b, c] and list(c.control_inputs) == [a]
    with pytest.raises(ValueError, match="'a' has no control input 'c'"):
        a.remove_control_input(c)
    b.remove_control_input(a)
    assert len(b.control_inputs) == 0 and list(a.control_users) == [c]
    g.remove_node(b)
    c.remove_control_input(a)
    g.remove_node(c)
    assert len(a.control_users) == 0


def test_add_control_inputs_in_bulk_skips_duplicates_and_refuses_other_graphs() -> None:
    from graphir.ir import Graph

    graph = Graph("g")
    scalar = TensorType(DType.F32, ())
    a, b, c = (graph.add_node("tf.NoOp", [], [scalar], name=n) for n in "abc")
    c.add_control_input(a)
    c.add_control_inputs([a, b, b, a])
    assert c.control_inputs == [a, b]
    assert a.control_users == [c] and b.control_users == [c]
    other = Graph("h").add_node("tf.NoOp", [], [scalar], name="x")
    with pytest.raises(ValueError, match="control input 'x' of 'c' is not in the same graph"):
        c.add_control_inputs([other])


# ----------------------------------------------------------------------------- copies and release


def _fan_in(width: int) -> Module:
    """A constant, ``width`` relus of it, and a sink waiting on all of them (data into one, control from all)."""
    graph = Graph()
    weight = graph.add_constant("w", f32(4), None)
    relus = [graph.add_node("onnx.Relu", [weight], [f32(4)], name=f"r{k}") for k in range(width)]
    sink = graph.add_node("onnx.Identity", [relus[0].outputs[0]], [f32(4)], name="sink")
    sink.add_control_inputs(relus)
    relus[1].cost = Cost({"V100": 1e-3})
    relus[2].mem = Mem(persistent=16)
    relus[3].colocate = "c"
    graph.set_outputs([sink.outputs[0]])
    return Module("m", graph, "4xV100")


def test_clone_keeps_names_edges_control_lists_and_annotations():
    from graphir.clone import clone_module
    from graphir.printer import print_module

    module = _fan_in(3000)  # one call per node's control inputs: no quadratic re-check of the list
    clone = clone_module(module)
    assert print_module(clone) == print_module(module)
    assert [n.name for n in clone.graph.nodes] == [n.name for n in module.graph.nodes]
    sink = clone.graph.node("sink")
    assert [c.name for c in sink.control_inputs] == [f"r{k}" for k in range(3000)]
    assert all(r.graph is clone.graph for r in sink.control_inputs)
    assert clone.graph.node("r7").control_users == [sink]
    _check_use_lists(clone.graph)
    from graphir.verifier import _check_uses

    assert clone.graph._uses_exact_version == clone.graph._version  # the verifier skips them: checked here
    _check_uses(clone.graph)
    assert clone.graph.may_hold("cost") and not clone.graph.may_hold("device")
    assert clone.graph.index().num_edges == module.graph.index().num_edges


def test_add_copy_takes_the_checked_path_when_a_name_is_taken():
    from graphir.clone import add_copy

    module = _fan_in(4)
    graph, relu = module.graph, module.graph.node("r1")
    copy = add_copy(graph, relu, "r1", ["fresh"], [f32(4)], {}, {"cost": Cost({"V100": 2e-3})})
    assert copy.name == "r1_1" and copy.outputs[0].name == "fresh"  # add_node's unique node name
    assert copy.cost == Cost({"V100": 2e-3})
    with pytest.raises(ValueError, match="already defined"):
        add_copy(graph, relu, "other", ["r2"], [f32(4)], {}, {})  # a result name is never renamed


def test_release_frees_a_graph_without_the_cyclic_collector():
    import gc

    from graphir.clone import clone_module

    module = _fan_in(50)
    module.graph.index().quotient()  # the cached array views must not hold the nodes either
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        clone = clone_module(module)
        clone.graph.index().quotient()
        clone.graph.release()
        assert len(clone.graph) == 0 and clone.graph.outputs == []
        del clone
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        leaked = [o for o in gc.garbage if isinstance(o, (Node, Value, Graph))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()
    assert leaked == []
    assert len(module.graph) == 51  # the original is untouched
