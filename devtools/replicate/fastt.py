"""FastT Tables 1 and 6 on the simulator: TF-slim data parallelism vs DPOS vs OS-DPOS on 1/2/4/8 GPUs.

Usage::

    python -m devtools.replicate.fastt [--quick] [--out DIR] [--quiet] [--no-verify]
        [--strategies=data-parallel,dp-gpu,dpos,os-dpos] [--max-nodes=N] [--models=a,b] [--gpus=n,m]
        [--kernel-dispatch=SECONDS]

Writes ``DIR/replicate_fastt.md`` (default ``benchmarks/results``). ``--strategies`` runs only the
named placements (``data-parallel`` always; default: all four); the table shows ``not run`` for the
others and leaves out Table 6 without ``dpos`` and ``os-dpos``. ``--max-nodes=N`` runs DPOS and OS-DPOS
only on data-parallel graphs of at most ``N`` nodes (a time budget; ResNet-200 x 8 has 157,950).
``--models=resnet200`` (zoo entries without ``_train``: ``vgg19``, ``resnet200``, ``inception_v3``) and
``--gpus=8`` (of 2, 4, 8) run only those rows (each model's 1-GPU column is measured all the same), e.g.
one cell alone: ``--models=resnet200 --gpus=8``. ``--kernel-dispatch=10e-6`` gives every GPU an
asynchronous kernel dispatch time (:attr:`graphir.cluster_model.Device.kernel_dispatch`; the preset has
none), an experiment recorded in ``benchmarks/results/occupancy.md``.

**Setting.** FastT (§6) trains with *strong scaling*: a fixed global batch split over the GPUs,
TF-slim's data parallelism as the baseline, and, for a model that fits one GPU, OS-DPOS (and DPOS,
which it calls) started from the *data-parallel graph* (§5.2: the model replicated once per device).
Here, for each zoo training graph and each device count ``n``:

1. ``data-parallel{replicas=n batch=G}`` (:mod:`graphir.passes.transform.replicate`) builds the replicated graph:
   ``n`` copies of the forward and backward pass on ``G / n`` samples each (types from the model
   re-traced at that batch), shared variables, gradients averaged (``AddN`` and ``1/n``) before the
   single Adam update; then analytical ``profile`` for the cluster's V100s.
2. Placements of that same graph, each simulated with ``simulate{congestion=topology}`` (the judge;
   ``order=dynamic`` for the data-parallel ones, whose TF-slim graph has no control dependencies, so
   TensorFlow's executor runs whatever is ready; ``order=enforced`` for FastT's, §6.1):
   **DP**, TF-slim's default data parallelism, FastT's baseline (``place{algo=data-parallel
   variables=cpu sums=first-replica inputs=cpu}`` on a copy of the graph with TF-slim's issue order,
   :func:`graphir.passes.transform.data_parallel.issue_inputs_after_reads`: clone ``i`` on GPU
   ``i``; every variable, its optimizer slots and its update on the host CPU; each clone reads the
   weights from the host over PCIe; the clones' gradient sums on GPU 0, where TensorFlow's placer
   puts the unplaced ``add_n`` of TF-slim's ``train_image_classifier.py``, and the sum sent to the
   host; each clone's batch on the host, copied to its GPU after its weights; see
   :mod:`graphir.passes.transform.data_parallel`); **DP-GPU** (the variables spread over the GPUs,
   ``variables=balanced``, the batch on each GPU, no issue order: this table's DP before issue 14);
   **DPOS** (``place{algo=dpos}``, FastT Algorithm 1); **OS-DPOS** (the ``os-dpos`` pass,
   Algorithm 2: DPOS, then operation splitting along the simulated critical path while the
   makespan improves). DPOS and OS-DPOS place over the GPUs only, with the paper's whole-step
   memory rule (``mem-model=paper``, :data:`MEM_MODEL`).
3. Samples/s = ``G`` / simulated step time; the 1-GPU column is DP with one clone (TF-slim keeps
   the variables on the host with one GPU too).

One DP cell from the command line (VGG-19, 8 GPUs: ``simulate.makespan-s = 0.621``, 103.1 samples/s)::

    graphir-opt zoo:vgg19_train --cluster=fastt --stats -o /dev/null --passes='data-parallel{replicas=8 batch=64 \
        inputs=after-reads},profile,place{algo=data-parallel variables=cpu sums=first-replica inputs=cpu},\
        simulate{congestion=topology order=dynamic}'

(for n < 8 GPUs the table uses :func:`graphir.cluster_presets.fastt_gpus`, which the command line does
not name; ``--emit=report`` simulates under the pipeline's last ``simulate`` options, as ``--stats``).

Cluster: one description for every cell, the ``fastt`` preset (a DGX-1: 8x V100 16 GB in the
NVLink hybrid cube-mesh, PCIe switches shared by GPU pairs, the host CPU on socket 0, transfers
queued on TensorFlow's copy streams, GPU pairs without NVLink staged through the host's memory), restricted
to GPUs ``0..n-1`` and the host at ``n`` GPUs (:func:`graphir.cluster_presets.fastt_gpus`: the same
wires and routes). The first table checks the DP columns against FastT Table 1 (issue 14, item 7:
every cell within 20%, VGG-19 slower on 8 GPUs than on 4).

Graph size: FastT places the fine graph (its Table 4: minutes, over an hour for Transformer on 8
GPUs) and splits fine operations, so nothing is fused here either: OS-DPOS only splits ops outside
fusion groups. The models are FastT's Table 1 CNNs at its global batches: VGG-19 (64), ResNet-200
(32; the zoo's ``resnet200_train``, TF-slim's ``resnet_v2_200``) and Inception-v3 (64); most of the
run is OS-DPOS's DPOS trials on the 8-replica graphs. The zoo's
LSTM language model (FastT's RNNLM row) is left out: re-tracing its unrolled graph at three batch
sizes alone took minutes on this machine.

``--quick`` (for the tests, a few seconds): VGG-19 on 2 GPUs at global batch 256, so each replica
runs the zoo graph's own batch (128) and no model is re-traced; no 1-GPU column.

Where the re-traced graphs come from: :func:`graphir.passes.transform.replicate.module_at_batch` (the zoo's
builder, cached as ``zoo/batches/<entry>_b<batch>.pb``; about 10-20 s per new batch size).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import attrs

from devtools.replicate.common import Runner, generated_line, run_main, table, write_text
from graphir.clone import clone_module
from graphir.cluster_model import Cluster
from graphir.cluster_presets import fastt_gpus
from graphir.driver import load_builtin_passes
from graphir.importers import load_module
from graphir.ir import Module
from graphir.pass_infra import PassContext
from graphir.passes.place import Place
from graphir.passes.place.os_dpos import OsDpos
from graphir.passes.profile import Profile
from graphir.passes.transform.data_parallel import issue_inputs_after_reads
from graphir.passes.transform.replicate import DataParallelGraph, data_parallel
from graphir.simulator import simulate
from graphir.verifier import verify

DESCRIPTION = "FastT Tables 1/6: data-parallel baseline vs DPOS vs OS-DPOS on 2/4/8 simulated V100s."


@dataclasses.dataclass(frozen=True)
class Model:
    """One row: a zoo training entry at a global batch, and the FastT row it stands for.

    Attributes:
        entry: zoo entry (``<model>_train``).
        label: row label.
        batch: global batch (strong scaling: fixed over device counts).
        paper: FastT's Table 1/6 row compared with.
        stand_in: the zoo model is not FastT's (another model stands in): its cells are not counted.
    """

    entry: str
    label: str
    batch: int
    paper: str
    stand_in: bool = False


MODELS = (
    Model("vgg19_train", "VGG-19", 64, "VGG-19"),
    Model("resnet200_train", "ResNet-200", 32, "ResNet200"),
    Model("inception_v3_train", "Inception-v3", 64, "Inception_v3"),
)
QUICK_MODELS = (Model("vgg19_train", "VGG-19", 256, "VGG-19"),)
DEVICES = (2, 4, 8)
QUICK_DEVICES = (2,)
STRATEGIES = ("data-parallel", "dp-gpu", "dpos", "os-dpos")
CONGESTION = "topology"
"""The ruler's congestion rule for every cell (passed explicitly: the physical interconnect)."""
ORDERS = {"data-parallel": "dynamic", "dp-gpu": "dynamic", "dpos": "enforced", "os-dpos": "enforced"}
"""Execution order each strategy runs under: TF-slim adds no control dependencies, so its data
parallelism runs on TensorFlow's dynamic executor; FastT enforces its computed order (§6.1)."""
TF_SLIM_DP = {"variables": "cpu", "sums": "first-replica", "inputs": "cpu"}
"""TF-slim's default data parallelism as ``place{algo=data-parallel}`` options (see the module docstring)."""
MEM_MODEL = "paper"
"""DPOS's and OS-DPOS's memory rule: the paper's whole-step one, as the other replications pin it (each
baseline runs as its paper published it; OS-DPOS on VGG-19 x 8 took 84 s with it, 297.6 s under
``liveness``)."""
GPU_DP = {"variables": "balanced"}
"""Data parallelism with the variables spread over the GPUs (the table's DP before issue 14)."""

