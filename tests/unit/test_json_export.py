"""``--emit=json``: the neutral cost-graph interchange file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import f32

from graphir.annotations import Cost, Mem
from graphir.backends.json_export import cost_graph, export_json
from graphir.cluster import load_cluster_toml
from graphir.ir import Graph, Module
from graphir.parser import parse_module
from graphir.printer import print_module


def _documented_schema() -> dict[str, list[str]]:
    """Key lists of the schema block in the module docstring of backends/json_export.py."""
    import re

    import graphir.backends.json_export as json_export

    doc = json_export.__doc__ or ""
    schema = {"top": re.findall(r'^\s*[{ ]\s*"(\w+)":', doc, flags=re.MULTILINE)}
    for section in ("nodes", "edges", "devices", "links"):
        match = re.search(rf'"{section}": \[\{{([^}}]*)\}}\]', doc)
        assert match, section
        schema[section] = re.findall(r'"(\w+)"', match.group(1))
    return schema


SCHEMA = _documented_schema()
TOP_KEYS = SCHEMA["top"]
NODE_KEYS = SCHEMA["nodes"]
EDGE_KEYS = SCHEMA["edges"]
DEVICE_KEYS = SCHEMA["devices"]
LINK_KEYS = SCHEMA["links"]


def test_documented_schema_is_the_expected_one():
    assert TOP_KEYS == ["graph", "nodes", "edges", "devices", "links", "makespan"]
    assert NODE_KEYS == ["id", "op", "time", "times", "mem", "out_bytes", "group", "device", "order"]
    assert EDGE_KEYS[:3] == ["src", "dst", "bytes"]
    assert DEVICE_KEYS == ["name", "kind", "memory"]
    assert LINK_KEYS == ["src", "dst", "latency", "bandwidth"]


CLUSTER_TOML = """\
[[device]]
name = "gpu0"
kind = "V100"
memory = "16GiB"

[[device]]
name = "cpu0"
kind = "cpu"
tf_device = "/device:CPU:0"
memory = 1024

