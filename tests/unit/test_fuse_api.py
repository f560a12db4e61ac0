"""One fusion API (issue 13 item 2): ``fuse{algo=...}`` resolves a registered algorithm with its own options."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import ClassVar

import numpy as np
import pytest

from graphir.driver.opt import list_passes
from graphir.errors import PassError, PassOptionError
from graphir.ir import Graph, Module
from graphir.pass_infra import PassContext
from graphir.passes.fuse import (
    FUSIONS,
    AcyclicBatch,
    Colocation,
    CpdTopo,
    Fuse,
    FusionAlgorithm,
    FusionProblem,
    Grouping,
    Rules,
    register_fusion,
)
from graphir.pipeline import parse_pipeline
from graphir.types import DType, TensorType


def _chain(num_nodes: int) -> Module:
    """A chain of ``num_nodes`` ops, 1 µs each, every edge one 1 KiB value."""
    graph = Graph()
    value = graph.add_input("x", TensorType(DType.F32, (256,)))
    for k in range(num_nodes):
        node = graph.add_node("t.Op", [value], [TensorType(DType.F32, (256,))], name=f"n{k}")
        node.cost = 1e-6
        value = node.outputs[0]
    graph.set_outputs([value])
    return Module("m", graph, "2xV100")


def _groups(module: Module) -> list[int]:
    return module.graph.index().groups().tolist()


def test_every_builtin_algorithm_is_registered_with_its_own_options() -> None:
    assert {name: cls for name, cls in FUSIONS.items() if cls.__module__ == "graphir.passes.fuse"} == {
        "cpd-topo": CpdTopo,
        "rules": Rules,
        "acyclic-batch": AcyclicBatch,
        "colocation": Colocation,
    }
    fields = {name: [f.name for f in dataclasses.fields(cls)] for name, cls in FUSIONS.items()}
    assert fields["cpd-topo"] == ["window", "mem_cap"]
    assert fields["rules"] == ["rules"]
    assert fields["acyclic-batch"] == ["target"]
    assert fields["colocation"] == []
    assert [f.name for f in dataclasses.fields(Fuse)] == ["algo", "kind", "fuser"]


def test_defaults_are_unchanged() -> None:
    assert Fuse() == Fuse("cpd-topo", "", CpdTopo(window=200, mem_cap=0.25))
    assert parse_pipeline("fuse") == [Fuse()]
    (batch,) = parse_pipeline("fuse{algo=acyclic-batch}")
    assert batch == Fuse.of("acyclic-batch", target=200)
    assert parse_pipeline("fuse{algo=rules}") == [Fuse("rules", "", Rules(rules=""))]


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("fuse{algo=cpd-topo}", "fuse"),
        ("fuse{algo=cpd-topo window=200 mem-cap=0.25}", "fuse"),
        ("fuse{algo=cpd-topo window=4}", "fuse{window=4}"),
        ("fuse{algo=cpd-topo window=16 kind=gpu mem-cap=1e9}", "fuse{kind=gpu window=16 mem-cap=1000000000.0}"),
        ("fuse{algo=acyclic-batch target=150}", "fuse{algo=acyclic-batch target=150}"),
        ("fuse{algo=rules rules=dir/my-rules.toml}", "fuse{algo=rules rules=dir/my-rules.toml}"),
        ("fuse{algo=colocation}", "fuse{algo=colocation}"),
    ],
)
def test_pipeline_strings_parse_and_print_back(text: str, spec: str) -> None:
    (fuse,) = parse_pipeline(text)
    assert fuse.spec() == spec
    assert parse_pipeline(spec) == [fuse]


def test_an_option_of_another_algorithm_is_a_caret_error_at_parse_time() -> None:
    with pytest.raises(PassOptionError) as caught:
        parse_pipeline("fuse{algo=cpd-topo target=5}")
    message = (
        "unknown option 'target' for fuse{algo=cpd-topo} (cpd-topo options: window, mem-cap; fuse options: algo, kind)"
    )
    lines = caught.value.render().splitlines()
    assert lines[0] == f"<pipeline>:1:20: error: {message}"
    assert lines[1:] == ["fuse{algo=cpd-topo target=5}", " " * 19 + "^"]
    with pytest.raises(PassOptionError, match=r"for fuse\{algo=cpd-topo\} \(cpd-topo options: window, mem-cap;"):
        parse_pipeline("fuse{target=5}")  # the default algorithm
    with pytest.raises(PassOptionError, match=r"1:22: error: unknown option 'window' for fuse\{algo=colocation\} "):
        parse_pipeline("fuse{algo=colocation window=3}")
    with pytest.raises(PassOptionError, match=r"1:11: error: unknown fusion algorithm 'greedy' for pass 'fuse'"):
        parse_pipeline("fuse{algo=greedy}")


def test_of_builds_the_algorithm_and_rejects_foreign_options() -> None:
    assert Fuse.of("acyclic-batch", target=3) == Fuse("acyclic-batch", "", AcyclicBatch(target=3))
    assert Fuse.of(kind="gpu", window=4) == Fuse("cpd-topo", "gpu", CpdTopo(window=4))
    with pytest.raises(TypeError, match=r"option 'mem-cap' does not apply to algo=rules \(rules options: rules;"):
        Fuse.of("rules", mem_cap=1.0)
    with pytest.raises(ValueError, match="unknown fusion algorithm 'greedy'"):
        Fuse.of("greedy")
    with pytest.raises(ValueError, match="given for algo=rules"):
        Fuse("rules", "", CpdTopo())


def test_bad_values_are_errors_when_the_pass_runs() -> None:
    module = _chain(4)
    with pytest.raises(PassError, match="window must be at least 1, got 0"):
        Fuse.of(window=0).run(module, PassContext())
    with pytest.raises(PassError, match="mem-cap must be positive"):
        Fuse.of(mem_cap=0.0).run(module, PassContext())
    with pytest.raises(PassError, match="target must be at least 1, got 0"):
        Fuse.of("acyclic-batch", target=0).run(module, PassContext())
    assert all(node.group is None for node in module.graph.nodes)


def test_parsed_and_constructed_passes_fuse_alike() -> None:
    for text, built in [
        ("fuse{algo=cpd-topo window=3}", Fuse.of("cpd-topo", window=3)),
        ("fuse{algo=acyclic-batch target=2}", Fuse.of("acyclic-batch", target=2)),
    ]:
        parsed, constructed = _chain(9), _chain(9)
        (fuse,) = parse_pipeline(text)
        stats = fuse.run(parsed, PassContext()).stats
        assert stats == built.run(constructed, PassContext()).stats
        assert _groups(parsed) == _groups(constructed)
    assert max(_groups(parsed)) + 1 == 2


@dataclasses.dataclass(frozen=True)
class _Pairs(FusionAlgorithm):
    """Fuse consecutive pairs of the chain (a test plugin).

    Options:
        stride: nodes per group.
    """

    name: ClassVar[str] = "test-pairs"
    stride: int = 2

    def fuse(self, problem: FusionProblem) -> Grouping:
        """Coarse node k joins group k // stride (the chain's order is its index order)."""
        return np.arange(problem.graph.num_nodes) // self.stride, {"stride": self.stride}