# FastT Table 1 (samples/s, strong scaling, one server): 1 GPU, then (DP, FastT) for 2, 4 and 8 GPUs.
PAPER_TABLE1: dict[str, tuple[float, tuple[tuple[float, float], ...]]] = {
    "Inception_v3": (191.0, ((326.5, 323.2), (467.1, 474.1), (432.4, 438.3))),
    "VGG-19": (129.0, ((149.5, 199.4), (184.9, 294.9), (126.9, 132.5))),
    "ResNet200": (89.3, ((114.2, 142.2), (122.1, 132.2), (88.4, 91.1))),
    "RNNLM": (345.9, ((349.7, 395.0), (335.0, 345.9), (254.9, 273.5))),
}
# FastT Table 6 (seconds per iteration): no split, split, key split ops.
PAPER_TABLE6: dict[str, tuple[float, float, str]] = {
    "Inception_v3": (0.161, 0.154, "Conv2D, Conv2Dbp"),
    "VGG-19": (0.356, 0.321, "Conv2D, Conv2Dbp"),
    "ResNet200": (0.249, 0.225, "Conv2D, Conv2Dbp"),
    "RNNLM": (0.162, 0.162, "none"),
}


def cluster_for(devices: int, *, host: bool = True, dispatch: float = 0.0) -> Cluster:
    """The cluster for ``devices`` GPUs: the ``fastt`` preset's GPUs ``0..devices-1`` and its host CPU.

    ``host=False`` leaves the host out (DPOS and OS-DPOS place over the GPUs only). ``dispatch`` > 0
    gives every GPU that asynchronous kernel dispatch time (``--kernel-dispatch``,
    :attr:`graphir.cluster_model.Device.kernel_dispatch`; the preset's is 0), the same for every cell.
    """
    cluster = fastt_gpus(devices, host=host)
    if dispatch <= 0:
        return cluster
    gpus = tuple(
        attrs.evolve(d, kernel_dispatch=dispatch) if d.tf_device.rpartition("/")[2].startswith("device:GPU") else d
        for d in cluster.devices
    )
    return attrs.evolve(cluster, devices=gpus)


@dataclasses.dataclass
class Cell:
    """One strategy on one data-parallel graph.

    Attributes:
        makespan: simulated seconds per step.
        oom: devices over their memory.
        wall: placement wall seconds.
        splits: OS-DPOS's kept splits (``op:dim:n``), empty otherwise.
        trials: OS-DPOS's DPOS trials.
        host_bytes: bytes moved to and from the host CPU per step (PCIe).
        other_order: the step under the other execution order (``enforced`` for DP; 0: not run).
    """

    makespan: float
    oom: tuple[str, ...]
    wall: float
    splits: tuple[str, ...] = ()
    trials: int = 0
    host_bytes: float = 0.0
    other_order: float = 0.0


