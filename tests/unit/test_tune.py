"""graphir-tune: the cost store, FastT's exploration rule, the loop's decisions, and one real rig run.

The store, exploration and decision tests are hand-worked on a three-node graph (no TensorFlow: the
loop takes a runner, here one that returns chosen measurements). Two tests train a tiny LSTM language
model on the real 2-worker rig, both in one subprocess: one with a round made slow by injection (the loop
rolls back), one starting data-parallel and switching to DPOS.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import attrs
import pytest
from helpers import mlp_training_step

from graphir.backends.tf.rig import RigRun
from graphir.cluster import resolve_cluster
from graphir.cluster_model import Cluster
from graphir.errors import GraphIRError
from graphir.ir import Graph, Module
from graphir.pass_infra import PassContext
from graphir.pass_manager import PassManager
from graphir.passes.profile.cost_store import EXPLORE_BANDWIDTH, CostStore, tuning_cluster
from graphir.pipeline import parse_pipeline
from graphir.tools.tune import main as tune_main
from graphir.tools.tune_loop import TuneOptions, tune
from graphir.types import DType, TensorType

MS = 1e-3
W0 = "/job:worker/task:0/device:CPU:0"
W1 = "/job:worker/task:1/device:CPU:0"


@pytest.fixture(autouse=True)
def _uncalibrated(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAPHIR_MEASURE_CPU", "0")  # the rig cluster without this machine's calibration
    monkeypatch.setenv("GRAPHIR_CACHE_DIR", str(tmp_path / "cache"))


def fork() -> Module:
    """x -> a -> {b, c}: 16-byte tensors."""
    t = TensorType(DType.F32, (4,))
    graph = Graph()
    x = graph.add_input("x", t)
    a = graph.add_node("tf.Relu", [x], [t], name="a")
    b = graph.add_node("tf.Relu", [a.outputs[0]], [t], name="b")
    c = graph.add_node("tf.Relu", [a.outputs[0]], [t], name="c")
    graph.set_outputs([b.outputs[0], c.outputs[0]])
    module = Module("fork", graph)
    module.set_cluster(resolve_cluster("2xcpu-workers"))
    return module


def test_store_keeps_running_means_and_reports_the_change(tmp_path):
    store = CostStore("fork")
    first = store.record({"a": 2 * MS, "b": 1 * MS}, {"a": "worker0", "b": "worker0"})
    assert (first.new, first.entries) == (2, 2)
    second = store.record({"a": 4 * MS, "b": 1 * MS}, {"a": "worker0", "b": "worker1"})
    assert store.time("a", "worker0") == pytest.approx(3 * MS)  # mean of 2 and 4 ms
    assert store.time("b", "worker1") == pytest.approx(1 * MS) and store.time("c", "worker0") is None
    # the existing entries moved |3 - 2| + |1 - 1| = 1 ms out of 3 ms; one entry is new
    assert second.relative == pytest.approx(1 / 3) and second.new == 1 and second.entries == 3
    path = tmp_path / "costs.json"
    store.save(path)
    again = CostStore.load(path, "fork")
    assert again.to_json() == store.to_json() and again.updates == 2
    with pytest.raises(Exception, match="holds costs of model 'fork', not 'other'"):
        CostStore.load(path, "other")


def test_links_are_fitted_per_pair_and_unmeasured_ones_cost_zero():
    store = CostStore("fork")
    sizes = [1 << 10, 1 << 14, 1 << 18, 1 << 20]
    store.record({}, {}, [("worker0", "worker1", n, 1 * MS + n / 1e9) for n in sizes])
    latency, bandwidth = store.link_fit("worker0", "worker1")
    assert latency == pytest.approx(1 * MS, rel=1e-6) and bandwidth == pytest.approx(1e9, rel=1e-6)
    assert store.link_fit("worker1", "worker0") is None
    base = resolve_cluster("2xcpu-workers")
    view = tuning_cluster(base, store)
    assert [d.kind for d in view.devices] == ["cpu@worker0", "cpu@worker1"]
    assert view.link("worker0", "worker1").latency == pytest.approx(1 * MS, rel=1e-6)
    unmeasured = view.link("worker1", "worker0")
    assert (unmeasured.latency, unmeasured.bandwidth) == (0.0, EXPLORE_BANDWIDTH)  # FastT: unknown cost 0
    calibrated = tuning_cluster(base, store, explore=False).link("worker1", "worker0")
    assert calibrated.latency == base.link("worker1", "worker0").latency + base.transfer_overhead
    assert tuning_cluster(view, store).devices == view.devices  # idempotent


def test_exploration_rule_unmeasured_op_costs_zero_and_is_placed_there(tmp_path):
    """a, b: 1 ms on worker0, 2 ms on worker1; c: 1 ms on worker0, never measured on worker1.

    Hand-worked DPOS: rank(b) = 2, rank(c) = max(1, 0) = 1, rank(a) = 2 + 2 = 4; the critical path a -> b
    averages 1 ms on worker0 against 2 ms on worker1, so a runs 0-1 ms and b 1-2 ms on worker0; c
    finishes at 3 ms on worker0 but at 1 ms + 0 on worker1 (its unknown cost and the unmeasured
    link both count 0): c goes to worker1, the device where it was never measured.
    """
    store = CostStore("fork")
    store.record({"a": 1 * MS, "b": 1 * MS, "c": 1 * MS}, dict.fromkeys("abc", "worker0"))
    store.record({"a": 2 * MS, "b": 2 * MS}, dict.fromkeys("ab", "worker1"))
    path = tmp_path / "costs.json"
    store.save(path)
    module = fork()
    pipeline = f"profile{{mode=cost-table path={path}}},place{{algo=dpos}}"
    (profile, _), *_ = [(r.result.stats, r) for r in PassManager(parse_pipeline(pipeline)).run(module, PassContext())]
    nodes = {n.name: n for n in module.graph.nodes}
    assert nodes["c"].cost.time("cpu@worker1") == 0.0
    assert nodes["a"].cost.time("cpu@worker1") == pytest.approx(2 * MS)
    assert profile["unmeasured-entries"] == 1 and profile["measured-entries"] == 5
    assert {name: node.device for name, node in nodes.items()} == {"a": "worker0", "b": "worker0", "c": "worker1"}


class FakeRunner:
    """Measures what a table says: per strategy (nodes per device), a step time; every node 1 ms where it ran."""

    def __init__(self, times: dict[tuple, float]):
        self.times = times
        self.calls: list[dict[str, str]] = []

    def __call__(self, module: Module, variables, delay_s: float) -> SimpleNamespace:
        placed = {n.name: n.device for n in module.graph.nodes}
        self.calls.append(placed)
        key = tuple(sorted(set(placed.values())))
        tf = {"worker0": W0, "worker1": W1}
        run = RigRun(
            [self.times[key] + delay_s],
            self.times[key] + delay_s,
            0,
            dict.fromkeys(placed, 1 * MS),
            {name: tf[d] for name, d in placed.items()},
            [],
            1,
        )
        step = (variables or {}).get("step", 0) + 1
        return SimpleNamespace(run=run, variables={"step": step}, losses=[float(step)], steps_run=1)


def test_loop_explores_rolls_back_a_slow_trial_against_its_baseline_and_stops():
    module = fork()
    runner = FakeRunner({("worker0",): 10 * MS, ("worker1",): 10 * MS, ("worker0", "worker1"): 12 * MS})
    options = TuneOptions(rounds=6, min_rounds=3, delays={1: 50 * MS})
    result = tune(module, CostStore("fork"), runner, options)
    rows = result.rounds
    assert [r.ran for r in rows[:2]] == ["bootstrap", "trial"]
    assert rows[0].devices == {"worker0": 3}
    # round 1: worker1 was never measured, every cost there is 0: DPOS moves everything there
    assert rows[1].devices == {"worker1": 3} and rows[1].estimated_s == 0.0
    # the trial (10 ms + the injected 50 ms) runs, then its baseline: the active strategy, without the delay
    assert rows[1].measured_s == pytest.approx(60 * MS) and rows[1].decision == "rollback"
    assert rows[1].baseline == rows[0].strategy and rows[1].baseline_s == pytest.approx(10 * MS)
    assert [set(call.values()) for call in runner.calls[:3]] == [{"worker0"}, {"worker1"}, {"worker0"}]
    # round 2: the rolled-back strategy is never proposed again; DPOS's next one (a split, 12 ms) loses
    # against its baseline too; then the first strategy runs until the cost table is stable
    assert (rows[2].ran, rows[2].devices, rows[2].decision) == ("trial", {"worker0": 2, "worker1": 1}, "rollback")
    assert rows[3].strategy == rows[0].strategy and rows[3].measured_s == pytest.approx(10 * MS)
    assert all(r.active == rows[0].strategy for r in rows)
    assert rows[-1].decision == "stop" and len(rows) <= options.rounds
    assert all(r.ran != "verify" for r in rows)  # the loop ends on its first strategy: nothing to verify
    runs = sum(r.steps for r in rows)  # one step per fake run; a trial round runs two
    assert runs == len(rows) + sum(r.ran == "trial" for r in rows) == len(runner.calls)
    assert result.variables == {"step": runs}  # one variable state threaded through every run
    assert result.losses == [float(k + 1) for k in range(runs)]
    assert {n.device for n in module.graph.nodes} == {"worker0"}  # the module ends with the active strategy
    assert module.cluster.devices[1].kind == "cpu@worker1"


def test_a_trial_faster_than_the_last_round_but_slower_than_its_baseline_is_rolled_back():
    """Load drift: the bootstrap round measured 20 ms (delay 10 ms), the trial 12 ms, the baseline right after it 10 ms.

    Compared with the bootstrap round's stale 20 ms the trial would win; against its same-load baseline it loses.
    """
    module = fork()
    runner = FakeRunner({("worker0",): 10 * MS, ("worker1",): 12 * MS, ("worker0", "worker1"): 15 * MS})
    rows = tune(module, CostStore("fork"), runner, TuneOptions(rounds=2, delays={0: 10 * MS})).rounds
    assert rows[0].measured_s == pytest.approx(20 * MS)
    assert (rows[1].ran, rows[1].measured_s, rows[1].baseline_s) == (
        "trial",
        pytest.approx(12 * MS),
        pytest.approx(10 * MS),
    )
    assert rows[1].decision == "rollback" and rows[1].active == rows[0].strategy


def test_loop_activates_a_faster_trial_and_verifies_it_against_the_first():
    module = fork()
    runner = FakeRunner({("worker0",): 10 * MS, ("worker1",): 8 * MS, ("worker0", "worker1"): 12 * MS})
    result = tune(module, CostStore("fork"), runner, TuneOptions(rounds=2))
    rows = result.rounds
    assert [(r.ran, r.decision) for r in rows] == [("bootstrap", "activate"), ("trial", "activate"), ("verify", "keep")]
    assert rows[1].active == rows[1].strategy != rows[0].strategy
    # verify: the final strategy (8 ms), then the first one (10 ms), back to back
    assert (rows[2].strategy, rows[2].baseline) == (rows[1].strategy, rows[0].strategy)
    assert (rows[2].measured_s, rows[2].baseline_s) == (pytest.approx(8 * MS), pytest.approx(10 * MS))
    assert result.active.id == rows[1].strategy and result.first is not None and result.first.id == rows[0].strategy
    assert tune(fork(), CostStore("fork"), runner, TuneOptions(rounds=2, verify=False)).rounds[-1].ran == "trial"


def test_verify_rolls_back_to_the_first_strategy_when_the_final_one_is_slower():
    """The activated strategy turns slow in the verify round (index 2, delay 5 ms): the loop ends on the first one."""
    module = fork()
    runner = FakeRunner({("worker0",): 10 * MS, ("worker1",): 8 * MS, ("worker0", "worker1"): 12 * MS})
    result = tune(module, CostStore("fork"), runner, TuneOptions(rounds=2, delays={2: 5 * MS}))
    verify = result.rounds[-1]
    assert (verify.ran, verify.decision) == ("verify", "rollback")
    assert (verify.measured_s, verify.baseline_s) == (pytest.approx(13 * MS), pytest.approx(10 * MS))
    assert result.active.id == result.rounds[0].strategy == verify.active
    assert {n.device for n in module.graph.nodes} == {"worker0"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cluster", "2xcpu", "--rounds", "2"], "has no TensorFlow workers"),
        (["--cluster", "2xcpu-workers", "--inject-delay", "x"], "--inject-delay expects ROUND:SECONDS"),
        (["--cluster", "2xcpu-workers", "--rounds", "0"], "--rounds must be at least 1"),
        (["--cluster", "2xcpu-workers", "--placer", "nope"], "--placer 'nope': unknown"),
        (["--cluster", "2xcpu-workers", "--placer", "os-dpos nope=1"], "--placer 'os-dpos nope=1': unknown option"),
        (["--cluster", "2xcpu-workers", "--start", "os-dpos"], "--start os-dpos: the first strategy needs no split"),
    ],
)
def test_cli_rejects_bad_input_in_one_line(args, message, tmp_path, capsys):
    assert tune_main([str(tmp_path / "m.gir"), "-o", str(tmp_path / "out"), *args]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


# The two rig runs of this module share one subprocess (one TensorFlow start-up, one pair of workers, the
# tiny LSTM built once at batches 4 and 2): the :func:`rig_runs` fixture runs it once and each test asserts on
# its own scenario's report. The scenarios are those of a process each (the rollback scenario first, on the
# batch-2 graph; the data-parallel one on batch 4 with the batch-2 graph as its replica); every run on the rig
# starts its own session from the strategy's variables, so the workers keep nothing from one run to the next
# (as within the rollback scenario, whose reference run follows the tuned ones on the same workers). A scenario
# that raises reports its traceback and fails its own test alone.
_RIG_SCRIPT = textwrap.dedent(
    """
    import json, traceback
    import numpy as np
    from graphir.backends.tf.rig import rig
    from graphir.backends.tf.strategy_run import initial_variables, run_strategy
    from graphir.driver.clusters import resolve_cluster
    from graphir.importers.tf import import_graphdef
    from graphir.passes.profile.cost_store import CostStore
    from graphir.tools.tune_loop import TuneOptions, apply_strategy, rig_runner, tune
    from graphir.tools.zoo import build_train_graphdef

    config = [("layers", 1), ("units", 8), ("vocab", 16), ("seq", 3)]
    # at batch 1 the builder traces another graph; each build clears the Keras session
    graph_defs = {batch: build_train_graphdef("lstm", batch, config)[0] for batch in (4, 2)}
    cluster = resolve_cluster("2xcpu-workers")

    def lstm_tiny(batch):
        module = import_graphdef(graph_defs[batch], name="lstm_tiny", source=f"<tiny lstm, batch {batch}>")
        module.set_cluster(cluster)
        return module

    def rollback(servers):
        module = lstm_tiny(2)
        # start on one device: the graph now re-batches in the IR, so FastT's rule would start from the
        # data-parallel graph, whose first plan round 1 keeps (no trial to roll back)
        options = TuneOptions(
            rounds=3, min_rounds=3, steps=3, warmup=1, trace_steps=1, delays={1: 0.25}, start="single"
        )
        result = tune(module, CostStore(module.name), rig_runner(servers, options), options)
        total = sum(r.steps for r in result.rounds)
        apply_strategy(module, result.active)  # the bootstrap strategy (asserted by the test), for every step
        reference = run_strategy(module, servers, steps=total, warmup=0, trace_steps=0, seed=0)
        tuned, ref = result.variables, reference.variables
        initial = initial_variables(module, 0)
        return {
            "rounds": [r.as_json() for r in result.rounds],
            "total": total,
            "losses": result.losses, "tuned_loss": result.losses[-1], "reference_loss": reference.losses[-1],
            "max_var_diff": max(float(np.max(np.abs(tuned[k] - ref[k]))) for k in ref),
            "variables": len(ref), "same_keys": sorted(tuned) == sorted(ref),
            "changed": sum(1 for k in ref if not np.array_equal(ref[k], initial[k])),
        }

    def data_parallel(servers):
        module, replica = lstm_tiny(4), lstm_tiny(2)
        # margin -1: every new candidate runs (the tiny model's DPOS strategies are estimated a little slower
        # than data parallelism, so FastT's rule alone would keep data parallelism and never switch)
        options = TuneOptions(rounds=3, min_rounds=3, steps=2, warmup=1, trace_steps=1, margin=-1.0)
        result = tune(module, CostStore(module.name), rig_runner(servers, options), options, replica=replica)
        total = sum(r.steps for r in result.rounds)
        apply_strategy(module, result.first)  # data parallelism alone, for every step
        reference = run_strategy(module, servers, steps=total, warmup=0, trace_steps=0, seed=0)
        tuned, ref = result.variables, reference.variables
        return {
            "start": result.start.as_json(), "rounds": [r.as_json() for r in result.rounds],
            "tuned_loss": result.losses[-1], "reference_loss": reference.losses[-1],
            "max_var_diff": max(float(np.max(np.abs(tuned[k] - ref[k]))) for k in ref),
            "variables": len(ref), "same_keys": sorted(tuned) == sorted(ref),
        }

    reports = {}
    with rig(cluster, timeout_s=90) as servers:
        for name, scenario in (("rollback", rollback), ("data_parallel", data_parallel)):
            try:
                reports[name] = scenario(servers)
            except Exception:
                reports[name] = {"error": traceback.format_exc()}
    print(json.dumps(reports))
    """
)


@pytest.fixture(scope="module")
def rig_runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Both rig scenarios' reports (see :data:`_RIG_SCRIPT`), from one subprocess run."""
    cache = tmp_path_factory.mktemp("tune-rig") / "c"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GRAPHIR_MEASURE_CPU="0", GRAPHIR_CACHE_DIR=str(cache))
    result = subprocess.run(
        [sys.executable, "-c", _RIG_SCRIPT], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def rig_report(rig_runs: dict, scenario: str) -> dict:
    report = rig_runs[scenario]
    assert "error" not in report, report.get("error")
    return report


def test_rollback_on_the_rig_restores_the_strategy_and_training_continues(rig_runs):
    """Round 1's trial is slowed by 0.25 s per step; the loop rolls back and training is unaffected."""
    report = rig_report(rig_runs, "rollback")
    r0, r1, r2 = report["rounds"]
    assert (r0["ran"], r1["ran"], r2["ran"]) == ("bootstrap", "trial", "active"), report["rounds"]
    assert r1["decision"] == "rollback" and r1["measured_s"] >= 0.25
    assert r1["baseline"] == r0["strategy"] and r1["baseline_s"] < 0.1  # re-measured right after the trial
    assert r2["strategy"] == r0["strategy"] == r2["active"]  # the previous strategy is back...
    assert r2["measured_s"] < 0.1 and r0["measured_s"] < 0.1  # ...and so is its step time
    # training went on through the switches: the same loss and variables as one strategy for as many steps
    assert report["same_keys"] and report["variables"] >= 20
    assert report["changed"] >= report["variables"] - 1  # the steps really trained
    finite = [x for x in report["losses"] if math.isfinite(x)]  # traced steps report no loss (NaN)
    assert len(finite) == report["total"] - 4 and finite[-1] < finite[0], report["losses"]
    assert math.isclose(report["tuned_loss"], report["reference_loss"], rel_tol=0, abs_tol=1e-6), report
    assert report["max_var_diff"] <= 1e-6, report


def test_tiny_transfers_fit_a_latency_but_no_bandwidth():
    """Samples of 0-16 bytes (control edges, scalars) cannot give a slope: latency only, per-byte cost 0.

    The fastest of 3, 5 and 4 ms is the latency.
    """
    store = CostStore("fork")
    store.record({}, {}, [("worker0", "worker1", n, t * MS) for n, t in ((0, 3), (4, 5), (16, 4))])
    assert store.link_fit("worker0", "worker1") == (pytest.approx(3 * MS), EXPLORE_BANDWIDTH)


def test_the_fit_follows_the_lower_envelope_not_the_waits():
    """Per size, the fastest: clean transfers and two that waited behind a kernel.

    Sizes 1 KiB and 1 MiB at 1 ms + bytes / 1 GB/s, plus 50 ms and 80 ms waits at 1 KiB and 1 MiB:
    the envelope stays on the line, so latency 1 ms and bandwidth 1 GB/s are recovered.
    """
    store = CostStore("fork")
    clean = [(n, 1 * MS + n / 1e9) for n in (1 << 10, 1 << 20) for _ in range(4)]
    waits = [(1 << 10, 50 * MS), (1 << 20, 80 * MS)]
    store.record({}, {}, [("worker0", "worker1", n, t) for n, t in [*clean, *waits]])
    latency, bandwidth = store.link_fit("worker0", "worker1")
    assert latency == pytest.approx(1 * MS, rel=1e-6) and bandwidth == pytest.approx(1e9, rel=1e-6)


def test_a_second_run_starts_warm_from_the_store(tmp_path):
    """The store a first run wrote places the first round of the next one (no bootstrap rule)."""
    runner = FakeRunner({("worker0",): 10 * MS, ("worker1",): 10 * MS, ("worker0", "worker1"): 12 * MS})
    store = CostStore("fork")
    tune(fork(), store, runner, TuneOptions(rounds=3))
    store.save(tmp_path / "costs.json")
    warm = tune(fork(), CostStore.open(tmp_path / "costs.json", "fork"), runner, TuneOptions(rounds=1)).rounds
    assert warm[0].source == "dpos" and warm[0].coverage == 1.0
    assert math.isfinite(warm[0].estimated_s) and warm[0].estimated_s > 0


# --------------------------------------------------------------------------- FastT's starting strategy


def mlp(batch: int, cluster: str | Cluster = "2xcpu-workers") -> Module:
    """The hand-built MLP Adam training step of the data-parallel tests, on the rig's two workers."""
    module = mlp_training_step(batch)
    module.set_cluster(resolve_cluster(cluster) if isinstance(cluster, str) else cluster)
    return module


TWO = ("worker0", "worker1")


def test_start_rule_data_parallel_when_the_model_fits():
    """The MLP (a few hundred bytes) fits a worker: the loop tunes its 2-replica graph, from data parallelism.

    Batch 4 on 2 workers: replicas of batch 2 (the same builder is the replica model). The first strategy
    is the data-parallel baseline: replica i on worker i; the DPOS strategy of round 1 places the very same
    graph (same node names), so the variables (shared nodes) carry over.
    """
    module = mlp(4)
    runner = FakeRunner({("worker0",): 10 * MS, ("worker1",): 10 * MS, TWO: 8 * MS})
    result = tune(module, CostStore("mlp_train"), runner, TuneOptions(rounds=2), replica=mlp_training_step(2))
    assert result.start is not None and (result.start.strategy, result.start.replicas) == ("data-parallel", 2)
    assert result.start.fits and "2 replicas of batch 2" in result.start.reason
    first, second = result.rounds
    assert (first.ran, first.source) == ("bootstrap", "data-parallel")
    placed = runner.calls[0]
    # 25 nodes: 13 replicated twice, 12 shared (handles, reads, updates...), (AddN, Mul) for 2 gradients + the loss
    assert len(placed) == 2 * 13 + 12 + 3 * 2
    assert {placed[f"replica{i}/fwd0/mm"] for i in (0, 1)} == set(TWO)  # one replica per worker
    assert placed["replica0/fwd0/mm"] == "worker0" and placed["replica1/fwd0/mm"] == "worker1"
    assert second.source == "dpos" and set(runner.calls[1]) == set(placed)  # DPOS places the same graph
    assert {"w0/h", "w1/h", "w0/adam", "w1/adam"} <= set(runner.calls[1])  # one shared copy of each variable
    assert any(n.name.startswith("replica1/") for n in module.graph.nodes)


def test_start_rule_model_parallel_when_the_model_does_not_fit():
    """Workers with 3/4 of the MLP's single-device peak memory: no data parallelism; m-topo spreads the model."""
    probe = mlp(4)
    PassManager(parse_pipeline("profile,place{algo=single}")).run(probe, PassContext())
    from graphir.simulator import simulate

    peak = int(simulate(probe, order="enforced").peak_memory[0])
    base = resolve_cluster("2xcpu-workers")
    small = attrs.evolve(base, devices=tuple(attrs.evolve(d, memory=peak * 3 // 4) for d in base.devices))
    module = mlp(4, small)
    runner = FakeRunner({("worker0",): 10 * MS, ("worker1",): 10 * MS, TWO: 8 * MS})
    result = tune(module, CostStore("mlp_train"), runner, TuneOptions(rounds=1), replica=mlp_training_step(2))
    assert result.start is not None and (result.start.strategy, result.start.replicas) == ("m-topo", 1)
    assert not result.start.fits
    assert result.rounds[0].source == "m-topo" and set(result.rounds[0].devices) == set(TWO)
    assert len(runner.calls[0]) == 25 and not any(n.startswith("replica") for n in runner.calls[0])


def test_start_rule_falls_back_to_one_device_when_the_graph_cannot_be_replicated():
    """A batch of 3 cannot be split over 2 workers: the loop says so and starts from one device."""
    module = mlp(3)  # batch 3 is not a multiple of 2 workers
    runner = FakeRunner({("worker0",): 10 * MS, ("worker1",): 10 * MS, TWO: 8 * MS})
    result = tune(module, CostStore("mlp_train"), runner, TuneOptions(rounds=1))
    assert result.start is not None and result.start.strategy == "single" and result.start.fits
    assert "not a multiple of 2 replicas" in result.start.reason
    assert result.rounds[0].devices == {"worker0": 25}
    with pytest.raises(GraphIRError, match="--start data-parallel: the global batch 3 is not a multiple"):
        tune(mlp(3), CostStore("mlp_train"), runner, TuneOptions(rounds=1, start="data-parallel"))


# --------------------------------------------------------------------------- OS-DPOS in the loop


def matmul_module() -> Module:
    """x[64, 512] @ w[512, 512] -> y: one op that is worth splitting over two workers."""
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.F32, (64, 512)))
    w = graph.add_input("w", TensorType(DType.F32, (512, 512)))
    mm = graph.add_node("tf.MatMul", [x, w], [TensorType(DType.F32, (64, 512))], name="mm")
    graph.set_outputs([mm.outputs[0]])
    module = Module("mm", graph)
    module.set_cluster(resolve_cluster("2xcpu-workers"))
    return module


def test_os_dpos_in_the_loop_splits_a_copy_and_runs_the_split_graph():
    """A warm store: mm takes 10 ms on either worker, links were never measured (cost 0).

    DPOS alone puts mm on one worker: 10 ms. OS-DPOS splits the critical-path op in two (each part half of
    mm's roofline time: 5 ms) on both workers, plus split/concat copies of microseconds: about 5 ms, better,
    so the split is kept. The loop runs that rewritten graph (parts on both workers); the module's own
    graph is not rewritten until the split strategy is the active one.
    """

    def warm() -> CostStore:
        store = CostStore("mm")
        store.record({"mm": 10 * MS}, {"mm": "worker0"})
        store.record({"mm": 10 * MS}, {"mm": "worker1"})
        return store

    module = matmul_module()
    original = module.graph
    runner = FakeRunner({("worker0",): 10 * MS, ("worker1",): 10 * MS, TWO: 6 * MS})
    options = TuneOptions(rounds=1, placer="os-dpos", start="single")
    result = tune(module, warm(), runner, options)
    (first,) = result.rounds
    assert first.source == "os-dpos" and first.estimated_s < 6 * MS
    placed = runner.calls[0]
    parts = sorted(name for name in placed if ".part" in name)
    assert len(parts) == 2 and {placed[p] for p in parts} == set(TWO)
    assert "mm" in placed  # the concat takes over the op's name
    assert result.active.graph is not original and module.graph is result.active.graph
    assert not any(".part" in n.name for n in original.nodes)  # the loop's graph itself was never rewritten
    dpos_only = tune(matmul_module(), warm(), runner, TuneOptions(rounds=1, start="single"))
    assert dpos_only.rounds[0].estimated_s == pytest.approx(10 * MS, rel=0.05)


def test_data_parallel_start_on_the_rig_then_dpos_strategies_train_the_same_variables(rig_runs):
    """A tiny LSTM at batch 4 on 2 workers: data parallelism (2 replicas of batch 2) first, then DPOS.

    Training goes on across the DP -> DPOS switch: the loss and every variable after all rounds equal
    those of the data-parallel strategy alone run for as many steps (within 1e-6).
    """
    report = rig_report(rig_runs, "data_parallel")
    assert report["start"]["strategy"] == "data-parallel" and report["start"]["replicas"] == 2, report["start"]
    rounds = report["rounds"]
    assert rounds[0]["source"] == "data-parallel" and set(rounds[0]["devices"]) == {"worker0", "worker1"}
    switched = [r for r in rounds[1:] if r["source"] == "dpos" and r["strategy"] != rounds[0]["strategy"]]
    assert switched, rounds  # a DPOS strategy of the same graph ran after the data-parallel one
    assert report["same_keys"] and report["variables"] >= 20
    assert abs(report["tuned_loss"] - report["reference_loss"]) <= 1e-6, report
    assert report["max_var_diff"] <= 1e-6, report