[[link]]
src = "gpu0"
dst = "cpu0"
latency = 2e-5
bandwidth = 1e9
bidirectional = false
"""


@pytest.fixture
def hetero(tmp_path: Path):
    path = tmp_path / "cluster.toml"
    path.write_text(CLUSTER_TOML)
    return load_cluster_toml(path)


@pytest.fixture
def module():
    """s splits x into 8 B and 16 B; l = f(s); r = g(s#1, s#1); j = h(l, r); k = add(s, s#1)."""
    g = Graph()
    x = g.add_input("x", f32(6))
    s = g.add_node("test.split", [x], [f32(2), f32(4)], name="s")
    s0, s1 = s.outputs
    l_ = g.add_node("test.f", [s0], [f32(2)], name="l")
    r = g.add_node("test.g", [s1, s1], [f32(4)], name="r")
    j = g.add_node("test.h", [l_.outputs[0], r.outputs[0]], [f32(8)], name="j")
    k = g.add_node("test.add", [s0, s1], [f32(1)], name="k")
    g.set_outputs([j.outputs[0], k.outputs[0]])
    return Module("net", g, "2xV100")


def test_schema_keys_exactly(module):
    module.graph.node("s").cost = 1e-6
    data = json.loads(export_json(module))
    assert list(data) == TOP_KEYS
    assert all(list(node) == NODE_KEYS for node in data["nodes"])
    assert all(list(edge) == EDGE_KEYS for edge in data["edges"])
    assert all(list(device) == DEVICE_KEYS for device in data["devices"])
    assert all(list(link) == LINK_KEYS for link in data["links"])
    assert data["graph"] == "net"
    assert data["edges"] and data["nodes"] and data["devices"] and data["links"]


def test_node_ids_unique_and_topological(module):
    data = cost_graph(module)
    ids = [node["id"] for node in data["nodes"]]
    assert ids == ["s", "l", "r", "j", "k"]
    assert len(set(ids)) == len(ids)
    position = {name: k for k, name in enumerate(ids)}
    assert all(position[e["src"]] < position[e["dst"]] for e in data["edges"])


def test_control_edges(module):
    g = module.graph
    g.node("k").add_control_input(g.node("l"))  # control only: l -> k
    g.node("j").add_control_input(g.node("r"))  # control beside data: r -> j
    edges = {(e["src"], e["dst"]): e for e in cost_graph(module)["edges"]}
    assert len(edges) == 6
    assert edges[("l", "k")]["bytes"] == 0 and edges[("l", "k")]["control"] is True
    assert edges[("r", "j")]["bytes"] == 16 and edges[("r", "j")]["control"] is False
    assert edges[("s", "k")]["control"] is False


def test_edges_aggregate_bytes_per_node_pair(module):
    edges = {(e["src"], e["dst"]): e["bytes"] for e in cost_graph(module)["edges"]}
    assert edges == {
        ("s", "l"): 8,
        ("s", "r"): 16,  # s#1 used twice by r: counted once
        ("s", "k"): 24,  # two values on one pair: one edge with their total
        ("l", "j"): 8,
        ("r", "j"): 16,
    }
    assert len(cost_graph(module)["edges"]) == 5


def test_node_fields(module):
    s, r = module.graph.node("s"), module.graph.node("r")
    s.cost = 3e-6
    s.mem = Mem(persistent=100, activation=24)
    s.group, s.device, s.order = 2, "gpu1", 0
    nodes = {node["id"]: node for node in cost_graph(module)["nodes"]}
    assert nodes["s"] == {
        "id": "s",
        "op": "test.split",
        "time": 3e-6,
        "times": {"gpu0": 3e-6, "gpu1": 3e-6},
        "mem": 100,
        "out_bytes": 24,
        "group": 2,
        "device": "gpu1",
        "order": 0,
    }
    assert nodes["r"]["time"] is None and nodes["r"]["times"] is None and nodes["r"]["mem"] is None
    assert r.cost is None and nodes["k"]["out_bytes"] == 4


def test_times_per_device_on_a_heterogeneous_cluster(module, hetero):
    module.set_cluster(hetero)
    g = module.graph
    g.node("s").cost = Cost({"V100": 1e-6, "cpu": 5e-5})
    g.node("l").cost = Cost({"default": 2e-6, "cpu": 9e-6})
    g.node("r").cost = Cost({"cpu": 7e-6})  # nothing for V100 and no default
    data = cost_graph(module)
    nodes = {node["id"]: node for node in data["nodes"]}
    assert nodes["s"]["times"] == {"gpu0": 1e-6, "cpu0": 5e-5} and nodes["s"]["time"] == 1e-6
    assert nodes["l"]["times"] == {"gpu0": 2e-6, "cpu0": 9e-6} and nodes["l"]["time"] == 2e-6
    assert nodes["r"]["times"] == {"gpu0": None, "cpu0": 7e-6} and nodes["r"]["time"] is None
    assert data["devices"] == [
        {"name": "gpu0", "kind": "V100", "memory": 16 << 30},
        {"name": "cpu0", "kind": "cpu", "memory": 1024},
    ]
    assert data["links"] == [
        {"src": "gpu0", "dst": "cpu0", "latency": 2e-5, "bandwidth": 1e9},
        {"src": "cpu0", "dst": "gpu0", "latency": 10e-6, "bandwidth": 12e9},  # default link
    ]


def test_links_cover_every_ordered_pair(module):
    module.cluster_spec = "3xA100-nvlink"
    links = cost_graph(module)["links"]
    assert {(link["src"], link["dst"]) for link in links} == {
        (a, b) for a in ("gpu0", "gpu1", "gpu2") for b in ("gpu0", "gpu1", "gpu2") if a != b
    }
    assert {(link["latency"], link["bandwidth"]) for link in links} == {(5e-6, 50e9)}


def test_makespan_from_finish_annotations(module):
    assert cost_graph(module)["makespan"] is None
    g = module.graph
    g.node("s").start, g.node("s").finish = 0.0, 1e-6
    g.node("j").finish = 7.5e-6
    g.node("k").finish = 3e-6
    assert cost_graph(module)["makespan"] == 7.5e-6
    g.node("l").finish = 0.0
    assert cost_graph(module)["makespan"] == 7.5e-6


def test_output_is_compact_deterministic_json(module):
    g = module.graph
    g.node("s").cost = Cost({"V100": 1e-6, "P100": 2e-6})
    g.node("j").finish = 1e-3
    first = export_json(module)
    assert first.endswith("}\n") and first.count("\n") == 1 and ": " not in first and ", " not in first
    assert export_json(module) == first
    # A re-parsed copy (fresh objects, same text) exports byte-identically too.
    again = parse_module(print_module(module))
    assert export_json(again) == first


def test_empty_graph():
    data = cost_graph(Module("empty", Graph(), "1xT4"))
    assert data["nodes"] == [] and data["edges"] == [] and data["makespan"] is None
    assert data["links"] == [] and [d["kind"] for d in data["devices"]] == ["T4"]