@dataclasses.dataclass
class Row:
    """One model on one device count.

    Attributes:
        model: the model.
        devices: number of GPUs (= replicas).
        nodes: nodes of the data-parallel graph.
        replicated: nodes per replica.
        shared: shared nodes.
        aggregated: values averaged over the replicas.
        build_s: wall seconds to build (and re-trace) the data-parallel graph.
        cells: per strategy.
    """

    model: Model
    devices: int
    nodes: int
    replicated: int
    shared: int
    aggregated: int
    build_s: float
    cells: dict[str, Cell]

    def samples(self, strategy: str) -> float:
        """Samples per second of a strategy."""
        return self.model.batch / self.cells[strategy].makespan


def _placer(strategy: str) -> OsDpos | Place:
    if strategy == "os-dpos":
        return OsDpos(mem_model=MEM_MODEL)
    if strategy == "data-parallel":
        return Place.of("data-parallel", **TF_SLIM_DP)
    if strategy == "dp-gpu":
        return Place.of("data-parallel", **GPU_DP)
    return Place.of(strategy, mem_model=MEM_MODEL)


def _place(module: Module, strategy: str, check: bool, dispatch: float = 0.0) -> Cell:
    """Place a copy of ``module`` with ``strategy``; simulate it under :data:`CONGESTION` in its :data:`ORDERS`.

    DPOS and OS-DPOS place on the GPUs only (FastT places over the GPUs; with the host CPU offered,
    DPOS's earliest-finish rule moves small ops to it on the roofline's datasheet CPU speed), and
    are judged on the same cluster.
    """
    copy = clone_module(module)
    if strategy == "data-parallel":  # TF-slim's batch, on the host, is copied after the weights
        issue_inputs_after_reads(copy)
    if strategy in ("dpos", "os-dpos"):
        gpus = sum(1 for d in module.cluster.devices if d.name.startswith("gpu"))
        copy.set_cluster(cluster_for(gpus, host=False, dispatch=dispatch))
    began = time.perf_counter()
    stats = _placer(strategy).run(copy, PassContext()).stats
    wall = time.perf_counter() - began
    if check:
        verify(copy)
    result = simulate(copy, congestion=CONGESTION, order=ORDERS[strategy])
    split_list = str(stats.get("split-list", "") or "")
    host = "cpu0"
    host_bytes = sum(b for (src, dst), b in result.link_bytes.items() if host in (src, dst))
    other = 0.0
    if strategy == "data-parallel":  # how much the execution order alone moves the DP cell
        other = simulate(copy, congestion=CONGESTION, order="enforced").makespan
    return Cell(
        result.makespan,
        tuple(result.oom_devices),
        wall,
        tuple(s for s in split_list.split(",") if s),
        int(stats.get("split-trials", 0) or 0),
        float(host_bytes),
        other,
    )


def _data_parallel(
    source: Module, devices: int, batch: int, check: bool, dispatch: float = 0.0
) -> tuple[DataParallelGraph, float]:
    source.set_cluster(cluster_for(devices, dispatch=dispatch))
    began = time.perf_counter()
    result = data_parallel(source, devices, batch=batch)
    module = result.module
    if check:
        verify(module)
    Profile().run(module, PassContext())
    return result, time.perf_counter() - began


def measure_single(
    model: Model, runner: Runner, check: bool, dispatch: float = 0.0
) -> tuple[Module, Cell, dict[str, str]]:
    """One model's zoo graph, its 1-GPU DP cell and its op types by name."""
    source = load_module(f"zoo:{model.entry}")
    ops = {node.name: node.op for node in source.graph.nodes}
    result, _ = _data_parallel(source, 1, model.batch, check, dispatch)
    one = _place(result.module, "data-parallel", check, dispatch)
    runner.log(f"  {model.label} 1 GPU: {model.batch / one.makespan:.1f} samples/s")
    return source, one, ops


def measure_row(
    source: Module,
    model: Model,
    n: int,
    runner: Runner,
    check: bool,
    strategies: Sequence[str] = STRATEGIES,
    max_nodes: int = 0,
    dispatch: float = 0.0,
) -> Row:
    """Every strategy of one model on ``n`` GPUs; DPOS and OS-DPOS only on graphs of at most ``max_nodes`` (0: all)."""
    result, build = _data_parallel(source, n, model.batch, check, dispatch)
    if max_nodes and len(result.module.graph) > max_nodes:
        strategies = [s for s in strategies if s not in ("dpos", "os-dpos")]
    cells = {algo: _place(result.module, algo, check, dispatch) for algo in strategies}
    row = Row(
        model,
        n,
        len(result.module.graph),
        len(result.replicated),
        len(result.shared),
        len(result.aggregated),
        build,
        cells,
    )
    runner.log(
        f"  {model.label} {n} GPUs ({row.nodes} nodes, built in {build:.1f} s): "
        + ", ".join(f"{a} {row.samples(a):.1f}/s ({c.wall:.1f} s)" for a, c in cells.items())
    )
    return row


def measure(
    model: Model,
    devices: Sequence[int],
    runner: Runner,
    check: bool,
    single: bool,
    strategies: Sequence[str] = STRATEGIES,
) -> tuple[list[Row], Cell | None, dict[str, str]]:
    """Every device count of one model, its 1-GPU DP cell (``None`` without ``single``), its op types by name."""
    one: Cell | None = None
    if single:
        source, one, ops = measure_single(model, runner, check)
    else:
        source = load_module(f"zoo:{model.entry}")
        ops = {node.name: node.op for node in source.graph.nodes}
    rows = [measure_row(source, model, n, runner, check, strategies) for n in devices]
    return rows, one, ops


def row_order(models: Sequence[Model], devices: Sequence[int]) -> list[tuple[Model, int]]:
    """The order the rows are measured in: by device count, then by the model's size per replica.

    The largest graphs (ResNet-200 on 8 GPUs: 157,950 nodes) come last, so a run stopped early (the
    report is rewritten after every row) has the most rows. Sizes: the order of :data:`MODELS` is kept
    except that ResNet-200 (18,625 nodes per replica) goes after Inception-v3 (7,690).
    """
    size = {"vgg19_train": 0, "inception_v3_train": 1, "resnet200_train": 2}
    return [(m, n) for n in sorted(devices) for m in sorted(models, key=lambda m: size.get(m.entry, 1))]


# --------------------------------------------------------------------------- the report


