"""Shared fixtures for the unit tests: small hand-built graphs, `.gir` helpers, registry isolation."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import SOLVER_PROCESS, f32, heavy_first
from hypothesis import HealthCheck, settings

from graphir.driver import load_builtin_passes
from graphir.ir import Graph, Module, Node
from graphir.parser import parse_module
from graphir.pass_infra import FACT_CHECKS, PASSES

REPO_ROOT = Path(__file__).resolve().parents[2]

# Property tests must stay fast and deterministic: no deadline (CI machines vary), derandomized
# so a failure reproduces, and a modest number of examples (the whole unit suite runs in seconds).
settings.register_profile(
    "graphir-unit",
    deadline=None,
    derandomize=True,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("graphir-unit")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run :data:`helpers.HEAVY_MODULES` first, heaviest first; the others keep their order (a stable sort)."""
    heavy_first(items)


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def chain() -> tuple[Module, Node, Node, Node]:
    """``x -> a -> b -> c`` (Relu chain on f32[4]) in a module on ``2xV100``."""
    graph = Graph()
    x = graph.add_input("x", f32(4))
    a = graph.add_node("onnx.Relu", [x], [f32(4)], name="a")
    b = graph.add_node("onnx.Relu", [a.outputs[0]], [f32(4)], name="b")
    c = graph.add_node("onnx.Relu", [b.outputs[0]], [f32(4)], name="c")
    graph.set_outputs(c.outputs)
    return Module("m", graph, "2xV100"), a, b, c


def wrap_gir(body: str) -> str:
    """A module ``@m`` with graph ``@main(%x : f32[4])`` around ``body`` (indented four spaces)."""
    lines = ["module @m {", "  graph @main(%x : f32[4]) {"]
    lines += ["    " + line for line in body.strip("\n").splitlines()]
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture
def parse_param() -> Callable[[str], object]:
    """Parse one param value's text, as it appears in ``{v = TEXT}`` on a node line."""

    def parse(text: str) -> object:
        body = f"%y = test.Op(%x) {{v = {text}}} : (f32[4]) -> f32[4]\nreturn %y"
        module = parse_module(wrap_gir(body))
        return module.graph.node("y").params["v"]

    return parse


@pytest.fixture
def isolated_registry() -> Iterator[dict]:
    """Snapshot the pass registry and the fact checks; restore them after the test.

    The built-in passes are loaded first so the snapshot contains them (loading is memoised).
    """
    load_builtin_passes()
    saved_passes = dict(PASSES)
    saved_facts = dict(FACT_CHECKS)
    try:
        yield PASSES
    finally:
        PASSES.clear()
        PASSES.update(saved_passes)
        FACT_CHECKS.clear()
        FACT_CHECKS.update(saved_facts)


@pytest.fixture(scope="session")
def tiny_gpt_step() -> Module:
    """A 2-layer GPT training step (GradientTape + one ResourceApplyAdam per variable), imported.

    Built once per session (a TensorFlow trace, seconds); tests that change it work on a clone.
    """
    pytest.importorskip("tensorflow")
    from graphir.importers.tf import import_graphdef
    from graphir.tools.zoo import build_train_graphdef

    config = (("layers", 2), ("d_model", 16), ("heads", 2), ("d_ff", 32), ("vocab", 40), ("seq", 8))
    graph_def, _ = build_train_graphdef("gpt", 2, config)
    return import_graphdef(graph_def, name="tiny_gpt", source="<tiny_gpt>")


@pytest.fixture(scope="session", autouse=True)
def ilp_solver_process() -> Iterator[None]:
    """``place{algo=ilp}``'s isolated solves go to the session's one solver process (helpers.SolverProcess).

    The placer solves in a fresh interpreter whenever TensorFlow is loaded, which the test session
    always has: one interpreter for the session instead of one per solve (the same ``solve`` on the
    same arguments, in a process without TensorFlow). ``fresh_ilp_subprocess`` restores the real
    one-interpreter-per-solve path for the test that checks it.
    """
    from graphir.errors import PassError
    from graphir.passes.place import ilp

    real = ilp._solve_isolated

    def solve_in_session_process(*args: object) -> object:
        try:
            return SOLVER_PROCESS.call(ilp.__name__, "solve", args)
        except RuntimeError as error:
            raise PassError(f"place{{algo=ilp}}: the CP-SAT subprocess failed: {error}") from error

    solve_in_session_process.real = real  # type: ignore[attr-defined]  # for fresh_ilp_subprocess
    ilp._solve_isolated = solve_in_session_process
    try:
        yield
    finally:
        ilp._solve_isolated = real
        SOLVER_PROCESS.close()


@pytest.fixture
def fresh_ilp_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    """``place{algo=ilp}``'s own isolated path (a fresh interpreter per solve) for this test."""
    from graphir.passes.place import ilp

    monkeypatch.setattr(ilp, "_solve_isolated", getattr(ilp._solve_isolated, "real", ilp._solve_isolated))
