"""FastT Tables 1 and 6 on the simulator: data-parallel baseline vs DPOS vs OS-DPOS on 2/4/8 GPUs.

Usage::

    python -m graphir.tools.replicate.fastt [--quick] [--out DIR] [--quiet] [--no-verify]

Writes ``DIR/replicate_fastt.md`` (default ``benchmarks/results``).

**Setting.** FastT (§6) trains with *strong scaling*: a fixed global batch split over the GPUs,
TF-slim's data parallelism as the baseline, and, for a model that fits one GPU, OS-DPOS (and DPOS,
which it calls) started from the *data-parallel graph* (§5.2: the model replicated once per device).
Here, for each zoo training graph and each device count ``n``:

1. ``data-parallel{replicas=n batch=G}`` (:mod:`graphir.passes.transform.replicate`) builds the replicated graph:
   ``n`` copies of the forward and backward pass on ``G / n`` samples each (types from the model
   re-traced at that batch), shared variables, gradients averaged (``AddN`` and ``1/n``) before the
   single Adam update; then analytical ``profile`` for the cluster's V100s.
2. Three placements of that same graph, each simulated (the judge): **DP**, the data-parallel
   baseline (``place{algo=data-parallel}``: replica ``i`` on GPU ``i``, variables spread over the
   GPUs by bytes with their reads and updates, aggregation at the variable); **DPOS**
   (``place{algo=dpos}``, FastT Algorithm 1); **OS-DPOS** (the ``os-dpos`` pass, Algorithm 2:
   DPOS, then operation splitting along the simulated critical path while the makespan improves).
3. Samples/s = ``G`` / simulated step time; the 1-GPU column is the model at batch ``G`` on one V100.

Clusters: the ``fastt`` preset (8x V100 16 GB, every pair over NVLink: 50 GB/s, 5 us) for 8 GPUs and
``2xV100-nvlink`` / ``4xV100-nvlink`` (the same devices and links) for 2 and 4; ``1xV100`` for one.

Graph size: FastT places the fine graph (its Table 4: minutes, over an hour for Transformer on 8
GPUs) and splits fine operations, so nothing is fused here either: OS-DPOS only splits ops outside
fusion groups. The models were chosen so the whole run stays within its budget on two cores (about 15
minutes, most of it OS-DPOS's DPOS trials on the 8-replica graphs of 44k-65k nodes): VGG-19,
ResNet-50 (for FastT's ResNet-200) and Inception-v3 at FastT's global batches (64, 32, 64). The zoo's
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
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from graphir.clone import clone_module
from graphir.importers import load_module
from graphir.ir import Module
from graphir.pass_infra import PassContext, load_builtin_passes
from graphir.passes.place import Place
from graphir.passes.place.os_dpos import OsDpos
from graphir.passes.profile import Profile
from graphir.passes.transform.replicate import DataParallelGraph, data_parallel
from graphir.simulator import simulate
from graphir.tools.replicate.common import Runner, generated_line, run_main, table, write_text
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
    """

    entry: str
    label: str
    batch: int
    paper: str


MODELS = (
    Model("vgg19_train", "VGG-19", 64, "VGG-19"),
    Model("resnet50_train", "ResNet-50", 32, "ResNet200"),
    Model("inception_v3_train", "Inception-v3", 64, "Inception_v3"),
)
QUICK_MODELS = (Model("vgg19_train", "VGG-19", 256, "VGG-19"),)
DEVICES = (2, 4, 8)
QUICK_DEVICES = (2,)
STRATEGIES = ("data-parallel", "dpos", "os-dpos")

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


def cluster_for(devices: int) -> str:
    """The cluster spec for ``devices`` GPUs: FastT's preset at 8, the same V100s over NVLink below."""
    if devices == 8:
        return "fastt"
    return f"{devices}xV100" if devices == 1 else f"{devices}xV100-nvlink"