def _rate(row: Row, strategy: str) -> str:
    cell = row.cells.get(strategy)
    if cell is None:
        return "not run"
    text = f"{row.samples(strategy):.1f}"
    return f"{text} (OOM)" if cell.oom else text


def _gain(value: float, base: float) -> str:
    return f"{(value / base - 1) * 100:+.1f}%"


def _op_types(module_ops: dict[str, str], splits: Sequence[str]) -> str:
    names = [s.rsplit(":", 2)[0] for s in splits]
    # "replica<i>/<op name>[.part<k>]" -> the op type of the original node
    kinds = Counter(module_ops.get(n.partition("/")[2].split(".part")[0], "?") for n in names)
    return ", ".join(f"{op} x{k}" for op, k in sorted(kinds.items())) or "none"


def _error(simulated: float, paper: float) -> str:
    return f"{(simulated / paper - 1) * 100:+.1f}%"


def _dp_check(models: list[Model], singles: dict[str, Cell | None], by: dict[tuple[Model, int], Row]) -> list[str]:
    """FastT Table 1's DP columns next to the simulated DP: every cell with its error (issue 14, item 7)."""
    lines = [
        "## FastT Table 1 DP columns: simulated vs published (samples/s)",
        "",
        "Target (issue 14): every cell within 20% of the published samples/s, with 8 GPUs slower than 4 on VGG-19.",
        "",
    ]
    header = ["FastT row", "model (global batch)", *[f"{n} GPU{'s' if n > 1 else ''}" for n in (1, 2, 4, 8)]]
    body = []
    within = total = 0
    for model in models:
        entry = PAPER_TABLE1.get(model.paper)
        if entry is None:
            continue
        paper = [entry[0], *(dp for dp, _ in entry[1])]
        cells = [model.paper, f"{model.label} ({model.batch})"]
        for n, published in zip((1, 2, 4, 8), paper, strict=True):
            if n == 1:
                one = singles.get(model.entry)
                simulated = None if one is None else model.batch / one.makespan
            else:
                row = by.get((model, n))
                simulated = None if row is None else row.samples("data-parallel")
            if simulated is None:
                cells.append(f"- / {published:.1f}")
                continue
            if not model.stand_in:
                total += 1
                within += abs(simulated / published - 1) <= 0.2
            cells.append(f"{simulated:.1f} / {published:.1f} ({_error(simulated, published)})")
        body.append(cells)
    lines += table(header, body, "llrrrr")
    stand_ins = ", ".join(f"{m.label} for {m.paper}" for m in models if m.stand_in)
    lines += [
        "",
        f"Cells within 20% (simulated / published (error)): {within} of {total} on the models that are FastT's own"
        + (f" (not counted: {stand_ins}, another model)." if stand_ins else "."),
    ]
    lines += [
        "",
        "DP order check, the same placements under `order=enforced` (the list schedule's order) instead of "
        "`dynamic` (samples/s, error vs published):",
        "",
    ]
    check_rows = []
    for model in models:
        entry = PAPER_TABLE1.get(model.paper)
        if entry is None:
            continue
        paper = [entry[0], *(dp for dp, _ in entry[1])]
        cells = [model.paper, f"{model.label} ({model.batch})"]
        for n, published in zip((1, 2, 4, 8), paper, strict=True):
            if n == 1:
                one = singles.get(model.entry)
                step = 0.0 if one is None else one.other_order
            else:
                row = by.get((model, n))
                step = 0.0 if row is None else row.cells["data-parallel"].other_order
            cells.append("-" if not step else f"{model.batch / step:.1f} ({_error(model.batch / step, published)})")
        check_rows.append(cells)
    lines += table(["FastT row", "model (global batch)", "1 GPU", "2 GPUs", "4 GPUs", "8 GPUs"], check_rows, "llrrrr")
    scaling = []
    for model in models:
        four, eight = by.get((model, 4)), by.get((model, 8))
        if four is not None and eight is not None:
            slower = eight.samples("data-parallel") < four.samples("data-parallel")
            scaling.append(
                f"{model.label}: 8 GPUs {'slower' if slower else 'faster'} than 4 "
                f"({eight.samples('data-parallel'):.1f} vs {four.samples('data-parallel'):.1f} samples/s)."
            )
    return lines + ([""] + scaling if scaling else [])


