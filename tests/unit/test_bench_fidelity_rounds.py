"""bench_fidelity's interleaved rounds: per-round medians, their median, the spread, one placement per pair.

No TensorFlow: the rounds' measurements are given by hand (or by a stand-in for the rig), and the
placements are made by the real placers on a small ONNX-dialect graph with the analytic costs.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest

from devtools import bench_fidelity
from devtools.bench_fidelity import Row, apply_placement, place_pairs, read_json, run_rounds, write_json
from graphir.backends.host import cpu_workers_cluster
from graphir.ir import Graph, Module
from graphir.simulator import recorded_order
from graphir.types import DType, TensorType


def _row(placement: str = "fine", order: str = "enforced", simulated: float = 1.1) -> Row:
    """A row of model ``m`` placed and simulated, nothing measured yet (as :func:`place_pairs` makes it)."""
    return Row("m", placement, order, 10, 2, 3, 1 << 20, float("nan"), simulated, [], 0.0)


def test_a_pairs_measured_step_is_the_median_of_its_rounds_medians():
    # Round medians: median(1.0, 1.2, 0.9) = 1.0; median(0.8, 0.81, 0.82) = 0.81; median(1.5, 1.1, 1.3) = 1.3.
    # Measured = median(1.0, 0.81, 1.3) = 1.0; spread = (1.3 - 0.81) / 1.0 = 0.49; the load is the largest.
    row = _row()
    row.add_round([1.0, 1.2, 0.9], 0.5)
    assert (row.rounds_s, row.measured_s, row.spread) == ([1.0], 1.0, 0.0)
    row.add_round([0.8, 0.81, 0.82], 1.5)
    assert row.measured_s == pytest.approx(0.905)  # two rounds: the mean of the middle two
    row.add_round([1.5, 1.1, 1.3], 0.7)
    assert row.rounds_s == [1.0, 0.81, 1.3]
    assert row.measured_s == 1.0 and row.spread == pytest.approx(0.49)
    assert row.times_s == [1.0, 1.2, 0.9, 0.8, 0.81, 0.82, 1.5, 1.1, 1.3] and row.load == 1.5
    assert row.error == pytest.approx(0.1)


def test_a_run_written_before_rounds_reads_as_one_round(tmp_path):
    # The committed fidelity.json has no rounds_s: its rows read back as measured once, spread 0.
    old = Row("m", "fine", "dynamic", 10, 2, 3, 1 << 20, 2.0, 1.5, [2.0, 2.1], 0.7)
    path = tmp_path / "old.json"
    write_json([old], path)
    text = path.read_text().replace(',"rounds_s":[]', "")
    assert "rounds_s" not in text
    path.write_text(text)
    (again,), _, _, _ = read_json(path)
    assert (again.rounds_s, again.round_values, again.spread, again.measured_s) == ([], [2.0], 0.0, 2.0)
    measured = _row()
    for times in ([1.0], [1.2], [0.9]):
        measured.add_round(times, 0.1)
    write_json([measured], path)
    (again,), _, _, _ = read_json(path)
    assert again.rounds_s == [1.0, 1.2, 0.9] and again.measured_s == 1.0


def test_rounds_interleave_over_all_models_and_prepare_each_model_once():
    prepared, measured, written = [], [], []

    def prepare(name):
        prepared.append(name)
        return f"module {name}", [bench_fidelity.Pair(_row(placement), {}) for placement in ("single", "fine")]

    def measure(module, pairs, index):
        measured.append((module, index))
        for pair in pairs:
            pair.row.add_round([{"single": 1.0, "fine": 2.0}[pair.row.placement] + index], 0.0)

    rows = run_rounds(["a", "b"], 3, prepare, measure, lambda rows: written.append(len(rows)))
    assert prepared == ["a", "b"]  # once per model, in the first round
    assert measured == [
        ("module a", 0),
        ("module b", 0),
        ("module a", 1),
        ("module b", 1),
        ("module a", 2),
        ("module b", 2),
    ]  # round 1 over every model, then round 2, then round 3
    assert written == [2, 4, 4, 4, 4, 4]  # partial results after every model's round
    assert [(r.placement, r.rounds_s, r.measured_s) for r in rows] == [
        ("single", [1.0, 2.0, 3.0], 2.0),
        ("fine", [2.0, 3.0, 4.0], 3.0),
    ] * 2


def _module() -> Module:
    """Three chains of four 64x64 Relus from one input, summed: every placer gives a real split of it."""
    t = TensorType(DType.F32, (64, 64))
    graph = Graph()
    x = graph.add_input("x", t)
    ends = []
    for branch in range(3):
        value = x
        for k in range(4):
            value = graph.add_node("onnx.Relu", [value], [t], name=f"b{branch}n{k}").outputs[0]
        ends.append(value)
    graph.set_outputs([graph.add_node("onnx.Sum", ends, [t], name="sum").outputs[0]])
    module = Module("m", graph)
    module.set_cluster(cpu_workers_cluster(2))
    return module


def test_every_pair_is_placed_once_and_runs_its_one_placement_in_every_round(tmp_path, monkeypatch):
    module = _module()
    placed = []
    real_place = bench_fidelity._place

    def counting_place(module, placement, order, *rest):
        placed.append((placement, order))
        return real_place(module, placement, order, *rest)

    monkeypatch.setattr(bench_fidelity, "_place", counting_place)
    args = argparse.Namespace(
        placements=["single", "balanced", "fine", "metis"],
        orders=["enforced", "dynamic"],
        congestion="topology",
        seed=0,
        save_modules=None,
    )
    seen: dict[tuple[str, str], list[dict]] = {}

    def measure(module, pairs, index):  # the rig's stand-in: what each pair would run, read off the module
        for pair in pairs:
            apply_placement(module, pair)
            state = {node.name: (node.device, node.order) for node in module.graph.nodes}
            state["order"] = recorded_order(module)
            seen.setdefault((pair.row.placement, pair.row.order), []).append(state)
            pair.row.add_round([1.0 + index], 0.0)

    rows = run_rounds(
        ["m"], 3, lambda name: (module, place_pairs(module, name, module.cluster, args, tmp_path)), measure
    )
    pairs = [(p, o) for p in args.placements for o in args.orders]
    assert placed == pairs  # the placer ran once per pair, not once per round
    assert [(r.placement, r.order) for r in rows] == pairs
    for (placement, order), states in seen.items():
        assert len(states) == 3 and states[0] == states[1] == states[2], (placement, order)
        assert states[0]["order"] == order
    single = seen[("single", "enforced")][0]
    fine = seen[("fine", "enforced")][0]
    assert {single[n][0] for n in single if n != "order"} == {"worker0"}  # restored after the split pairs ran
    assert {fine[n][0] for n in fine if n != "order"} == {"worker0", "worker1"}
    assert all(r.rounds_s == [1.0, 2.0, 3.0] and r.measured_s == 2.0 for r in rows)
    assert all(r.simulated_s > 0 and not math.isnan(r.simulated_s) for r in rows)


def test_the_page_shows_each_pairs_rounds_and_what_each_round_alone_scores(tmp_path):
    # Pair A: rounds 1.0 / 1.2 / 0.9 s (measured 1.0), simulated 1.1: +10 %; spread 0.3 / 1.0 = 30 %.
    # Pair B: rounds 2.0 / 2.0 / 3.0 s (measured 2.0), simulated 2.2: +10 %; spread 1.0 / 2.0 = 50 %.
    # One round alone: round 1: +10 %, +10 % -> median 10 %, worst 10 %; round 2: 1.1/1.2 - 1 = -8.3 %, +10 %
    # -> median 9.2 %, worst 10.0 %; round 3: 1.1/0.9 - 1 = +22.2 %, 2.2/3.0 - 1 = -26.7 % -> median 24.4 %,
    # worst 26.7 %. Spread: median of 30 % and 50 % = 40 %, largest 50 % (B).
    a, b = _row("balanced", "enforced", 1.1), _row("fine", "enforced", 2.2)
    for row, rounds in ((a, (1.0, 1.2, 0.9)), (b, (2.0, 2.0, 3.0))):
        for value in rounds:
            row.add_round([value], 0.4)
    path = tmp_path / "fidelity.md"
    bench_fidelity.write_markdown([a, b], path, "cmd", "", [])
    text = path.read_text()
    assert "in 3 interleaved rounds" in text
    assert "**2 pairs: median |error| 10.0%, worst 10.0%**" in text
    assert "median 40.0%, largest 50.0% (m fine enforced: 2 / 2 / 3 s)." in text
    assert (
        "judged on one round alone (what one session per pair would have reported): round 1: median 10.0%, "
        "worst 10.0%; round 2: median 9.2%, worst 10.0%; round 3: median 24.4%, worst 26.7%." in text
    )
    assert "| 1 | 1 / 1.2 / 0.9 | 30.0% | 1.1 | +10.0% | 0.40 |" in text
    assert "| 2 | 2 / 2 / 3 | 50.0% | 2.2 | +10.0% | 0.40 |" in text
    assert "timed steps per session" not in text  # every session timed the same number of steps


def test_the_page_says_how_many_steps_a_short_step_was_timed(tmp_path):
    # A long step: 2 steps per round (--steps 2). A short step under --min-seconds 1: 0.1 s steps, so
    # 10 per round. Steps per session: 6 / 3 = 2 and 30 / 3 = 10.
    long, short = _row("balanced", "enforced", 2.0), _row("fine", "enforced", 0.1)
    for _ in range(3):
        long.add_round([2.0, 2.0], 0.3)
        short.add_round([0.1] * 10, 0.3)
    path = tmp_path / "fidelity.md"
    bench_fidelity.write_markdown([long, short], path, "cmd", "", [])
    assert "(2–10 timed steps per session: at least `--steps`, and a short step timed until" in path.read_text()


def test_rounds_and_steps_below_one_are_refused(capsys):
    assert bench_fidelity.main(["--rounds", "0"]) == 1
    assert capsys.readouterr().err == "bench-fidelity: --rounds, --steps and --calibration-runs must be at least 1\n"
    assert bench_fidelity.main(["--calibration-runs", "0"]) == 1


def test_the_pipeline_pair_is_refused_where_it_cannot_micro_batch(capsys):
    # Not in the default placements; at the default --train-batch 1, or on an inference model, one line.
    assert "pipeline" in bench_fidelity.HELD_OUT and "pipeline" in bench_fidelity.REWRITING
    assert bench_fidelity.main(["--models", "gpt-train", "--placements", "pipeline", "--out", "/nonexistent/x.md"]) == 1
    assert capsys.readouterr().err == (
        "bench-fidelity: pipeline needs training models and a --train-batch (1) that --microbatches (4) divides\n"
    )
    argv = ["--models", "gpt-train,squeezenet-infer", "--placements", "balanced,pipeline", "--train-batch", "8"]
    assert bench_fidelity.main(argv) == 1
    assert "(not squeezenet-infer)" in capsys.readouterr().err


def _render_committed(tmp_path: Path, name: str, folder: str = "benchmarks/results") -> tuple[str, list[Row]]:
    """``--render`` of the committed ``<folder>/<name>``: the page's text and the run's rows."""
    committed = Path(__file__).resolve().parents[2] / folder / name
    (tmp_path / "fidelity.json").write_text(committed.read_text())
    assert bench_fidelity.main(["--render", "--out", str(tmp_path / "fidelity.md")]) == 0
    rows, _, _, _ = read_json(committed)
    return (tmp_path / "fidelity.md").read_text(), rows


def test_the_committed_one_round_results_still_render(tmp_path):
    # --render on a committed run from before --rounds (the first 10 rows of the 11:35 run's
    # fidelity-quiet-1135.json, rows without rounds_s): every pair shows its one value and no spread.
    text, rows = _render_committed(tmp_path, "fidelity-one-round.json", "tests/data")
    assert "one session per pair" in text and "interleaved rounds" not in text
    first = rows[0]
    assert f"| {first.measured_s:.4g} | {first.measured_s:.4g} | — | {first.simulated_s:.4g} |" in text


def test_the_committed_page_renders_its_rounds(tmp_path):
    # --render on the committed fidelity.json (a --rounds 3 run): every row keeps its three rounds,
    # the page says so and shows each pair's measured median among them.
    text, rows = _render_committed(tmp_path, "fidelity.json")
    assert "3 interleaved rounds" in text
    assert all(len(row.rounds_s) == 3 and row.measured_s in row.rounds_s for row in rows)


def test_the_pipeline_pair_runs_its_own_micro_batched_module_on_one_stage_per_worker(tmp_path):
    # A 4-layer MLP training step (test_place_pipeline's) at batch 64, width 512 (compute-bound) on the
    # 2-worker rig's cluster:
    # the pair's module is a micro-batched clone (4 copies mb0..mb3), stages cut by layers, one per
    # worker; the model's own module is left as it was (the other pairs share it).
    from helpers import mlp_train

    from graphir.copies import copy_of
    from graphir.parser import parse_module
    from graphir.pass_infra import PassContext
    from graphir.passes.profile import Profile

    module = parse_module(mlp_train(layers=4, batch=64, width=512, cluster="4xcpu"))
    module.set_cluster(cpu_workers_cluster(2))
    Profile().run(module, PassContext())
    before = {n.name: (n.device, n.order, n.cost) for n in module.graph.nodes}
    args = argparse.Namespace(
        placements=["single", "pipeline"],
        orders=["enforced"],
        congestion="topology",
        seed=0,
        save_modules=tmp_path / "saved",
        microbatches=4,
        pipeline_profile="rescaled",  # the model's profile scaled by the rewrite ("own" profiles on the rig)
    )
    single, pipeline = place_pairs(module, "mlp", module.cluster, args, tmp_path)
    assert single.module is None and single.target(module) is module
    rewritten = pipeline.target(module)
    assert rewritten is not module and pipeline.row.nodes == len(rewritten.graph) > 2 * len(module.graph)
    assert {copy_of(n.name)[1] for n in rewritten.graph.nodes} == {-1, 0, 1, 2, 3}
    assert recorded_order(rewritten) == "enforced" and pipeline.row.devices_used == 2
    # every copy of a layer's forward op on the same worker; layer 0 on worker0, layer 3 on worker1
    for layer, worker in ((0, "worker0"), (3, "worker1")):
        assert {rewritten.graph.node(f"mb{m}/d{layer}/MatMul").device for m in range(4)} == {worker}
    # the copies' costs are the profile's scaled to a quarter of the batch (smaller, not zero)
    whole = module.graph.node("d1/MatMul").cost.time("cpu")
    part = rewritten.graph.node("mb2/d1/MatMul").cost.time("cpu")
    assert 0 < part < whole
    assert pipeline.row.simulated_s > 0 and (tmp_path / "saved" / "mlp-pipeline-enforced.gir").is_file()
    for node in module.graph.nodes:  # the model's module: single's placement, the profile unchanged
        assert node.device == "worker0" and node.cost == before[node.name][2]
    apply_placement(rewritten, pipeline)
    assert rewritten.graph.node("mb0/d0/MatMul").device == "worker0"