@dataclasses.dataclass
class Cell:
    """One strategy on one data-parallel graph.

    Attributes:
        makespan: simulated seconds per step.
        oom: devices over their memory.
        wall: placement wall seconds.
        splits: OS-DPOS's kept splits (``op:dim:n``), empty otherwise.
        trials: OS-DPOS's DPOS trials.
    """

    makespan: float
    oom: tuple[str, ...]
    wall: float
    splits: tuple[str, ...] = ()
    trials: int = 0


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


def _place(module: Module, algo: str, check: bool) -> Cell:
    """Place a copy of ``module`` with ``algo`` and simulate it."""
    copy = clone_module(module)
    began = time.perf_counter()
    placing = OsDpos() if algo == "os-dpos" else Place(algo=algo)
    stats = placing.run(copy, PassContext()).stats
    wall = time.perf_counter() - began
    if check:
        verify(copy)
    result = simulate(copy)
    split_list = str(stats.get("split-list", "") or "")
    return Cell(
        result.makespan,
        tuple(result.oom_devices),
        wall,
        tuple(s for s in split_list.split(",") if s),
        int(stats.get("split-trials", 0) or 0),
    )


def _data_parallel(source: Module, devices: int, batch: int, check: bool) -> tuple[DataParallelGraph, float]:
    source.cluster_spec = cluster_for(devices)
    began = time.perf_counter()
    result = data_parallel(source, devices, batch=batch)
    module = result.module
    if check:
        verify(module)
    Profile().run(module, PassContext())
    return result, time.perf_counter() - began


def measure(
    model: Model, devices: Sequence[int], runner: Runner, check: bool, single: bool
) -> tuple[list[Row], float | None, dict[str, str]]:
    """Every device count of one model, its 1-GPU step time (``None`` without ``single``), its op types by name."""
    source = load_module(f"zoo:{model.entry}")
    ops = {node.name: node.op for node in source.graph.nodes}
    one: float | None = None
    if single:
        result, _ = _data_parallel(source, 1, model.batch, check)
        one = _place(result.module, "single", check).makespan
        runner.log(f"  {model.label} 1 GPU: {model.batch / one:.1f} samples/s")
    rows = []
    for n in devices:
        result, build = _data_parallel(source, n, model.batch, check)
        cells = {algo: _place(result.module, algo, check) for algo in STRATEGIES}
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
        rows.append(row)
        runner.log(
            f"  {model.label} {n} GPUs ({row.nodes} nodes, built in {build:.1f} s): "
            + ", ".join(f"{a} {row.samples(a):.1f}/s ({c.wall:.1f} s)" for a, c in cells.items())
        )
    return rows, one, ops


# --------------------------------------------------------------------------- the report


def _rate(row: Row, strategy: str) -> str:
    cell = row.cells[strategy]
    text = f"{row.samples(strategy):.1f}"
    return f"{text} (OOM)" if cell.oom else text


def _gain(value: float, base: float) -> str:
    return f"{(value / base - 1) * 100:+.1f}%"


def _op_types(module_ops: dict[str, str], splits: Sequence[str]) -> str:
    names = [s.rsplit(":", 2)[0] for s in splits]
    # "replica<i>/<op name>[.part<k>]" -> the op type of the original node
    kinds = Counter(module_ops.get(n.partition("/")[2].split(".part")[0], "?") for n in names)
    return ", ".join(f"{op} x{k}" for op, k in sorted(kinds.items())) or "none"