def render(
    rows: list[Row],
    singles: dict[str, Cell | None],
    ops: dict[str, dict[str, str]],
    command: str,
    seconds: float,
    quick: bool,
    pending: Sequence[str] = (),
    all_models: Sequence[Model] = (),
    load: float | None = None,
) -> str:
    """The Markdown report.

    ``pending`` names the rows (``model x GPUs``) the run has not measured yet; ``all_models`` the
    models of the run, in table order (default: those of ``rows``), so a model without a row yet
    still shows its 1-GPU cell; ``load`` the machine's 1-minute load average when it was written.
    """
    devices = sorted({r.devices for r in rows} | (set(DEVICES) if pending else set()))
    models = list(dict.fromkeys([*all_models, *(r.model for r in rows)]))
    by = {(r.model, r.devices): r for r in rows}
    lines = [
        "# FastT replication: data-parallel baseline vs DPOS vs OS-DPOS (Tables 1 and 6)",
        "",
        generated_line(command, seconds),
        "",
        *(
            [
                f"**Incomplete:** written before these rows were measured (their cells say `-`): "
                f"{', '.join(pending)}. `{command}` measures every row again.",
                "",
            ]
            if pending
            else []
        ),
        "Strong scaling (FastT §6.2): the global batch is fixed and split over the GPUs. Every strategy places the "
        "same *data-parallel graph* (FastT §5.2's input graph, built by `data-parallel{replicas=n batch=G}`: one "
        "replica of the training step per GPU on G/n samples, shared variables, gradients summed and averaged before "
        "the single Adam update), profiled analytically (roofline; V100: 15.7 TFLOP/s FP32, 900 GB/s; host: 2x Xeon "
        "Platinum 8163) and scored by `simulate{congestion=topology}`, DP and DP-GPU with `order=dynamic` (TF-slim "
        "adds no control dependencies: TensorFlow's executor runs whatever is ready), DPOS and OS-DPOS with "
        "`order=enforced` (FastT enforces its computed order, §6.1). **DP** = TF-slim's default data parallelism, "
        "FastT's baseline: `place{algo=data-parallel variables=cpu sums=first-replica inputs=cpu}` on the graph "
        "with TF-slim's issue order (`data-parallel{... inputs=after-reads}`), clone i on GPU i, every "
        "variable, its optimizer slots and its update on the host CPU (`/device:CPU:0`), each clone reading the "
        "weights from the host and its gradients summed on GPU 0, the sum sent to the host, and each clone's "
        "batch dequeued on the host and copied to its GPU after the weights (TF-slim's "
        "`train_image_classifier.py`; see `graphir.passes.transform.data_parallel`); **DP-GPU** = the same graph "
        "without the issue order, the batch on each clone's GPU and the variables spread over the GPUs by bytes "
        "(`variables=balanced`, the table's DP before issue 14); "
        "**DPOS** = `place{algo=dpos mem-model=paper}` (Algorithm 1); **OS-DPOS** = the `os-dpos{mem-model=paper}` "
        "pass (Algorithm 2). **FastT** = "
        "the better of DP and OS-DPOS: FastT keeps a new strategy only if it is faster than the current one and "
        "starts from data parallelism (§4). One cluster for every cell: the `fastt` preset (a DGX-1: 8x V100 16 GB "
        "in the NVLink hybrid cube-mesh, GPU pairs sharing a PCIe switch uplink, the host CPU on socket 0; each "
        "transfer queued on the TensorFlow copy stream it is issued on: a GPU's one host-to-device stream, the "
        "sender's device-to-host or device-to-device stream; the 12 GPU pairs without NVLink, on different sockets "
        "and without peer access, copy through the host's memory), with "
        "GPUs 0..n-1 and the host at n GPUs (`graphir.cluster_presets.fastt_gpus`). Samples/s = global batch / "
        "simulated step time. No fusion (FastT places the fine graph).",
        "",
        *_dp_check(models, singles, by),
        "",
        "## Table 1 analogue: training speed (samples/s)",
        "",
    ]
    header = ["model (global batch)", "1 GPU DP"]
    for n in devices:
        header += [f"{n} GPUs DP", "DPOS", "OS-DPOS"]
    header += ["best FastT speed-up vs DP"]
    body = []
    for model in models:
        one = singles.get(model.entry)
        cells = [f"{model.label} ({model.batch})", "-" if one is None else f"{model.batch / one.makespan:.1f}"]
        best_gain = None
        for n in devices:
            row = by.get((model, n))
            if row is None:
                cells += ["-", "-", "-"]
                continue
            cells += [_rate(row, "data-parallel"), _rate(row, "dpos"), _rate(row, "os-dpos")]
            if "os-dpos" not in row.cells:
                continue
            fastt = max(row.samples("data-parallel"), row.samples("os-dpos"))
            gain = fastt / row.samples("data-parallel") - 1
            best_gain = gain if best_gain is None else max(best_gain, gain)
        cells.append("-" if best_gain is None else f"{best_gain * 100:+.1f}%")
        body.append(cells)
    lines += table(header, body)
    lines += ["", "FastT's Table 1 for the corresponding rows (samples/s, V100s, one server; FastT = OS-DPOS):", ""]
    paper_header = ["FastT row", "1 GPU", *[f"{n} GPUs DP / FastT" for n in (2, 4, 8)]]
    paper_rows = []
    for model in models:
        entry = PAPER_TABLE1.get(model.paper)
        if entry is None:
            continue
        paper_rows.append(
            [model.paper, f"{entry[0]:.1f}", *[f"{dp:.1f} / {ft:.1f} ({_gain(ft, dp)})" for dp, ft in entry[1]]]
        )
    lines += table(paper_header, paper_rows)
    lines += ["", "## Details: graph sizes, speed-ups vs DP, placement wall time", ""]
    detail_header = [
        "model",
        "GPUs",
        "nodes (per replica / shared)",
        "values averaged",
        "build s",
        "DP host GB/step",
        "DP-GPU samples/s",
        "DPOS vs DP",
        "OS-DPOS vs DP",
        "DP wall s",
        "DPOS wall s",
        "OS-DPOS wall s",
        "OS-DPOS trials",
        "OOM",
    ]
    detail_rows = []
    for row in rows:
        dp = row.samples("data-parallel")
        ran = row.cells.keys()
        oom = sorted({f"{a}: {','.join(c.oom)}" for a, c in row.cells.items() if c.oom})
        detail_rows.append(
            [
                row.model.label,
                str(row.devices),
                f"{row.nodes} ({row.replicated} / {row.shared})",
                str(row.aggregated),
                f"{row.build_s:.1f}",
                f"{row.cells['data-parallel'].host_bytes / 1e9:.2f}",
                _rate(row, "dp-gpu"),
                _gain(row.samples("dpos"), dp) if "dpos" in ran else "-",
                _gain(row.samples("os-dpos"), dp) if "os-dpos" in ran else "-",
                f"{row.cells['data-parallel'].wall:.2f}",
                f"{row.cells['dpos'].wall:.2f}" if "dpos" in ran else "-",
                f"{row.cells['os-dpos'].wall:.2f}" if "os-dpos" in ran else "-",
                str(row.cells["os-dpos"].trials) if "os-dpos" in ran else "-",
                "; ".join(oom) or "-",
            ]
        )
    lines += table(detail_header, detail_rows, "lrrrrrrrrrrrrl")
    lines += ["", "## Table 6 analogue: step time without / with operation splitting", ""]
    lines += [
        "At each model's device count with the largest OS-DPOS gain over DPOS (FastT: \"the settings achieving the "
        'best speedup as in Table 1"); step time in seconds.',
        "",
    ]
    t6_header = ["model", "GPUs", "no split (DPOS)", "split (OS-DPOS)", "speed-up", "splits kept", "split op types"]
    t6_rows = []
    for model in models:
        candidates = [r for r in rows if r.model == model and {"dpos", "os-dpos"} <= r.cells.keys()]
        if not candidates:
            continue
        row = max(candidates, key=lambda r: (r.cells["dpos"].makespan / r.cells["os-dpos"].makespan, -r.devices))
        no_split, split = row.cells["dpos"].makespan, row.cells["os-dpos"].makespan
        t6_rows.append(
            [
                model.label,
                str(row.devices),
                f"{no_split:.4f}",
                f"{split:.4f}",
                f"{(no_split / split - 1) * 100:.2f}%",
                str(len(row.cells["os-dpos"].splits)),
                _op_types(ops.get(model.entry, {}), row.cells["os-dpos"].splits),
            ]
        )
    if t6_rows:
        lines += table(t6_header, t6_rows, "lrrrrrl")
    else:
        lines += ["Not run: this run's `--strategies` left out DPOS or OS-DPOS."]
    lines += ["", "FastT's Table 6 for the corresponding rows (seconds per iteration):", ""]
    lines += table(
        ["FastT row", "no split", "split", "speed-up", "key split ops"],
        [
            [m.paper, f"{p[0]:.3f}", f"{p[1]:.3f}", f"{(p[0] / p[1] - 1) * 100:.2f}%", p[2]]
            for m in models
            if (p := PAPER_TABLE6.get(m.paper)) is not None
        ],
        "lrrrl",
    )
    lines += ["", "## Where and why these numbers differ from FastT's", "", run_note(rows, load), *NOTES]
    if quick:
        lines += ["", "_This is a `--quick` run (VGG-19, 2 GPUs, global batch 256): not the committed table._"]
    return "\n".join(lines) + "\n"


