"""Fidelity benchmark: ``simulate``'s makespan against the measured step on the multi-worker rig.

``make bench-fidelity`` (or ``python -m devtools.bench_fidelity``) measures, for every model and
placement, the median step time of the placed module on the rig (``--cluster``, default
``2xcpu-workers``: local TF workers pinned one per core, transfers over TF's gRPC; see
:mod:`graphir.backends.tf.rig`) and compares it with the makespan ``simulate`` predicts, and writes
``benchmarks/results/fidelity.md`` (every pair, the summary, the load of the machine while
measuring), ``fidelity.json`` (the command, the cluster description and every row) and
``fidelity.png`` (simulated vs measured). ``--render`` rewrites the page and the plot from
``fidelity.json`` without measuring, with the notes given then (``--note``, ``--notes-file``).

One cluster description for every model: the cluster is resolved once; for ``Nxcpu-workers`` that
is the TOML ``calibrate-comm{rig=true}`` cached (run first when absent: ``--calibrate`` forces it),
merged from ``--calibration-runs`` (default 3) calibrations on fresh rigs: the fitted
worker-to-worker bandwidth and transfer CPU of one calibration vary by up to 2x between runs
(``benchmarks/results/ruler-weight-fills.md``), and that moved transfer-bound pairs by 30 %.
Per model:

1. ``profile{mode=tf-run}`` once: the unplaced module runs on worker 0 and every node's cost is its
   median traced kernel time (the same costs for every placement: the simulator must predict the
   split runs from a single-device profile);
2. per placement and execution order (``--orders``, default both): ``place{...}``, the order
   recorded on the module (:func:`graphir.simulator.record_order`), then ``simulate{congestion=C}``,
   which follows the record (one rule ``C`` for every model, ``--congestion``, default
   ``topology``: only bytes / bandwidth holds a route, and the calibrated CPU a transfer costs the
   sending and the receiving worker is booked on their one core);
3. the placed module is lowered as recorded (control dependencies along each device's order under
   ``enforced``, none under ``dynamic``) and run on the rig: ``--steps`` timed untraced steps after
   ``--warmup``, continued until they add up to ``--min-seconds`` (default 1.5 s, at most 200 steps),
   whose median is the round's step. The time floor is for the short steps: a 40 ms inference step
   timed 7 times rested on 0.3 s of samples, and its rounds spread by up to 35 %.

**Rounds** (``--rounds R``, default 3). Steps 1-2 run once per model; step 3 runs in R interleaved
rounds: round 1 measures every pair of every model, then round 2 all of them again, and so on, each
model on a freshly started rig and each pair in a fresh session, so what varies from one session to
the next (and a slow spell of the machine) is sampled instead of being fixed into one pair. Every
round runs the same placement and order, the one placed from the model's single profile (``metis``
and ``balanced`` follow the profile's costs and ``enforced`` the simulated schedule, so placing
again per round would measure another program). A pair's measured step is the median over its rounds
of each round's median; the page lists every round's value, the spread between them, and what each
round alone would have scored. The simulated side is the one simulation of that placement with that
profile: the simulator's claim under test is "given these measured costs, this placement takes X",
made once, as a user of ``profile{mode=tf-run}``, ``place`` and ``simulate`` makes it; a profile's own
run-to-run noise is part of the error being measured, not averaged away. Three rounds: a median of
three survives one odd session (of two it would be the mean), and the full benchmark stays under
about 25 minutes of rig time (``benchmarks/results/fidelity-notes.md`` has the timings).

Placements: ``single`` (every node on worker 0), ``balanced`` (``place{algo=m-etf}``: Baechi's
m-ETF, a balanced 2-way split) and ``fine`` (colocation classes dealt round-robin over the devices
in topological order: a fine-grained placement that moves much data; scheduled by
``place{algo=file}``). Held out (reported apart): ``topo``, ``metis`` and ``pipeline``.

**The pipeline pair** (``--placements=pipeline``, a training model at a ``--train-batch`` that
``--microbatches`` divides, e.g. ``--train-batch=4``): the pair runs its own module, the model's
profiled module cloned and rewritten by ``microbatch{n=M}`` (default 4: ``M`` copies of forward and
backward on ``G / M`` samples, the gradients summed into the one update) and placed by
``place{algo=pipeline stages=N}`` (one contiguous range of layers per worker, every copy of a stage
on its worker, each worker's order the 1F1B schedule's). Its costs (``--pipeline-profile``) are by
default the rewritten graph's own ``profile{mode=tf-run}`` (``own``: one more single-device
profile, of the program the pair runs, as every other pair's is of its program), so the pair
judges the simulator alone. ``rescaled`` uses the model's profile as the rewrite scales it (per
copy, the roofline ratio of the micro-batch's shapes to the step's), the prediction a user who
profiles the step once and rewrites it (as ``parallelize`` does) gets; its error adds the
rescaling's, which ``benchmarks/results/fidelity-pipeline.md`` shows is large where the roofline
is weight-bound at both batches while the measured kernel is not (the LSTM's ``[4, 512] x [512,
2048]`` MatMuls keep their whole batch-4 time per batch-1 copy: 3.7x the step's compute).
It is held out: no rule of the ruler was chosen on it.

Models: the ``*-infer`` ONNX models shipped with the ``onnx`` package (``light_*``: real
architectures at batch 1) and the zoo's training steps rebuilt at ``--train-batch`` (default 1) by
the zoo's own builder. ``lstm-train`` is the zoo's LSTM language model at a smaller size
(``zoo-config:``): the zoo's ``lstm_train`` (4 x 2048 units, vocabulary 32000, ≈265 M parameters
with Adam's slots) was OOM-killed at 11 GB in one worker; 4 x 1024 units and a vocabulary of 8000
(≈50 M parameters) fit but took about 10 minutes for their profile and six pairs (2.4-5 s a step at
load 10-12), so the benchmark runs 4 x 512 units, vocabulary 8000, 24 unrolled steps (≈17 M
parameters, ≈200 MB with Adam's slots, 4,205 nodes against 4,245). ``gpt-train`` is the
zoo's GPT (``gpt`` builder: causal self-attention blocks and a learned position embedding) at 6
layers, 384 hidden, 6 heads, 1536 feed-forward, vocabulary 8000 and sequence 128 (≈17 M parameters,
≈200 MB with Adam's slots; 3,860 nodes): the zoo's ``gpt_train`` (GPT-2 small: 12 x 768, vocabulary
50257, sequence 256, ≈124 M parameters) took about 15 minutes for its six pairs and a worker was
OOM-killed under the fine placement in dynamic order, while this size runs its profile and six pairs
in about 3.5 minutes and keeps the transformer's structure (attention, layer norms, GELU
feed-forward, the language-model head and Adam's per-variable updates).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "HELD_OUT",
    "MODELS",
    "PLACEMENTS",
    "Pair",
    "Row",
    "apply_placement",
    "main",
    "place_pairs",
    "read_json",
    "run_rounds",
    "write_json",
]

RESULTS = Path("benchmarks/results")

MODELS: dict[str, str] = {
    "squeezenet-infer": "onnx:light_squeezenet",
    "inception_v1-infer": "onnx:light_inception_v1",
    "resnet50-infer": "onnx:light_resnet50",
    "resnet50-train": "zoo:resnet50_train",
    "gpt-train": "zoo-config:gpt:layers=6,d_model=384,heads=6,d_ff=1536,vocab=8000,seq=128",
    "lstm-train": "zoo-config:lstm:layers=4,units=512,vocab=8000,seq=24",
}
"""Benchmark name -> source (``onnx:<light model>``, ``zoo:<training entry>`` or
``zoo-config:<zoo model>:<key=value,...>``: a zoo training step at another size)."""

PLACEMENTS = ("single", "balanced", "fine")
"""The scored placements (the benchmark's bar is over their pairs)."""
HELD_OUT = ("topo", "metis", "pipeline", "allreduce")
"""Held-out placements: measured and reported apart, never used to choose the ruler's rules. ``topo``:
``place{algo=m-topo}`` (Baechi's m-TOPO: a topological split that moves much data); ``metis``:
``place{algo=metis}`` (a min-cut 2-way split that moves little); ``pipeline``: the model rewritten
by ``microbatch{n=M}`` and placed by ``place{algo=pipeline}`` (see :data:`REWRITING`); ``allreduce``: the
model rewritten by ``data-parallel{replicas=N sync=allreduce}`` (one replica per worker, mirrored
variables, the gradients' ring all-reduce) and placed by ``place{algo=pipeline stages=1}``."""
REWRITING = ("pipeline", "allreduce")
"""Placements that run a rewritten graph, not the model as imported: not in the default
``--placements`` (training models only, ``--train-batch`` a multiple of ``--microbatches``)."""
ORDERS = ("enforced", "dynamic")
RULES = ("pair", "port", "task", "topology")


@dataclasses.dataclass
class Row:
    """One (model, placement) pair."""

    model: str
    placement: str
    order: str
    nodes: int
    devices_used: int
    transfers: int
    transfer_bytes: int
    measured_s: float
    simulated_s: float
    times_s: list[float]
    load: float
    measured_transfers: list[tuple[int, float, float]] = dataclasses.field(default_factory=list)
    """Per tensor sent between tasks in one traced step: (bytes, measured s, link-model s)."""
    simulated_by_rule: dict[str, float] = dataclasses.field(default_factory=dict)
    """The makespan under every congestion rule (the table uses the ``--congestion`` one)."""
    rounds_s: list[float] = dataclasses.field(default_factory=list)
    """The median step of each round, in round order (:attr:`measured_s` is their median; empty in
    runs written before ``--rounds``, which measured every pair once: :attr:`measured_s` alone)."""

    @property
    def round_values(self) -> list[float]:
        """The per-round medians (one value, :attr:`measured_s`, for a run measured in one session)."""
        return list(self.rounds_s) or [self.measured_s]

    @property
    def spread(self) -> float:
        """(largest − smallest per-round median) / :attr:`measured_s`: 0 for one round."""
        values = self.round_values
        return (max(values) - min(values)) / self.measured_s

    def add_round(self, times_s: Sequence[float], load: float) -> None:
        """Record one round's timed steps: its median joins :attr:`rounds_s`, :attr:`measured_s` is their median."""
        self.rounds_s.append(float(statistics.median(times_s)))
        self.times_s.extend(float(t) for t in times_s)
        self.load = max(self.load, load)
        self.measured_s = float(statistics.median(self.rounds_s))

    @property
    def error(self) -> float:
        """(simulated − measured) / measured."""
        return (self.simulated_s - self.measured_s) / self.measured_s


_CONFIG_BUILD = """
import sys
from pathlib import Path
from graphir.tools import zoo
config = tuple((k, int(v)) for k, v in (item.split("=") for item in sys.argv[3].split(",")))
graph_def, _ = zoo.build_train_graphdef(sys.argv[1], int(sys.argv[2]), config)
Path(sys.argv[4]).write_bytes(graph_def.SerializeToString(deterministic=True))
"""


def _load(source: str, train_batch: int, scratch: Path | None = None) -> Any:
    kind, _, name = source.partition(":")
    if kind == "zoo-config":  # a zoo model at another size, built in a fresh process (as the zoo does)
        import subprocess

        from tensorflow.core.framework import graph_pb2

        from graphir.importers.tf import import_graphdef

        model, _, config = name.partition(":")
        path = Path(scratch or tempfile.gettempdir()) / f"{model}-{config.replace(',', '-')}-b{train_batch}.pb"
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", KERAS_BACKEND="tensorflow")
        command = [sys.executable, "-c", _CONFIG_BUILD, model, str(train_batch), config, str(path)]
        subprocess.run(command, check=True, env=env, capture_output=True)
        graph_def = graph_pb2.GraphDef()
        graph_def.ParseFromString(path.read_bytes())
        return import_graphdef(graph_def, name=f"{model}_train_b{train_batch}", source=f"<{model} {config}>")
    if kind == "onnx":
        import onnx

        from graphir.importers import load_module

        return load_module(Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"{name}.onnx")
    import graphir.tools.zoo_source as zoo_source
    from graphir.importers.tf import import_graphdef

    builder = zoo_source.zoo_builder(name)
    if builder is None:
        raise SystemExit(f"bench-fidelity: '{name}' is not a zoo training entry")
    return import_graphdef(
        builder(train_batch), name=f"{name}_b{train_batch}", source=f"<{name} at batch {train_batch}>"
    )


def fine_placement(module: Any) -> dict[str, str]:
    """Colocation classes dealt round-robin over the cluster's devices, in topological order."""
    devices = list(module.cluster.device_names)
    assigned: dict[str, str] = {}
    mapping = {}
    turn = 0
    for node in module.graph.index().nodes:
        key = node.colocate or f"node:{node.name}"
        if key not in assigned:
            assigned[key] = devices[turn % len(devices)]
            turn += 1
        mapping[node.name] = assigned[key]
    return mapping


PIPELINE_PROFILES = ("own", "rescaled")
"""Where the pipeline pair's costs come from (``--pipeline-profile``; module docstring)."""


def rewrite_for(
    module: Any, placement: str, microbatches: int, seed: int, profile: str = "own", trace_steps: int = 5
) -> Any:
    """The module a placement runs: ``module`` itself, or for ``pipeline`` (``allreduce``) a rewritten copy.

    ``pipeline`` clones the profiled module and rewrites the clone with ``microbatch{n=M}``
    (``allreduce``: ``data-parallel{replicas=N sync=allreduce}``, one replica per device). Its costs:
    ``own``, the rewritten graph's own ``profile{mode=tf-run}`` (unplaced, on worker 0, as the
    model's profile; every cost cleared first, so a node that ran no kernel costs 0 there too);
    ``rescaled``, the model's profile as the rewrite scales it per copy by the roofline ratio of
    the micro-batch's shapes to the step's (:func:`graphir.passes.transform.rebatch.scaled_costs`),
    what a user who profiles the step once and rewrites it (as ``parallelize`` does) is told.
    """
    if placement not in REWRITING:
        return module
    from graphir.clone import clone_module
    from graphir.driver import load_builtin_passes
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline

    load_builtin_passes()
    if profile not in PIPELINE_PROFILES:
        raise ValueError(f"pipeline profile must be one of {', '.join(PIPELINE_PROFILES)}, got '{profile}'")
    rewritten = clone_module(module)
    rewritten.set_cluster(module.cluster)
    rewrite = (
        f"data-parallel{{replicas={len(module.cluster.devices)} sync=allreduce}}"
        if placement == "allreduce"
        else f"microbatch{{n={microbatches}}}"
    )
    PassManager(parse_pipeline(rewrite)).run(rewritten, PassContext(seed=seed))
    if profile == "own":
        for node in rewritten.graph.nodes:
            node.cost = None
        PassManager(parse_pipeline(f"profile{{mode=tf-run iterations={trace_steps}}}")).run(
            rewritten, PassContext(seed=seed)
        )
    return rewritten


def _place(module: Any, placement: str, order: str, congestion: str, scratch: Path, seed: int) -> Any:
    from graphir.driver import load_builtin_passes
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline
    from graphir.simulator import record_order

    load_builtin_passes()
    for node in module.graph.nodes:
        node.device = None
        node.order = None
    if placement == "single":
        place = "place{algo=single}"
    elif placement == "balanced":
        place = "place{algo=m-etf}"
    elif placement == "topo":
        place = "place{algo=m-topo}"
    elif placement == "metis":
        place = "place{algo=metis}"
    elif placement == "pipeline":  # one stage per device (the module is micro-batched: rewrite_for)
        place = f"place{{algo=pipeline stages={len(module.cluster.devices)}}}"
    elif placement == "allreduce":  # one replica per device (the module is data-parallel: rewrite_for)
        place = "place{algo=pipeline stages=1}"
    else:
        path = scratch / f"{module.name}-fine.json"
        path.write_text(json.dumps(fine_placement(module)))
        place = f"place{{algo=file path={path}}}"
    PassManager(parse_pipeline(place)).run(module, PassContext(seed=seed))
    record_order(module, order)
    return PassManager(parse_pipeline(f"simulate{{congestion={congestion}}}")).run(module, PassContext(seed=seed))


def simulated_step(module: Any, congestion: str) -> float:
    """The step ``simulate`` predicts: the makespan under ``congestion`` plus the step's fixed cost.

    The makespan follows the recorded order; the fixed cost is the cluster's
    :attr:`graphir.cluster_model.Cluster.step_overhead`, which the measured wall time includes and
    the graph's schedule does not.
    """
    from graphir.simulator import simulate

    return float(simulate(module, congestion=congestion).makespan) + module.cluster.step_overhead


def link_time(links: Any, cluster: Any, src: str, dst: str, nbytes: int) -> float:
    """The link model's time for one transfer between two TF devices, alone on its route."""
    position = {device.tf_device: k for k, device in enumerate(cluster.devices)}
    return float(links.transfer_time(nbytes, position[src], position[dst]))


def _loadavg() -> float:
    return os.getloadavg()[0]


@dataclasses.dataclass
class Pair:
    """One (model, placement, order) pair: its row and its placement, made once and run in every round.

    Attributes:
        row: the pair's row (the simulated side filled when placed, the measured side round by round).
        placed: IR node name -> ``(device, order)`` as the placer left it (reapplied before each run).
        module: the module the pair runs when it is not the model's (a rewritten graph:
            :func:`rewrite_for`); ``None``: the model's module, shared by its other pairs.
    """

    row: Row
    placed: dict[str, tuple[str | None, int | None]]
    module: Any = None

    def target(self, module: Any) -> Any:
        """The module this pair runs, given the model's."""
        return module if self.module is None else self.module


def snapshot_placement(module: Any) -> dict[str, tuple[str | None, int | None]]:
    """Every node's ``(device, order)``: the placement as :func:`apply_placement` restores it."""
    return {node.name: (node.device, node.order) for node in module.graph.nodes}


def apply_placement(module: Any, pair: Pair) -> None:
    """Put ``module`` back in ``pair``'s placement and execution order (the same module serves every pair)."""
    from graphir.simulator import record_order

    for node in module.graph.nodes:
        node.device, node.order = pair.placed[node.name]
    record_order(module, pair.row.order)


def place_pairs(module: Any, name: str, cluster: Any, args: argparse.Namespace, scratch: Path) -> list[Pair]:
    """Place and simulate ``module`` (profiled) under every placement and order, once: the pairs to measure.

    Each placement is computed here, from the one profile, and is the placement run in every round
    (``metis`` and ``balanced`` depend on the profile's costs and the ``enforced`` order on the
    simulated schedule, so recomputing them per round would measure other programs).
    """
    from graphir.simulator import simulate

    pairs = []
    for placement in args.placements:
        target = rewrite_for(
            module,
            placement,
            getattr(args, "microbatches", 4),
            args.seed,
            getattr(args, "pipeline_profile", "own"),
            getattr(args, "trace_steps", 5),
        )
        for order in args.orders:
            _place(target, placement, order, args.congestion, scratch, args.seed)
            result = simulate(target, congestion=args.congestion)  # the recorded order
            if args.save_modules is not None:  # the placed, profiled module, to re-simulate offline
                from graphir.printer import print_module

                args.save_modules.mkdir(parents=True, exist_ok=True)
                (args.save_modules / f"{name}-{placement}-{order}.gir").write_text(print_module(target))
            row = Row(
                name,
                placement,
                order,
                len(target.graph),
                len({n.device for n in target.graph.nodes}),
                int(result.transfers),
                int(sum(result.link_bytes.values())),
                float("nan"),
                float(result.makespan) + cluster.step_overhead,
                [],
                0.0,
                simulated_by_rule={rule: simulated_step(target, rule) for rule in RULES},
            )
            pairs.append(Pair(row, snapshot_placement(target), None if target is module else target))
    return pairs


def prepare_model(
    name: str, source: str, cluster: Any, args: argparse.Namespace, scratch: Path, log: Any
) -> tuple[Any, list[Pair]]:
    """Load ``name``, profile it once on the rig (``profile{mode=tf-run}``), place and simulate every pair."""
    from graphir.driver import load_builtin_passes
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline

    load_builtin_passes()
    module = _load(source, args.train_batch, scratch)
    module.set_cluster(cluster)
    log(f"{name}: {len(module.graph)} nodes; profile{{mode=tf-run}}")
    PassManager(parse_pipeline(f"profile{{mode=tf-run iterations={args.trace_steps}}}")).run(
        module, PassContext(seed=args.seed)
    )
    return module, place_pairs(module, name, cluster, args, scratch)


def measure_round(
    module: Any, pairs: Sequence[Pair], cluster: Any, args: argparse.Namespace, index: int, log: Any
) -> None:
    """Round ``index`` of one model: every pair run once on a freshly started rig, in its fixed placement.

    A new rig (worker processes) per model and round and a new session per pair: what varies from
    session to session is sampled by the rounds. The first round also traces one step per pair
    (its transfers fill the page's transfer columns); later rounds only time.
    """
    from graphir.backends.tf.rig import rig, run_on_rig
    from graphir.links import LinkModel

    links = LinkModel.from_cluster(cluster, args.congestion)
    with rig(cluster) as servers:
        for pair in pairs:
            target = pair.target(module)
            apply_placement(target, pair)
            row = pair.row
            load = _loadavg()
            trace = 1 if index == 0 else 0
            run = run_on_rig(
                target,
                servers,
                steps=args.steps,
                warmup=args.warmup,
                trace_steps=trace,
                seed=args.seed,
                min_seconds=args.min_seconds,
            )
            row.add_round(run.times_s, max(load, _loadavg()))
            if index == 0:
                row.measured_transfers = [
                    (n, seconds, link_time(links, cluster, src, dst, n)) for _, src, dst, n, seconds in run.transfers
                ]
            log(
                f"{row.model} {row.placement} {row.order} round {index + 1}: {row.rounds_s[-1]:.4g} s "
                f"(median so far {row.measured_s:.4g} s, simulated {row.simulated_s:.4g} s, {row.error:+.1%}), "
                f"load {row.load:.2f}"
            )


def run_rounds(
    models: Sequence[str],
    rounds: int,
    prepare: Any,
    measure: Any,
    done: Any = None,
) -> list[Row]:
    """Measure every model's pairs in ``rounds`` interleaved rounds; the rows, in model and pair order.

    ``prepare(model) -> (module, pairs)`` runs once per model, in the first round (profile, place,
    simulate); ``measure(module, pairs, round)`` runs every round for every model: round 1 over all
    models, then round 2 over all of them, and so on, so a slow spell of the machine lands in one
    round of many pairs rather than in every round of one pair. ``done(rows)`` is called after each
    model's round (the partial results written, so an interrupted run keeps them).
    """
    prepared: dict[str, tuple[Any, list[Pair]]] = {}
    for index in range(rounds):
        for name in models:
            if name not in prepared:
                prepared[name] = prepare(name)
            module, pairs = prepared[name]
            measure(module, pairs, index)
            if done is not None:
                done([pair.row for model in models if model in prepared for pair in prepared[model][1]])
    return [pair.row for name in models for pair in prepared[name][1]]


def write_json(
    rows: Sequence[Row], path: Path, command: str = "", cluster_text: str = "", rule: str = "topology"
) -> None:
    """The run as JSON: its command, cluster description and rule, then every row on a line of its own.

    Compact (rows carry every measured transfer); :func:`read_json` reads it back for ``--render``.
    """
    head = json.dumps({"command": command, "cluster": cluster_text, "congestion": rule})[:-1]
    body = ",\n".join(json.dumps(dataclasses.asdict(r), separators=(",", ":")) for r in rows)
    path.write_text(f'{head}, "rows": [\n{body}\n]}}\n')


def read_json(path: Path) -> tuple[list[Row], str, str, str]:
    """``(rows, command, cluster text, congestion rule)`` of a run written by :func:`write_json`."""
    data = json.loads(path.read_text())
    return [Row(**row) for row in data["rows"]], data["command"], data["cluster"], data["congestion"]


def _summary(rows: Sequence[Row]) -> tuple[float, float]:
    """Median and worst |error| of ``rows`` (NaN without rows)."""
    errors = [abs(r.error) for r in rows]
    return (float(statistics.median(errors)), max(errors)) if errors else (float("nan"), float("nan"))


def _summary_text(rows: Sequence[Row]) -> str:
    """One line: the scored pairs' median and worst |error|, then the held-out pairs' (if any)."""
    scored = [r for r in rows if r.placement not in HELD_OUT]
    held_out = [r for r in rows if r.placement in HELD_OUT]
    median, worst = _summary(scored)
    text = f"{len(scored)} pairs: median |error| {median:.1%}, worst {worst:.1%}" if scored else "no scored pairs"
    if held_out:
        median, worst = _summary(held_out)
        text += f"; held out: {len(held_out)} pairs: median |error| {median:.1%}, worst {worst:.1%}"
    return text


def write_markdown(
    rows: Sequence[Row], path: Path, command: str, cluster_text: str, notes: Sequence[str], rule: str = "topology"
) -> None:
    """The results page: every pair, the summary, the command, the cluster description."""
    held_out = [r for r in rows if r.placement in HELD_OUT]
    held_out_lines = (
        [
            f"Held-out pairs (placements {', '.join(HELD_OUT)}; never used to choose the ruler's rules), apart: "
            f"**{len(held_out)} pairs, median |error| {_summary(held_out)[0]:.1%}, "
            f"worst {_summary(held_out)[1]:.1%}**.",
            "",
        ]
        if held_out
        else []
    )
    loads = [r.load for r in rows]
    rows_scored = [r for r in rows if r.placement not in HELD_OUT]
    median, worst = _summary(rows_scored)
    lines = [
        "# Fidelity: simulated vs measured step time on the multi-worker rig",
        "",
        f"Command: `{command}`",
        "",
        "Measured: median wall time of untraced `session.run` steps of the placed, lowered module on the "
        "rig (local `tf.distribute.Server` workers, one pinned core and one thread each, transfers over "
        f"TF's gRPC){_measured_how(rows)}. Simulated: `simulate{{congestion={rule}}}` under the execution "
        "order the placement recorded (the lowering adds the per-device control dependencies under `enforced` and "
        "none under `dynamic`), with `profile{mode=tf-run}` costs (one single-worker run per model, the one the "
        "placements were made from) and the calibrated cluster below. "
        "Error = (simulated − measured) / measured.",
        "",
        (
            f"**{len(rows_scored)} pairs: median |error| {median:.1%}, worst {worst:.1%}** "
            "(target: median ≤ 10 %, worst ≤ 25 % over ≥ 15 pairs)."
            if rows_scored
            else "No scored pairs in this run (held-out pairs only, below)."
        )
        + f" 1-minute load average while measuring: {min(loads, default=0):.2f} – {max(loads, default=0):.2f}.",
        "",
        *[
            f"- `{order}` only: {len(chosen)} pairs, median |error| {_summary(chosen)[0]:.1%}, "
            f"worst {_summary(chosen)[1]:.1%}."
            for order in dict.fromkeys(r.order for r in rows_scored)
            if (chosen := [r for r in rows_scored if r.order == order])
        ],
        "",
        *held_out_lines,
        *_rounds_lines(rows),
        *notes,
        "",
        "How to read it:",
        "",
        "- *single*: every node on worker 0; *balanced*: `place{algo=m-etf}`; *fine*: colocation classes dealt "
        "round-robin over the workers in topological order (much data moved); held out: *topo* "
        "(`place{algo=m-topo}`), *metis* (`place{algo=metis}`) and *pipeline* (the step rewritten by "
        "`microbatch{n=M}`, one copy of forward and backward per micro-batch, placed by "
        "`place{algo=pipeline}`: one stage per worker under the 1F1B order, enforced or not; its nodes are "
        "the rewritten graph's, its costs the rewritten graph's own single-worker profile, or with "
        "`--pipeline-profile=rescaled` in the command the model's profile scaled per copy by the roofline ratio). "
        "All are simulated with "
        "the same per-node costs, measured once on one worker; *single* is that profiled configuration "
        "(its costs are scaled to the same run's untraced step, see `profile{mode=tf-run}`), so its rows "
        "check the per-op and per-step bookkeeping, and the split placements are the predictions.",
        "- *transfers sim. / meas.*: tensors the simulator sends between devices / tensors TensorFlow sent "
        "between tasks in one traced step (a Send/Recv pair per consumer task).",
        "- *transfer time meas. / model*: median over the measured tensors of (producer kernel end → "
        "receiver's `RecvTensor` end) divided by the cluster description's uncontended time "
        f"(the link model's `transfer_time` under `{rule}`: `[overheads] transfer` + latency + the largest of "
        "bytes / bandwidth and the calibrated send and receive CPU). Above 1: transfers wait for the pinned core "
        "that also computes (gRPC threads share it), which the CPU charge books.",
        "- *simulated* is the makespan plus the fixed cost of a step (client → master → worker RPCs, feeding "
        "the inputs, fetching the outputs: `[overheads] step` of the cluster file, measured by the calibration), "
        "which the measured wall time includes and the schedule of the graph does not.",
        "",
        "| model | placement | order | nodes | devices | transfers sim. / meas. | MiB moved (sim.) | "
        "transfer time meas. / model (median) | measured (s) | rounds (s) | spread | simulated (s) | error | load |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        rounds = " / ".join(f"{v:.4g}" for v in r.round_values)
        spread = f"{r.spread:.1%}" if len(r.round_values) > 1 else "—"
        lines.append(
            f"| {r.model} | {r.placement} | {r.order} | {r.nodes} | {r.devices_used} | {r.transfers} / "
            f"{len(r.measured_transfers)} | {r.transfer_bytes / 2**20:.1f} | {_transfer_ratio(r)} | "
            f"{r.measured_s:.4g} | {rounds} | {spread} | {r.simulated_s:.4g} | {r.error:+.1%} | {r.load:.2f} |"
        )
    samples = [(n, measured) for r in rows for n, measured, _ in r.measured_transfers]
    if len(samples) >= 2:
        from graphir.passes.profile.calibrate_comm import fit_linear

        latency, bandwidth, r2 = fit_linear(samples, relative=True)
        lines += [
            "",
            f"The same line fitted to the {len(samples)} transfers measured in these model runs (contended, "
            f"relative least squares): intercept {latency * 1e6:.0f} us, {bandwidth / 1e9:.2f} GB/s, "
            f"R² {r2:.2f}; compare with the micro-benchmark calibration below.",
        ]
    plot = path.with_suffix(".png").name  # the plot written next to the page (fidelity.png for the default --out)
    lines += ["", f"![simulated vs measured]({plot})", "", "Cluster description used:", "", "```toml"]
    lines += [cluster_text.rstrip(), "```", ""]
    path.write_text("\n".join(lines))


def _rounds(rows: Sequence[Row]) -> int:
    """How many rounds the run measured (1 for runs written before ``--rounds``)."""
    return max((len(r.round_values) for r in rows), default=1)


def _measured_how(rows: Sequence[Row]) -> str:
    """The page's words for how a pair's measured step was taken."""
    rounds = _rounds(rows)
    counts = [len(r.times_s) // len(r.round_values) for r in rows if r.times_s]
    steps = ""
    if counts and max(counts) > min(counts):
        steps = (
            f" ({min(counts)}–{max(counts)} timed steps per session: at least `--steps`, and a short step timed "
            "until its steps add up to `--min-seconds`)"
        )
    if rounds == 1:
        return steps + ", one session per pair"
    return steps + (
        f", in {rounds} interleaved rounds (every pair once per round, a fresh rig per model and round and a fresh "
        "session per pair, the same placement in every round): a pair's measured step is the median of its "
        "rounds' medians"
    )


def _rounds_lines(rows: Sequence[Row]) -> list[str]:
    """The spread across rounds, and what each round alone would have scored (nothing for a one-round run)."""
    rounds = _rounds(rows)
    if rounds == 1:
        return []
    widest = max(rows, key=lambda r: r.spread)
    spreads = [r.spread for r in rows]
    lines = [
        f"Spread across rounds, (largest − smallest round median) / measured: median {statistics.median(spreads):.1%}, "
        f"largest {widest.spread:.1%} ({widest.model} {widest.placement} {widest.order}: "
        f"{' / '.join(f'{v:.4g}' for v in widest.round_values)} s).",
        "",
    ]
    scored = [r for r in rows if r.placement not in HELD_OUT and len(r.rounds_s) == rounds]
    if scored:
        alone = []
        for index in range(rounds):
            one = [dataclasses.replace(r, measured_s=r.rounds_s[index]) for r in scored]
            median, worst = _summary(one)
            alone.append(f"round {index + 1}: median {median:.1%}, worst {worst:.1%}")
        lines += [
            f"The {len(scored)} scored pairs judged on one round alone (what one session per pair would have "
            f"reported): {'; '.join(alone)}.",
            "",
        ]
    return lines


def _transfer_ratio(row: Row) -> str:
    ratios = [measured / model for _, measured, model in row.measured_transfers if model > 0]
    return f"{statistics.median(ratios):.2f}" if ratios else "—"


def write_plot(rows: Sequence[Row], path: Path) -> None:
    """Scatter of simulated against measured (log-log) with the y = x line and ±10 % / ±25 % bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 6))
    markers = {
        "single": "o",
        "balanced": "s",
        "fine": "^",
        "topo": "v",
        "metis": "P",
        "pipeline": "D",
        "allreduce": "X",
    }
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, model in enumerate(dict.fromkeys(r.model for r in rows)):
        color = colors[k % len(colors)]  # one colour per model; dynamic pairs hollow, in the same colour
        for placement, marker in markers.items():
            for order, fill in (("enforced", color), ("dynamic", "none")):
                chosen = [r for r in rows if r.model == model and r.placement == placement and r.order == order]
                if chosen:
                    axes.scatter(
                        [r.measured_s for r in chosen],
                        [r.simulated_s for r in chosen],
                        marker=marker,
                        label=f"{model} {placement} {order}",
                        facecolors=fill,
                        edgecolors=color,
                    )
    values = [v for r in rows for v in (r.measured_s, r.simulated_s)]
    low, high = min(values) / 1.5, max(values) * 1.5
    axes.plot([low, high], [low, high], color="black", linewidth=1)
    for band, style in ((0.10, "--"), (0.25, ":")):
        axes.plot([low, high], [low * (1 + band), high * (1 + band)], color="grey", linestyle=style, linewidth=0.8)
        axes.plot([low, high], [low * (1 - band), high * (1 - band)], color="grey", linestyle=style, linewidth=0.8)
    axes.set(xscale="log", yscale="log", xlim=(low, high), ylim=(low, high))
    axes.set_xlabel("measured median step (s)")
    axes.set_ylabel("simulated makespan (s)")
    axes.set_title("graphir simulate vs the 2-worker TF rig")
    axes.legend(fontsize=6, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def resimulate(args: argparse.Namespace) -> int:
    """``--resimulate DIR``: the run's measured rows against the ruler now (another cluster file, rule or code).

    Every row's module is ``DIR/MODEL-PLACEMENT-ORDER.gir`` (``--save-modules``: placed, ordered and
    profiled as measured); it is simulated on ``--cluster`` under ``--congestion`` and the order it
    recorded. The measured times stay; the page, the JSON and the plot are rewritten (``--out``).
    """
    from graphir.cluster import ClusterError
    from graphir.driver.clusters import resolve_cluster
    from graphir.parser import parse_module

    source = args.out.with_suffix(".json")
    if not source.is_file():
        print(f"bench-fidelity: no results '{source}' to re-simulate", file=sys.stderr)
        return 1
    rows, command, _, _ = read_json(source)
    try:
        cluster = resolve_cluster(args.cluster)
    except ClusterError as err:
        print(f"bench-fidelity: {err}", file=sys.stderr)
        return 1
    cluster_path = Path(args.cluster)
    cluster_text = cluster_path.read_text() if cluster_path.is_file() else args.cluster
    for row in rows:
        path = args.resimulate / f"{row.model}-{row.placement}-{row.order}.gir"
        if not path.is_file():
            print(f"bench-fidelity: no module '{path}' (write it with --save-modules)", file=sys.stderr)
            return 1
        module = parse_module(path.read_text(), str(path))
        module.set_cluster(cluster)
        row.simulated_by_rule = {rule: simulated_step(module, rule) for rule in RULES}
        row.simulated_s = row.simulated_by_rule[args.congestion]
    command = f"{command}; re-simulated: python -m devtools.bench_fidelity --resimulate {args.resimulate} " + (
        f"--cluster {args.cluster} --congestion {args.congestion} --out {args.out}"
    )
    write_markdown(rows, args.out, command, cluster_text, args.note, args.congestion)
    write_json(rows, source, command, cluster_text, args.congestion)
    write_plot(rows, args.out.with_suffix(".png"))
    print(f"bench-fidelity: re-simulated: {_summary_text(rows)}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="bench_fidelity", description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument(
        "--placements",
        default=",".join(p for p in PLACEMENTS + HELD_OUT if p not in REWRITING),
        help=f"comma-separated, of {', '.join(PLACEMENTS + HELD_OUT)} (reported apart: {', '.join(HELD_OUT)}; "
        f"not by default: {', '.join(REWRITING)}, training models at a --train-batch that --microbatches divides)",
    )
    parser.add_argument(
        "--microbatches", type=int, default=4, help="pipeline: the micro-batches of microbatch{n=M} (default 4)"
    )
    parser.add_argument(
        "--pipeline-profile",
        default="own",
        choices=PIPELINE_PROFILES,
        help="pipeline: the rewritten graph's own tf-run profile (default), or the model's scaled by the rewrite",
    )
    parser.add_argument("--orders", default=",".join(ORDERS), help="execution orders, each recorded and run as such")
    parser.add_argument("--cluster", default="2xcpu-workers")
    parser.add_argument("--congestion", default="topology", choices=RULES)
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="interleaved rounds: every pair measured once per round, on a fresh rig and session, in the one "
        "placement made from the first round's profile; a pair's measured step is the median of its rounds' medians",
    )
    parser.add_argument("--steps", type=int, default=7, help="timed steps per pair and round (median)")
    parser.add_argument(
        "--min-seconds",
        type=float,
        default=1.5,
        help="keep timing a session's steps until they add up to this many seconds (at most 200 steps): a short "
        "step's median rests on more samples",
    )
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--trace-steps", type=int, default=5, help="traced steps of the profile run")
    parser.add_argument("--train-batch", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--calibrate", action="store_true", help="recalibrate the rig's cluster description first")
    parser.add_argument(
        "--calibration-runs",
        type=int,
        default=3,
        help="calibrations on fresh rigs merged into the one cluster description (calibrate-comm --runs; "
        "one calibration's fitted bandwidth and transfer CPU vary by up to 2x from run to run)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "fidelity.md")
    parser.add_argument("--note", action="append", default=[], help="a line added above the table")
    parser.add_argument("--notes-file", type=Path, help="a Markdown file whose text is added above the table")
    parser.add_argument(
        "--save-modules",
        type=Path,
        help="also write every placed, profiled module as DIR/MODEL-PLACEMENT-ORDER.gir (to re-simulate offline)",
    )
    parser.add_argument(
        "--resimulate",
        type=Path,
        metavar="DIR",
        help="measure nothing: re-simulate the run's JSON (--out) rows from the modules a --save-modules DIR run "
        "wrote, with --cluster and --congestion, and write the page with the new simulated times",
    )
    parser.add_argument(
        "--render", action="store_true", help="measure nothing: rewrite the page and plot from the run's JSON (--out)"
    )
    args = parser.parse_args(argv)
    if args.notes_file is not None:
        if not args.notes_file.is_file():
            print(f"bench-fidelity: no notes file '{args.notes_file}'", file=sys.stderr)
            return 1
        args.note.append(args.notes_file.read_text().rstrip())
    if args.resimulate is not None:
        return resimulate(args)
    if args.render:
        source = args.out.with_suffix(".json")
        if not source.is_file():
            print(f"bench-fidelity: no results '{source}' to render", file=sys.stderr)
            return 1
        rows, command, cluster_text, rule = read_json(source)
        write_markdown(rows, args.out, command, cluster_text, args.note, rule)
        write_plot(rows, args.out.with_suffix(".png"))
        return 0
    if args.rounds < 1 or args.steps < 1 or args.calibration_runs < 1:
        print("bench-fidelity: --rounds, --steps and --calibration-runs must be at least 1", file=sys.stderr)
        return 1
    args.placements = [p for p in args.placements.split(",") if p]
    args.orders = [o for o in args.orders.split(",") if o]
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS] + [p for p in args.placements if p not in PLACEMENTS + HELD_OUT]
    unknown += [o for o in args.orders if o not in ORDERS]
    if unknown:
        print(f"bench-fidelity: unknown {', '.join(unknown)}", file=sys.stderr)
        return 1
    rewriting = [p for p in args.placements if p in REWRITING]
    if rewriting:
        inference = [m for m in models if not MODELS[m].startswith("zoo")]
        split = "pipeline" in rewriting and (args.microbatches < 1 or args.train_batch % args.microbatches)
        if split or inference:
            print(
                f"bench-fidelity: {', '.join(rewriting)} needs training models"
                + (f" (not {', '.join(inference)})" if inference else "")
                + (
                    f" and a --train-batch ({args.train_batch}) that --microbatches ({args.microbatches}) divides"
                    if "pipeline" in rewriting
                    else ""
                ),
                file=sys.stderr,
            )
            return 1
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from graphir.backends.host import rig_cache_path
    from graphir.driver.clusters import resolve_cluster

    def log(message: str) -> None:
        print(f"bench-fidelity: {message}", file=sys.stderr, flush=True)

    count = args.cluster.removesuffix("xcpu-workers")
    if count.isdigit() and (args.calibrate or not rig_cache_path(int(count)).is_file()):
        from graphir.passes.profile.calibrate_comm import main as calibrate

        log(f"calibrating {args.cluster} on the rig (load {_loadavg():.2f})")
        calibrate(
            ["--rig", f"--cluster={args.cluster}", "--max-bytes", str(16 << 20), "--runs", str(args.calibration_runs)]
        )
    cluster = resolve_cluster(args.cluster)
    if count.isdigit():
        cluster_text = Path(rig_cache_path(int(count))).read_text()
    else:  # a cluster file (e.g. a committed run's description) or another spec
        cluster_text = Path(args.cluster).read_text() if Path(args.cluster).is_file() else args.cluster
    scratch_dir = tempfile.TemporaryDirectory(prefix="graphir-fidelity-")  # the fine placements' JSON files
    scratch = Path(scratch_dir.name)
    start = time.perf_counter()
    command = "python -m devtools.bench_fidelity " + " ".join(argv if argv is not None else sys.argv[1:])

    def write(rows: list[Row]) -> None:  # after every model's round, so partial results survive an interruption
        write_markdown(rows, args.out, command.strip(), cluster_text, args.note, args.congestion)
        write_json(rows, args.out.with_suffix(".json"), command.strip(), cluster_text, args.congestion)
        write_plot(rows, args.out.with_suffix(".png"))

    rows = run_rounds(
        models,
        args.rounds,
        lambda name: prepare_model(name, MODELS[name], cluster, args, scratch, log),
        lambda module, pairs, index: measure_round(module, pairs, cluster, args, index, log),
        write,
    )
    scratch_dir.cleanup()
    log(f"{time.perf_counter() - start:.0f} s: {_summary_text(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