def render(
    rows: list[Row],
    singles: dict[str, float | None],
    ops: dict[str, dict[str, str]],
    command: str,
    seconds: float,
    quick: bool,
) -> str:
    """The Markdown report."""
    devices = sorted({r.devices for r in rows})
    models = list(dict.fromkeys(r.model for r in rows))
    by = {(r.model, r.devices): r for r in rows}
    lines = [
        "# FastT replication: data-parallel baseline vs DPOS vs OS-DPOS (Tables 1 and 6)",
        "",
        generated_line(command, seconds),
        "",
        "Strong scaling (FastT §6.2): the global batch is fixed and split over the GPUs. Every strategy places the "
        "same *data-parallel graph* (FastT §5.2's input graph, built by `data-parallel{replicas=n batch=G}`: one "
        "replica of the training step per GPU on G/n samples, shared variables, gradients averaged before the single "
        "Adam update), profiled analytically (roofline, V100: 15.7 TFLOP/s FP32, 900 GB/s) and scored by the "
        "simulator. **DP** = replica i on GPU i, each variable with its reads, optimizer slots and update on one GPU "
        "(variables spread by bytes), aggregation at the variable; **DPOS** = `place{algo=dpos}` (Algorithm 1); "
        "**OS-DPOS** = the `os-dpos` pass (Algorithm 2). **FastT** = the better of DP and OS-DPOS: FastT keeps "
        "a new strategy only if it is faster than the current one and starts from data parallelism (§4). "
        "Clusters: `2xV100-nvlink`, `4xV100-nvlink`, `fastt` (8x V100 16 GB, NVLink 50 GB/s, 5 us between every "
        "pair); 1 GPU: `1xV100`. Samples/s = global batch / simulated step time. No fusion (FastT places the fine "
        "graph).",
        "",
        "## Table 1 analogue: training speed (samples/s)",
        "",
    ]
    header = ["model (global batch)", "1 GPU"]
    for n in devices:
        header += [f"{n} GPUs DP", "DPOS", "OS-DPOS"]
    header += ["best FastT speed-up vs DP"]
    body = []
    for model in models:
        one = singles.get(model.entry)
        cells = [f"{model.label} ({model.batch})", "-" if one is None else f"{model.batch / one:.1f}"]
        best_gain = None
        for n in devices:
            row = by.get((model, n))
            if row is None:
                cells += ["-", "-", "-"]
                continue
            cells += [_rate(row, "data-parallel"), _rate(row, "dpos"), _rate(row, "os-dpos")]
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
        oom = sorted({f"{a}: {','.join(c.oom)}" for a, c in row.cells.items() if c.oom})
        detail_rows.append(
            [
                row.model.label,
                str(row.devices),
                f"{row.nodes} ({row.replicated} / {row.shared})",
                str(row.aggregated),
                f"{row.build_s:.1f}",
                _gain(row.samples("dpos"), dp),
                _gain(row.samples("os-dpos"), dp),
                f"{row.cells['data-parallel'].wall:.2f}",
                f"{row.cells['dpos'].wall:.2f}",
                f"{row.cells['os-dpos'].wall:.2f}",
                str(row.cells["os-dpos"].trials),
                "; ".join(oom) or "-",
            ]
        )
    lines += table(detail_header, detail_rows, "lrrrrrrrrrrl")
    lines += ["", "## Table 6 analogue: step time without / with operation splitting", ""]
    lines += [
        "At each model's device count with the largest OS-DPOS gain over DPOS (FastT: \"the settings achieving the "
        'best speedup as in Table 1"); step time in seconds.',
        "",
    ]
    t6_header = ["model", "GPUs", "no split (DPOS)", "split (OS-DPOS)", "speed-up", "splits kept", "split op types"]
    t6_rows = []
    for model in models:
        candidates = [r for r in rows if r.model == model]
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
    lines += table(t6_header, t6_rows, "lrrrrrl")
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
    lines += ["", "## Where and why these numbers differ from FastT's", "", *NOTES]
    if quick:
        lines += ["", "_This is a `--quick` run (VGG-19, 2 GPUs, global batch 256): not the committed table._"]
    return "\n".join(lines) + "\n"