def run_note(rows: Sequence[Row], load: float | None = None) -> str:
    """The first note: which rows ran which strategies, the load, and what the placement wall time is made of."""
    partial = [f"{r.model.label} x {r.devices}" for r in rows if not all(s in r.cells for s in STRATEGIES)]
    text = "- **What this run is.** "
    if not rows:
        text += "No row measured yet. "
    elif partial:
        text += f"Every row listed; not every strategy on {', '.join(partial)} (`--strategies` or `--max-nodes`). "
    else:
        text += "Every row listed, with all four strategies. "
    if load is not None:
        text += (
            f"Wall-time columns vary with the machine's load (1-minute load average {load:.1f} when this report "
            "was written; other sessions may have been running). "
        )
    return text + (
        "Placement wall time: OS-DPOS reruns DPOS once per trial split (up to 2 dims x 7 part counts per "
        "critical-path op on 8 GPUs); DPOS's insertion search (`DeviceTimeline.earliest_start` in "
        "`graphir/passes/place/common.py`) skips whole chunks of booked blocks whose largest gap is too short "
        "instead of walking every block after the ready time, which put ResNet-200 x 8 (157,950 nodes) within "
        "reach (`benchmarks/results/device_timeline.md`)."
    )


NOTES = [
    "- **What changed since the 08:18 table.** (1) *The executor's order on the host CPU.* `order=dynamic` "
    "follows TensorFlow's executor per device kind (`graphir/simulator.py`): a GPU runs its ready kernels first "
    "ready first, as before, while a CPU, where every kernel is expensive, runs the node its own last node made "
    "ready first (newest first) and a node made ready by an arriving tensor after local work; traced on the "
    "2-worker rig, TF chose so in 99.1 % of 84,905 choices where the two rules differ "
    "(`benchmarks/results/fidelity-notes.md`). Here only the host, which holds TF-slim's variables and updates, "
    "changes: 9 of the 12 DP cells move by at most 3.8 points (ResNet-200 x 8 106.5 -> 107.7 samples/s, +20.5 "
    "-> +21.8 %; Inception-v3 x 8 509.6 -> 493.1), the enforced-order rows, DPOS and OS-DPOS are unchanged. (2) "
    "*ResNet-200 x 8 DPOS and OS-DPOS ran* (before: not run, over an hour): DPOS 19.7, OS-DPOS 20.2 samples/s "
    "(one Conv2D split kept after 20 trials, 401 s of placement), both far below DP (107.7), for the reason "
    "below. Earlier, the 12 GPU pairs of a DGX-1 without NVLink (different sockets, no peer access) were "
    "routed through the host's memory, as CUDA stages such copies (VGG-19 x 8 DP 106.9 -> 103.1 then).",
    "- **Where the DP baseline loses its time.** TF-slim keeps every variable on the host CPU, so each step "
    "every clone reads all the weights over PCIe and the summed gradient goes back: n x P bytes down and P up "
    "per step for P parameter bytes (VGG-19: P = 575 MB; ResNet-200: 259 MB; Inception-v3: 95 MB), plus the "
    "clones' batches, and the clones' gradients into GPU 0 over NVLink or, for GPUs 5-7, staged through the "
    "host (column *DP host GB/step*). Each copy queues on its TensorFlow copy stream and holds every wire of "
    "its route for bytes / bandwidth, and the host's memory wire is on every host route, so the host's copies "
    "serialise at the 12 GB/s of one PCIe hop. VGG-19 at 8 GPUs: the weights and batches reach the GPUs at "
    "0.39 s, each clone computes for 0.07 s, then the gradients of GPUs 5-7 go through the host into GPU 0 (3 x "
    "575 MB at 12 GB/s, until 0.56 s) and the sum goes to the host (until 0.60 s): 0.62 s per step, and 8 GPUs "
    "are slower than 4 on every model, as FastT measured.",
    "- **Which cell misses, and what was checked (no per-model factor was added).** ResNet-200 on 8 GPUs, "
    "+21.8 % (+20.5 % with first-ready-first on the host, +24.5 % before the staged routes). (1) *TF-slim's "
    "deployment* (`train_image_classifier.py`, "
    "`model_deploy.py`): variables and their updates on `/device:CPU:0`, each clone's forward and gradients on "
    "its GPU (`compute_gradients` under the clone's device scope), the per-variable `add_n` of the clones' "
    "gradients created outside any device scope, which TensorFlow's placer puts on GPU 0, the weight-decay "
    "losses colocated with their variables on the host, the batch-norm updates of the first clone only: the "
    "DP placement does the same. (2) *The 8-GPU routes*: the staged pairs above, the one change kept. (3) "
    "*Communication vs compute* (figures of the 08:18 ruler, whose GPU order is today's), from FastT's own "
    "weak-scaling Table 2 (the same weights and gradients per step "
    "at 32 samples per GPU): measured, ResNet-200's step grows from 0.353 s on 1 GPU to 0.428 s on 8 (+0.075 s "
    "of host and gradient traffic not hidden by compute); simulated (this ruler, not a table cell) from 0.447 to "
    "0.597 s (+0.151 s). The ruler's 8-GPU communication is therefore not too fast but too slow, by about as "
    "much as for VGG-19 (weak 8 GPUs simulated 549.8 against 707.1 samples/s; strong 8 GPUs -18.8 %). What "
    "is too fast is compute at 4 samples per GPU: the simulated step at 8 GPUs is 0.137 s of compute per clone "
    "plus 0.163 s of traffic, while the measured 0.362 s leaves at least 0.199 s of compute (more with the "
    "measured traffic). The roofline scales each layer with its batch and adds 5 us per op (18,623 ops per "
    "replica: 0.093 s), so the clone's compute falls from 0.180 s at 8 samples to 0.137 s at 4; the measured "
    "steps say a V100 running ResNet-200's small kernels at 4 samples is no faster than at 8 (FastT §6.3: a "
    'smaller batch per GPU "cannot achieve good GPU utilization"). No one launch overhead fixes it: about '
    "8.3 us per op (what ResNet-200 x 8 needs) would add about 0.065 s to ResNet-200's 1-GPU step (about 62 "
    "samples/s, -30 %), whose roofline at 32 samples is already 25 % slow. Per-kernel V100 timings would be "
    "needed to calibrate it (issue 14 item 3), and none are available here. The input path (batch after the "
    "weights) remains a model of the measured steps, not read from TensorFlow's source; it was not checked on "
    "a V100.",
    "- **Small kernels, tried on 2026-11-24 (`benchmarks/results/occupancy.md`).** Occupancy and GEMM-tile "
    "wave-quantization rules slow ResNet-200's 32-sample kernels too and break its 1-GPU cell. Asynchronous "
    "kernel dispatch (an op with work costs max(roofline, D), `--kernel-dispatch=D`) puts all 12 DP cells within "
    "20 % at D = 10 or 11 us (ResNet-200 x 8 +15.1 / +12.0 %, x 1 -19.2 / -19.9 %), but not at 8 us (x 8 "
    "+20.6 %) or 12 us (x 1 -20.7 %); no public source gives that time for TensorFlow on a V100, so it is off "
    "(`Device.kernel_dispatch = 0`) until a V100 timeline measures it.",
    "- **DPOS and OS-DPOS against DP.** DPOS (Algorithm 1) ranks and places with the maximal, contention-free "
    "transfer times FastT's cost model uses: the preset's 50 GB/s channel between any two GPUs. Under the "
    "ruler a GPU sends one tensor at a time on its device-to-device stream and 12 of 28 GPU pairs go through "
    "the host at 12 GB/s, so DPOS's interleaving of the replicas' ops costs far more than it planned: it loses "
    "to DP on every row but VGG-19 at 2 and 4 GPUs (VGG-19 x 8 moves 24 GB between GPUs per step, 65.2 "
    "samples/s). The same DPOS planning on the ruler's own routes (`plan-congestion=topology`, an option, not "
    "FastT's rule; VGG-19 x 8, not a table cell) moves 7.9 GB and reaches 333.3 samples/s, so the loss is the "
    "planning's blindness to contention, not the placement rule. OS-DPOS keeps few splits on these graphs and "
    "gains 0-34 % over DPOS (Table 6 analogue). FastT activates a strategy only when it beats the running one "
    "and starts from data parallelism (§4), so its column is the better of DP and OS-DPOS, which is DP "
    "wherever DPOS loses. FastT's published FastT column is DP -1 to +59 %; here OS-DPOS beats DP on VGG-19 at 2 "
    "and 4 GPUs only (+28 %, +71 %; FastT: +33 %, +59 %).",
    "- **Models and batches.** VGG-19 and Inception-v3 are Keras's, ResNet-200 is built from Keras's "
    "ResNet-v2 stack function with TF-slim's unit counts (FastT used TF-slim's nets). No NMT model "
    "(re-tracing the zoo's unrolled LSTM at three batch sizes does not fit the time budget). Global batches "
    "are FastT's (64, 32, 64); each replica's graph is re-traced at G/n so reshapes, tiles and the loss "
    "divisor are exact. Adam is the optimizer (TF-slim's script defaults to RMSProp, which keeps the same two "
    "slots per variable; FastT does not say which it used). Costs are FP32 without tensor cores. FastT's "
    "8-GPU two-server column is not reproduced here (`fastt-2x4` describes it).",
    "- **No memory pressure.** At these batches every model fits one 16 GB V100, as in FastT's strong-scaling "
    "runs; the simulator reports an OOM device when one occurs (column OOM).",
]


