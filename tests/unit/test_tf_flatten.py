"""The TF importer's flattening of a graph without function calls: the same flat graph and errors as inlining.

A GraphDef that calls no function (most frozen graphs) is copied whole and only its inputs are
checked and normalised (``_Flattener._copy_flat``); any other goes through the inliner
(``_Flattener._inline``). On a graph without calls both must give the same GraphDef, byte for
byte, and the same first error.
"""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")

from tensorflow.core.framework import graph_pb2  # noqa: E402

from graphir.errors import ImportError_  # noqa: E402
from graphir.importers.tf_inline import _Flattener  # noqa: E402


def _graph(*nodes: tuple[str, str, list[str]], device: str = "") -> graph_pb2.GraphDef:
    graph = graph_pb2.GraphDef()
    graph.versions.producer = 1286
    for name, op, inputs in nodes:
        node = graph.node.add(name=name, op=op, device=device)
        node.input.extend(inputs)
        node.attr["T"].type = 1
    return graph


def _outcome(graph: graph_pb2.GraphDef, fast: bool) -> tuple[bytes | None, str | None]:
    flattener = _Flattener(graph, "g.pb")
    try:
        flat = flattener._copy_flat() if fast else flattener._inline()
    except ImportError_ as exc:
        return None, f"{exc.message} @ {exc.loc.node}"
    return flat.SerializeToString(deterministic=True), None


CASES = {
    "plain": _graph(("a", "Const", []), ("b", "Identity", ["a"]), ("c", "AddV2", ["a", "b:0"])),
    "several outputs": _graph(("a", "Split", []), ("b", "AddV2", ["a:1", "a:0"]), ("c", "Identity", ["b"])),
    "control inputs": _graph(("a", "Const", []), ("b", "NoOp", ["^a", "^a"]), ("c", "Identity", ["a", "^b", "^a"])),
    "control first": _graph(("a", "Const", []), ("b", "Const", []), ("c", "Identity", ["^b", "a"])),
    "forward use": _graph(("b", "Identity", ["a"]), ("a", "Const", [])),
    "devices": _graph(("a", "Const", []), ("b", "Identity", ["a"]), device="/cpu:0"),
    "twice": _graph(("a", "Const", []), ("a", "Const", []), ("b", "Identity", ["zz"])),
    "undefined": _graph(("a", "Const", []), ("b", "AddV2", ["a", "zz:2"])),
    "undefined control": _graph(("a", "Const", []), ("b", "Identity", ["a", "^zz"])),
    "both undefined": _graph(("a", "Const", []), ("b", "Identity", ["^zz", "yy"])),
    "odd reference": _graph(("a:b", "Const", []), ("c", "Identity", ["a:b"])),
    "empty": _graph(),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_copy_and_inlining_agree(case):
    graph = CASES[case]
    before = graph.SerializeToString(deterministic=True)
    assert _outcome(graph, fast=True) == _outcome(graph, fast=False)
    assert graph.SerializeToString(deterministic=True) == before  # the input is not modified


def test_a_graph_without_calls_takes_the_copy():
    graph = CASES["control inputs"]
    flattener = _Flattener(graph, "g.pb")
    flattener._inline = None  # type: ignore[method-assign]  # would fail if called
    flat = flattener.run()
    assert [list(node.input) for node in flat.node] == [[], ["^a"], ["a", "^b", "^a"]]
    assert _outcome(CASES["undefined"], fast=True)[1] == "uses undefined value 'zz:2' @ b"
    assert _outcome(CASES["both undefined"], fast=True)[1] == "uses undefined value 'yy' @ b"


def test_the_names_the_converter_builds_unchecked_are_free():
    # tf_convert builds each node with add_node_unchecked under its TF name and its results under
    # "name", "name#1", ...: that holds because a name defined twice and a name with '#' never
    # reach it.
    from graphir.importers.tf import import_graphdef

    for names, message in ((["a", "a"], "node name defined twice"), (["a#1"], "invalid characters")):
        graph = graph_pb2.GraphDef()
        for name in names:
            node = graph.node.add(name=name, op="Const")
            node.attr["dtype"].type = 1
            node.attr["value"].tensor.dtype = 1
            node.attr["value"].tensor.float_val.append(1.0)
        with pytest.raises(ImportError_, match=message):
            import_graphdef(graph, name="m", source="g.pb")