@pytest.fixture
def pairs() -> Iterator[type[_Pairs]]:
    register_fusion(_Pairs)
    try:
        yield _Pairs
    finally:
        del FUSIONS[_Pairs.name]


def test_a_plugin_algorithm_is_parsed_listed_and_run(pairs: type[_Pairs]) -> None:
    (fuse,) = parse_pipeline("fuse{algo=test-pairs stride=3}")
    assert fuse == Fuse("test-pairs", "", pairs(stride=3))
    assert fuse.spec() == "fuse{algo=test-pairs stride=3}"
    module = _chain(7)
    stats = fuse.run(module, PassContext()).stats
    assert stats["stride"] == 3 and stats["nodes-after"] == 3
    assert _groups(module) == [0, 0, 0, 1, 1, 1, 2]
    assert "    algo=test-pairs: Fuse consecutive pairs of the chain (a test plugin).\n        stride: int = 2\n" in (
        list_passes()
    )


def test_an_algorithm_option_may_not_shadow_a_pass_option() -> None:
    @dataclasses.dataclass(frozen=True)
    class _Shadow(FusionAlgorithm):
        name: ClassVar[str] = "test-shadow"
        kind: str = ""

    with pytest.raises(TypeError, match="options named like options of pass 'fuse': kind"):
        register_fusion(_Shadow)
    assert "test-shadow" not in FUSIONS


def test_list_passes_shows_each_algorithm_with_its_options() -> None:
    text = list_passes()
    fuse = text[text.index("fuse: ") : text.index("\nos-dpos: ")] + "\n"
    assert '    algo: str = cpd-topo\n    kind: str = ""\n' in fuse
    assert "    algo=cpd-topo: Celeritas Algorithm 1" in fuse
    assert "        window: int = 200\n        mem-cap: float = 0.25\n" in fuse
    assert "    algo=acyclic-batch: Pesto's cycle-free batch merging, down to a target node count.\n" in fuse
    assert "        target: int = 200\n" in fuse
    assert '        rules: str = ""\n' in fuse
    assert "    algo=colocation: " in fuse