def run(
    args: argparse.Namespace,
    runner: Runner,
    strategies: Sequence[str] = STRATEGIES,
    max_nodes: int = 0,
    only_models: Sequence[str] = (),
    only_gpus: Sequence[int] = (),
    dispatch: float = 0.0,
) -> Path:
    """Measure every model with ``strategies`` and write the report; returns its path.

    ``max_nodes`` (``--max-nodes``, 0: no limit) leaves DPOS and OS-DPOS out on larger data-parallel
    graphs (their cells say *not run*), a time budget: OS-DPOS reruns DPOS for every trial split.
    ``only_models`` (``--models``: entries without ``_train``) and ``only_gpus`` (``--gpus``) keep only
    those rows of the run (empty: all). ``dispatch`` (``--kernel-dispatch``, seconds; 0: the preset's
    additive launch overhead) is every GPU's asynchronous kernel dispatch time (:func:`cluster_for`).

    The report is rewritten after every row (see :func:`row_order`), listing the rows still to run,
    so a run stopped early leaves a table of what it measured.
    """
    load_builtin_passes()
    started = time.perf_counter()
    quick = bool(args.quick)
    models, devices = select_rows(quick, only_models, only_gpus)
    check = not args.no_verify
    rows: list[Row] = []
    singles: dict[str, Cell | None] = {}
    ops: dict[str, dict[str, str]] = {}
    sources: dict[str, Module] = {}
    command = "python -m devtools.replicate.fastt" + (" --quick" if quick else "")
    if tuple(strategies) != STRATEGIES:
        command += f" --strategies={','.join(strategies)}"
    if max_nodes:
        command += f" --max-nodes={max_nodes}"
    if only_models:
        command += f" --models={','.join(only_models)}"
    if only_gpus:
        command += f" --gpus={','.join(map(str, only_gpus))}"
    if dispatch:
        command += f" --kernel-dispatch={dispatch:g}"
    path = Path(args.out) / "replicate_fastt.md"
    for model in models:
        runner.log(f"replicate fastt: {model.label} (global batch {model.batch})")
        if quick:
            sources[model.entry] = load_module(f"zoo:{model.entry}")
            ops[model.entry] = {node.name: node.op for node in sources[model.entry].graph.nodes}
            singles[model.entry] = None
        else:
            measured = measure_single(model, runner, check, dispatch)
            sources[model.entry], singles[model.entry], ops[model.entry] = measured
    order = row_order(models, devices)
    for k, (model, n) in enumerate(order):
        rows.append(measure_row(sources[model.entry], model, n, runner, check, strategies, max_nodes, dispatch))
        done = sorted(rows, key=lambda r: (models.index(r.model), r.devices))
        pending = [f"{m.label} x {d}" for m, d in order[k + 1 :]]
        load = os.getloadavg()[0]
        text = render(done, singles, ops, command, time.perf_counter() - started, quick, pending, models, load)
        write_text(path, text)
    return path