NOTES = [
    "- **Simulated, not measured.** FastT ran TensorFlow 1.14 on real V100s; here every op costs its roofline "
    "time and transfers cost `latency + bytes / bandwidth`. The roofline is linear in the batch apart from a "
    "fixed per-op launch overhead, so simulated DP scales well: VGG-19 (about 300 ops per replica) almost "
    "linearly, ResNet-50 and Inception-v3 (5,000-7,700 ops per replica at 4-32 samples) sublinearly, the launch "
    "overhead being the simulator's only small-batch inefficiency. On hardware DP scales far worse (FastT "
    "Table 1: VGG-19 gains 16% from 1 to 2 GPUs and is *slower* on 8 than on 4), because small per-GPU batches "
    "under-use the GPU, the TF runtime adds per-op overhead and gradient aggregation contends for links and the "
    "host. Those losses are the room FastT's placements win back (+59% for VGG-19 on 4 GPUs); in the simulator "
    "most of that room is absent, so DP is a much stronger baseline here than in the paper.",
    "- **DPOS against DP.** On VGG-19, whose step is dominated by a few heavy convolutions and 548 MB of "
    "gradients, DPOS beats DP by a few percent on 4 and 8 GPUs. On ResNet-50 and Inception-v3 (13k-65k fine "
    "nodes) it loses: DPOS is a list-scheduling heuristic on rank_u with *maximal* compute and transfer times "
    "and one critical-path device, and with identical GPUs and cheap NVLink it interleaves the replicas' many "
    "small ops over the GPUs, paying transfers and idle gaps that DP's perfect locality avoids. FastT only "
    "activates a strategy that beats the running one and starts from data parallelism (rolling back otherwise), "
    "so its column is the better of DP and OS-DPOS and never below DP; on these two models that is DP itself.",
    "- **Operation splitting (Table 6).** OS-DPOS splits the critical-path ops of the *placed* graph in "
    "decreasing compute time and stops at the first op whose best split does not help (Algorithm 2, line 12). "
    "The first candidates are a replica's convolutions and their gradients (FastT's `Conv2D`/`Conv2Dbp`, its key "
    "split ops too). Where a split helps (VGG-19 and Inception-v3 on 2 GPUs) the gain is 1-2%, below FastT's "
    "4.5-11%; elsewhere the first candidate has no profitable split and nothing is kept. With two or more "
    "replicas each already on its own GPU, splitting one replica's op only pays when that GPU is the critical "
    "one and another has idle time, which the balanced replicas rarely leave.",
    "- **Models and batches.** ResNet-50 stands in for FastT's ResNet-200; VGG-19 and Inception-v3 are "
    "Keras's; no NMT model (re-tracing the zoo's unrolled LSTM at three batch sizes does not fit the time "
    "budget). Global batches are FastT's (64, 32, 64); each replica's graph is re-traced at G/n so reshapes, "
    "tiles and the loss divisor are exact. Adam is the optimizer (FastT does not say which it used). Costs are "
    "FP32 without tensor cores. FastT's 8-GPU two-server column is not reproduced (one NVLink server only).",
    "- **No memory pressure.** At these batches every model fits one 16 GB V100, as in FastT's strong-scaling "
    "runs; the simulator reports an OOM device when one occurs (column OOM).",
]


def run(args: argparse.Namespace, runner: Runner) -> Path:
    """Measure every model and write the report; returns its path."""
    load_builtin_passes()
    started = time.perf_counter()
    quick = bool(args.quick)
    models = QUICK_MODELS if quick else MODELS
    devices = QUICK_DEVICES if quick else DEVICES
    check = not args.no_verify
    rows: list[Row] = []
    singles: dict[str, float | None] = {}
    ops: dict[str, dict[str, str]] = {}
    for model in models:
        runner.log(f"replicate fastt: {model.label} (global batch {model.batch})")
        model_rows, one, ops[model.entry] = measure(model, devices, runner, check, single=not quick)
        rows += model_rows
        singles[model.entry] = one
    command = "python -m graphir.tools.replicate.fastt" + (" --quick" if quick else "")
    text = render(rows, singles, ops, command, time.perf_counter() - started, quick)
    path = Path(args.out) / "replicate_fastt.md"
    write_text(path, text)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Run the FastT replication (see the module docstring); 0 on success, 1 with a one-line error."""
    return run_main("fastt", run, argv, DESCRIPTION)


if __name__ == "__main__":
    raise SystemExit(main())
