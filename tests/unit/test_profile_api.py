"""One profiler API (issue 13 item 2): ``profile{mode=...}`` resolves a registered mode with its own options."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import ClassVar

import pytest

from graphir.annotations import Cost, Mem
from graphir.driver.opt import list_passes
from graphir.errors import PassError, PassOptionError
from graphir.ir import Graph, Module
from graphir.pass_infra import PassContext, PassResult, providers_of
from graphir.passes.profile import (
    MODES,
    Analytical,
    OnnxRuntime,
    Profile,
    ProfileMode,
    register_profile_mode,
)
from graphir.passes.profile.cost_table import CostTable
from graphir.passes.profile.standard_eval import StandardEval
from graphir.passes.profile.tf import Regression, Tf
from graphir.passes.profile.tf_run import TfRun
from graphir.pipeline import parse_pipeline
from graphir.printer import print_module
from graphir.types import DType, TensorType


def _mlp() -> Module:
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.F32, (8, 16)))
    w = graph.add_input("w", TensorType(DType.F32, (16, 4)))
    y = graph.add_node("onnx.MatMul", [x, w], [TensorType(DType.F32, (8, 4))], name="mm")
    z = graph.add_node("onnx.Relu", [y.outputs[0]], [TensorType(DType.F32, (8, 4))], name="relu")
    graph.set_outputs(z.outputs)
    return Module("m", graph, "2xV100")


def test_every_builtin_mode_is_registered_with_its_own_options() -> None:
    assert {name: cls for name, cls in MODES.items() if cls.__module__.startswith("graphir.passes.profile")} == {
        "analytical": Analytical,
        "onnxruntime": OnnxRuntime,
        "tf": Tf,
        "regression": Regression,
        "tf-run": TfRun,
        "cost-table": CostTable,
        "standard-eval": StandardEval,
    }
    fields = {name: [f.name for f in dataclasses.fields(cls)] for name, cls in MODES.items()}
    assert fields["analytical"] == []
    assert fields["onnxruntime"] == fields["tf"] == ["iterations", "warmup", "threads"]
    assert fields["regression"] == ["iterations", "warmup", "threads", "batches", "target", "validate"]
    assert fields["tf-run"] == ["iterations", "warmup"]
    assert fields["cost-table"] == ["path", "unmeasured", "model", "per_device"]
    assert fields["standard-eval"] == [*fields["regression"], "threshold", "placer", "steps", "step1"]
    assert [f.name for f in dataclasses.fields(Profile)] == ["mode", "profiler"]


def test_defaults_are_unchanged() -> None:
    assert Profile() == Profile("analytical", Analytical()) == Profile.of()
    assert providers_of("cost")[0] is Profile and providers_of("mem")[0] is Profile
    assert Profile.of("onnxruntime").profiler == OnnxRuntime(iterations=10, warmup=2, threads=1)
    assert Profile.of("tf").profiler == Tf(iterations=10, warmup=2, threads=1)
    assert Profile.of("regression").profiler == Regression(10, 2, 1, (1, 2, 4), 0, False)
    assert Profile.of("tf-run").profiler == TfRun(iterations=10, warmup=2)


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("profile", "profile"),
        ("profile{mode=analytical}", "profile"),
        ("profile{mode=onnxruntime}", "profile{mode=onnxruntime}"),
        ("profile{mode=tf iterations=2 warmup=1}", "profile{mode=tf iterations=2 warmup=1}"),
        ("profile{mode=tf threads=0}", "profile{mode=tf threads=0}"),
        ("profile{mode=tf-run iterations=2 warmup=1}", "profile{mode=tf-run iterations=2 warmup=1}"),
        (
            "profile{mode=regression batches=1,2 target=8 validate=true iterations=3}",
            "profile{mode=regression iterations=3 batches=1,2 target=8 validate=true}",
        ),
        ("profile{mode=regression batches=1,2,4 target=0 validate=false}", "profile{mode=regression}"),
    ],
)
def test_pipeline_strings_parse_and_print_back(text: str, spec: str) -> None:
    (profile,) = parse_pipeline(text)
    assert profile.spec() == spec
    assert parse_pipeline(spec) == [profile]


def test_an_option_of_another_mode_is_a_caret_error_at_parse_time() -> None:
    with pytest.raises(PassOptionError) as caught:
        parse_pipeline("profile{mode=analytical iterations=3}")
    lines = caught.value.render().splitlines()
    message = (
        "unknown option 'iterations' for profile{mode=analytical} (analytical options: none; profile options: mode)"
    )
    assert lines == [
        f"<pipeline>:1:25: error: {message}",
        "profile{mode=analytical iterations=3}",
        " " * 24 + "^",
    ]
    with pytest.raises(PassOptionError, match=r"for profile\{mode=analytical\} \(analytical options: none;"):
        parse_pipeline("profile{iterations=3}")  # the default mode
    with pytest.raises(PassOptionError, match=r"1:30: error: unknown option 'threads' for profile\{mode=tf-run\} "):
        parse_pipeline("profile{mode=tf-run warmup=1 threads=2}")
    with pytest.raises(PassOptionError, match=r"\(tf options: iterations, warmup, threads; profile options: mode\)"):
        parse_pipeline("profile{mode=tf batches=1,2}")
    with pytest.raises(PassOptionError, match=r"1:14: error: unknown profiling mode 'guess' for pass 'profile'"):
        parse_pipeline("profile{mode=guess}")


def test_of_builds_the_mode_and_rejects_foreign_options() -> None:
    assert Profile.of("regression", batches=(1, 2), target=8) == Profile(
        "regression", Regression(batches=(1, 2), target=8)
    )
    with pytest.raises(TypeError, match=r"option 'iterations' does not apply to mode=analytical \(analytical options"):
        Profile.of(iterations=0)
    with pytest.raises(ValueError, match="unknown profiling mode 'guess'"):
        Profile.of("guess")
    with pytest.raises(ValueError, match="given for mode=tf"):
        Profile("tf", Regression())


@pytest.mark.parametrize("mode", ["onnxruntime", "tf", "regression", "tf-run"])
def test_bad_measurement_options_fail_before_anything_runs(mode: str) -> None:
    with pytest.raises(PassError, match="'iterations' must be >= 1, got 0"):
        Profile.of(mode, iterations=0).run(Module("m", Graph()), PassContext())
    with pytest.raises(PassError, match="'warmup' and 'threads' must be >= 0"):
        Profile.of(mode, warmup=-1).run(Module("m", Graph()), PassContext())


def test_analytical_mode_through_the_pipeline_and_python_alike() -> None:
    parsed, built = _mlp(), _mlp()
    (profile,) = parse_pipeline("profile{mode=analytical}")
    stats = profile.run(parsed, PassContext()).stats
    assert stats == Profile.of("analytical").run(built, PassContext()).stats
    assert print_module(parsed) == print_module(built)
    assert parsed.graph.get_node("mm").cost is not None


@dataclasses.dataclass(frozen=True)
class _Constant(ProfileMode):
    """Give every node the same time (a test plugin).

    Options:
        seconds: each node's time on every device kind.
    """

    name: ClassVar[str] = "test-constant"
    seconds: float = 1e-6

    def profile(self, module: Module, ctx: PassContext) -> PassResult:
        """The same cost and no memory on every node."""
        kinds = sorted(module.cluster.kinds)
        for node in module.graph.nodes:
            node.cost = Cost(tuple((kind, self.seconds) for kind in kinds))
            node.mem = Mem(0, 0, 0)
        return PassResult(True, {"nodes": len(module.graph)})


@pytest.fixture
def constant() -> Iterator[type[_Constant]]:
    register_profile_mode(_Constant)
    try:
        yield _Constant
    finally:
        del MODES[_Constant.name]


def test_a_plugin_mode_is_parsed_listed_and_run(constant: type[_Constant]) -> None:
    (profile,) = parse_pipeline("profile{mode=test-constant seconds=0.5}")
    assert profile == Profile("test-constant", constant(seconds=0.5))
    assert profile.spec() == "profile{mode=test-constant seconds=0.5}"
    module = _mlp()
    assert profile.run(module, PassContext()).stats == {"nodes": 2}
    assert module.graph.get_node("relu").cost == Cost((("V100", 0.5),))
    assert (
        "    mode=test-constant: Give every node the same time (a test plugin).\n        seconds: float = 1e-06\n"
        in (list_passes())
    )


def test_a_mode_option_may_not_shadow_the_selector() -> None:
    @dataclasses.dataclass(frozen=True)
    class _Shadow(ProfileMode):
        name: ClassVar[str] = "test-shadow"
        mode: str = ""

    with pytest.raises(TypeError, match="options named like options of pass 'profile': mode"):
        register_profile_mode(_Shadow)
    assert "test-shadow" not in MODES


def test_list_passes_shows_each_mode_with_its_options() -> None:
    text = list_passes()
    profile = text[text.index("profile: ") : text.index("\nschedule: ")] + "\n"
    assert "    mode: str = analytical\n    mode=analytical: The roofline model" in profile
    assert "    mode=tf-run: Median kernel times of the module run on the cluster's local TensorFlow workers" in profile
    assert "        iterations: int = 10\n        warmup: int = 2\n" in profile
    assert "        batches: list<int> = 1,2,4\n        target: int = 0\n        validate: bool = false\n" in profile