def parse_strategies(text: str) -> tuple[str, ...]:
    """``a,b`` -> the strategies to run, in :data:`STRATEGIES` order (``data-parallel`` is always run).

    Raises:
        ValueError: an unknown name.
    """
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = sorted(names - set(STRATEGIES))
    if unknown:
        raise ValueError(f"unknown strategy '{unknown[0]}' in --strategies (known: {', '.join(STRATEGIES)})")
    return tuple(s for s in STRATEGIES if s in names or s == "data-parallel")


def select_rows(
    quick: bool, only_models: Sequence[str] = (), only_gpus: Sequence[int] = ()
) -> tuple[tuple[Model, ...], tuple[int, ...]]:
    """The run's models and GPU counts (``--quick``'s or the full table's), kept to the filters (empty: all).

    Raises:
        ValueError: the filters leave no row.
    """
    models = QUICK_MODELS if quick else MODELS
    devices = QUICK_DEVICES if quick else DEVICES
    if only_models:
        models = tuple(m for m in models if m.entry.removesuffix("_train") in only_models)
    if only_gpus:
        devices = tuple(n for n in devices if n in only_gpus)
    if not models or not devices:
        raise ValueError("--models and --gpus select no row of this run" + (" (--quick: vgg19 on 2)" if quick else ""))
    return models, devices


def parse_models(text: str) -> tuple[str, ...]:
    """``a,b`` -> the model names (zoo entries without ``_train``), in :data:`MODELS` order.

    Raises:
        ValueError: an unknown name.
    """
    known = [m.entry.removesuffix("_train") for m in MODELS]
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = sorted(names - set(known))
    if unknown or not names:
        raise ValueError(f"unknown model '{unknown[0] if unknown else text}' in --models (known: {', '.join(known)})")
    return tuple(name for name in known if name in names)


def parse_gpus(text: str) -> tuple[int, ...]:
    """``n,m`` -> the GPU counts, in :data:`DEVICES` order.

    Raises:
        ValueError: a count that is not one of :data:`DEVICES`.
    """
    names = {name.strip() for name in text.split(",") if name.strip()}
    known = [str(n) for n in DEVICES]
    unknown = sorted(names - set(known))
    if unknown or not names:
        raise ValueError(f"unknown GPU count '{unknown[0] if unknown else text}' in --gpus (known: {', '.join(known)})")
    return tuple(n for n in DEVICES if str(n) in names)


def parse_dispatch(text: str) -> float:
    """``--kernel-dispatch=SECONDS`` -> seconds (0 or more; 0 is the preset's additive launch overhead).

    Raises:
        ValueError: not a number, or negative.
    """
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"--kernel-dispatch wants seconds (a number >= 0, e.g. 10e-6), got '{text}'")
    return seconds


def main(argv: Sequence[str] | None = None) -> int:
    """Run the FastT replication (see the module docstring); 0 on success, 1 with a one-line error."""
    rest: list[str] = []
    strategies = STRATEGIES
    max_nodes = 0
    only_models: tuple[str, ...] = ()
    only_gpus: tuple[int, ...] = ()
    dispatch = 0.0
    for arg in sys.argv[1:] if argv is None else argv:
        try:
            if arg.startswith("--strategies="):
                strategies = parse_strategies(arg.partition("=")[2])
            elif arg.startswith("--models="):
                only_models = parse_models(arg.partition("=")[2])
            elif arg.startswith("--gpus="):
                only_gpus = parse_gpus(arg.partition("=")[2])
            elif arg.startswith("--kernel-dispatch="):
                dispatch = parse_dispatch(arg.partition("=")[2])
            elif arg.startswith("--max-nodes="):
                text = arg.partition("=")[2]
                if not text.isdigit():
                    raise ValueError(f"--max-nodes wants a whole number of nodes, got '{text}'")
                max_nodes = int(text)
            else:
                rest.append(arg)
        except ValueError as exc:
            print(f"devtools.replicate.fastt: error: {exc}", file=sys.stderr)
            return 1
    try:
        select_rows("--quick" in rest, only_models, only_gpus)
    except ValueError as exc:
        print(f"devtools.replicate.fastt: error: {exc}", file=sys.stderr)
        return 1
    job = functools.partial(
        run,
        strategies=strategies,
        max_nodes=max_nodes,
        only_models=only_models,
        only_gpus=only_gpus,
        dispatch=dispatch,
    )
    return run_main("fastt", job, rest, DESCRIPTION)


if __name__ == "__main__":
    raise SystemExit(main())
