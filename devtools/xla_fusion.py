"""Spike for issue 37: chosen op sets compiled as XLA clusters in graphir's TF lowering, measured on the rig.

No product code is changed: a block (a BERT-like chain built with ``tf.compat.v1``) is imported into
graphir, placed on the rig's devices and lowered by :func:`graphir.backends.tf.lower`; the "fused"
variant then marks the TF ops lowered from the chain's IR nodes with the attributes
``tf.xla.experimental.jit_scope`` sets (``_XlaCompile``, ``_XlaScope``,
``_XlaSeparateCompiledGradients``) on the lowered ``GraphDef``, which is what a ``fuse-kernels`` pass
would ask the lowering to do. Both variants run through graphir's own
:class:`~graphir.backends.tf.session.SessionRunner` (Grappler off, graph optimiser at L0) on
pinned single-thread ``tf.distribute.Server`` workers started as :func:`graphir.backends.tf.rig.rig`
starts them, a fresh set per variant (so each fused variant's first step includes its compile).

Blocks (batch 4, sequence 128, hidden 1024, 16 heads, as BERT-large at 4 samples per replica):

* ``ln_gelu``: ``BiasAdd`` + residual ``AddV2`` + LayerNorm (``tf.nn.moments`` and
  ``tf.nn.batch_normalization``, as ``tf.contrib.layers.layer_norm`` in BERT) + BERT's tanh GELU
  (``tf.pow``) on ``[4, 128, 1024]``.
* ``softmax``: BERT's attention mask and softmax: the ``[4, 128]`` input mask broadcast to
  ``[4, 1, 128, 128]``, ``(1 - mask) * -10000`` added to the scaled ``[4, 16, 128, 128]`` scores, ``Softmax``.
* ``ln_gelu_grad``: ``ln_gelu`` and its gradients (``tf.gradients`` with an upstream ``dy``) to the
  input, the residual, the bias, gamma and beta: one cluster of forward and backward.

Per variant: the first step's wall time (compile included), the median wall time of the timed steps
(``--min-seconds`` of them, at least ``--steps``), the TF ops of a traced step (``_SOURCE`` left out)
and the sum of their kernel times, the idle time of the chain's worker between kernels, the XLA ops
of the step, and the largest relative difference of the outputs against the unfused variant
(:func:`graphir.backends.tf.check.relative_error`). The ``--distributed`` run places the inputs on
task 0 and the chain on task 1 of a 2-worker rig. The workers' default ``TF_XLA_FLAGS`` turn lazy
compilation off (two ops per cluster, no silent fallback) and XLA's TF-graph constant folding off
(in a ``tf.distribute.Server`` it fails with "Multiple CPU devices" on clusters holding constants).

Usage::

    python -m devtools.xla_fusion [--blocks ln_gelu,softmax,ln_gelu_grad] [--min-seconds 3] [--distributed]
        [--repeat 3] [--feed] [--xla-flags="..."] [--json OUT]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphir.errors import GraphIRError

BATCH, SEQ, HIDDEN, HEADS = 4, 128, 1024, 16
CHAIN = "chain"
"""Name scope of the ops a block fuses; the rest (inputs, weights, output identities) stays outside."""
XLA_ATTRS = ("_XlaCompile", "_XlaScope", "_XlaSeparateCompiledGradients")


def _layer_norm_gelu(tf: Any, x: Any, residual: Any, bias: Any, gamma: Any, beta: Any) -> Any:
    """BERT's ``BiasAdd`` + residual + ``layer_norm`` + tanh ``gelu`` (google-research/bert modeling.py)."""
    h = tf.nn.bias_add(x, bias) + residual
    mean, variance = tf.nn.moments(h, axes=[-1], keepdims=True)
    y = tf.nn.batch_normalization(h, mean, variance, beta, gamma, 1e-12)
    cdf = 0.5 * (1.0 + tf.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * tf.pow(y, 3))))
    return y * cdf


def build_block(name: str) -> tuple[Any, list[str]]:
    """The block's ``GraphDef`` and its output tensor names; the fused ops are under :data:`CHAIN`."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    rng = np.random.default_rng(7)
    graph = tf.Graph()
    with graph.as_default():
        if name in ("ln_gelu", "ln_gelu_grad"):
            x = tf1.placeholder(tf.float32, [BATCH, SEQ, HIDDEN], name="x")
            residual = tf1.placeholder(tf.float32, [BATCH, SEQ, HIDDEN], name="residual")
            bias = tf.constant(rng.standard_normal(HIDDEN).astype(np.float32) * 0.1, name="bias")
            gamma = tf.constant(1.0 + rng.standard_normal(HIDDEN).astype(np.float32) * 0.1, name="gamma")
            beta = tf.constant(rng.standard_normal(HIDDEN).astype(np.float32) * 0.1, name="beta")
            if name == "ln_gelu":
                with tf.name_scope(CHAIN):
                    out = _layer_norm_gelu(tf, x, residual, bias, gamma, beta)
                outputs = [tf.identity(out, name="out")]
            else:
                dy = tf1.placeholder(tf.float32, [BATCH, SEQ, HIDDEN], name="dy")
                with tf.name_scope(CHAIN):
                    out = _layer_norm_gelu(tf, x, residual, bias, gamma, beta)
                    grads = tf.gradients(out, [x, residual, bias, gamma, beta], grad_ys=dy)
                outputs = [tf.identity(out, name="out")] + [
                    tf.identity(g, name=f"d_{k}")
                    for k, g in zip(("x", "residual", "bias", "gamma", "beta"), grads, strict=True)
                ]
        elif name == "softmax":
            scores = tf1.placeholder(tf.float32, [BATCH, HEADS, SEQ, SEQ], name="scores")
            input_mask = tf1.placeholder(tf.int32, [BATCH, SEQ], name="input_mask")
            with tf.name_scope(CHAIN):
                # BERT's create_attention_mask_from_input_mask and attention_layer
                to_mask = tf.cast(tf.reshape(input_mask, [BATCH, 1, SEQ]), tf.float32)
                mask = tf.ones([BATCH, SEQ, 1], tf.float32) * to_mask
                adder = (1.0 - tf.expand_dims(mask, axis=[1])) * -10000.0
                probs = tf.nn.softmax(scores * (1.0 / np.sqrt(HIDDEN // HEADS)) + adder)
            outputs = [tf.identity(probs, name="out")]
        else:
            raise GraphIRError(f"unknown block '{name}': ln_gelu, softmax or ln_gelu_grad")
    return graph.as_graph_def(), [t.name for t in outputs]


def mark_cluster(graph_def: Any, ops: set[str], scope: str) -> Any:
    """``graph_def`` with ``ops`` carrying ``jit_scope``'s attributes (one ``_XlaScope``); modified in place."""
    for node in graph_def.node:
        if node.name in ops:
            node.attr["_XlaCompile"].b = True
            node.attr["_XlaScope"].s = scope.encode()
            node.attr["_XlaSeparateCompiledGradients"].b = False
    return graph_def


def fused_lowering(lowered: Any, ops: set[str], scope: str = "fused_0") -> Any:
    """The lowering whose ``graph_def()`` marks ``ops`` as one XLA scope (the rest unchanged)."""
    original: Callable[[], Any] = lowered._graph_def  # noqa: SLF001  (the spike wraps the lowering's own builder)
    return dataclasses.replace(lowered, _graph_def=lambda: mark_cluster(original(), ops, scope))


def cluster_bytes(graph_def: Any, ops: set[str], fetches: Sequence[str]) -> tuple[int, int]:
    """(bytes entering or leaving the op set, bytes of every tensor the set makes): the roofline's two sides."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")

    def nbytes(tensor: Any) -> int:
        return int(np.prod(tensor.shape.as_list())) * tensor.dtype.size

    external: dict[str, int] = {}
    made = 0
    fetched = set(fetches)
    for op in graph.get_operations():
        if op.name not in ops:
            continue
        for tensor in op.inputs:
            if tensor.op.name not in ops:
                external[tensor.name] = nbytes(tensor)
        for tensor in op.outputs:
            made += nbytes(tensor)
            if tensor.name in fetched or any(user.name not in ops for user in tensor.consumers()):
                external[tensor.name] = nbytes(tensor)
    return sum(external.values()), made


@dataclasses.dataclass
class Variant:
    """One block run one way on the rig."""

    block: str
    fused: bool
    first_s: float
    median_s: float
    steps: int
    ops: int
    kernel_s: float
    xla_ops: dict[str, float]
    devices: dict[str, int]
    outputs: list[np.ndarray] = dataclasses.field(repr=False)
    op_kernels: dict[str, float] = dataclasses.field(repr=False, default_factory=dict)
    busy_s: float = 0.0
    idle_s: float = 0.0


def _place(module: Any, distributed: bool) -> None:
    """Every node on worker0; with ``distributed``, the chain on worker1 (inputs and outputs stay on worker0)."""
    for node in module.graph.nodes:
        node.device = "worker1" if distributed and node.name.startswith(CHAIN + "/") else "worker0"


def run_variant(
    block: str,
    fused: bool,
    *,
    distributed: bool,
    min_seconds: float,
    steps: int,
    environment: dict[str, str],
    feed: bool = False,
) -> tuple[Variant, Any, set[str]]:
    """Lower ``block``, optionally mark its chain, and measure it on a fresh pinned rig.

    The inputs are held on their device (``SessionRunner(held_inputs=...)``) unless ``feed``: a fed
    input enters the master's graph as a ``_Recv`` from the client, which XLA's deadness analysis
    treats as possibly dead, and a marked set whose ops depend on different fed inputs (or on none,
    as its constants do) is split into several clusters. Timed steps fetch the output ops as
    targets (nothing is copied back to the client); the first and a last step fetch the values.
    """
    from graphir.backends.tf import lower
    from graphir.backends.tf.distributed import start_local_servers
    from graphir.backends.tf.rig import WORKER_ENVIRONMENT, parse_step_stats, rig_cores
    from graphir.backends.tf.session import SessionRunner, random_inputs
    from graphir.driver.clusters import resolve_cluster
    from graphir.importers.tf import import_graphdef

    graph_def, outputs = build_block(block)
    module = import_graphdef(graph_def, name=block, source=f"<{block}>", outputs=outputs)
    workers = 2 if distributed else 1
    module.set_cluster(resolve_cluster(f"{workers}xcpu-workers"))
    _place(module, distributed)
    lowered = lower(module, enforce_order=False)
    chain_ops = {op for node, ops in lowered.node_ops.items() if node.startswith(CHAIN + "/") for op in ops}
    if fused:
        lowered = fused_lowering(lowered, chain_ops)
    inputs = random_inputs(module, lowered.input_names, seed=0)
    held = {} if feed else dict(zip(lowered.feeds, inputs, strict=True))
    if held:
        inputs = []
    targets = [] if feed else [name.rsplit(":", 1)[0] for name in lowered.fetches]
    cores = rig_cores(workers)
    env = {**WORKER_ENVIRONMENT, **environment}
    with start_local_servers(module.cluster, timeout_s=120, cores=cores, threads=1, environment=env) as servers:
        with SessionRunner(
            module, lowered, servers.target, timeout_s=600, what=f"{block} on the rig", held_inputs=held
        ) as runner:
            begin = time.perf_counter()
            runner.run(inputs, targets or None)
            first = time.perf_counter() - begin
            for _ in range(2):
                runner.run(inputs, targets or None)
            times: list[float] = []
            while len(times) < steps or (sum(times) < min_seconds and len(times) < 2000):
                begin = time.perf_counter()
                runner.run(inputs, targets or None)
                times.append(time.perf_counter() - begin)
            traces = [parse_step_stats(runner.run_metadata(inputs, targets or None)) for _ in range(5)]
            values = runner.run(inputs)
    kernels: dict[str, list[float]] = {}
    devices: dict[str, int] = {}
    for trace in traces:
        for name, stat in trace.ops.items():
            if name != "_SOURCE":
                kernels.setdefault(name, []).append(stat.seconds)
    for name, stat in traces[0].ops.items():
        if name != "_SOURCE":
            devices[stat.device] = devices.get(stat.device, 0) + 1
    medians = {name: statistics.median(values) for name, values in kernels.items()}
    spans = [_device_span(trace, "task:1" if distributed else "task:0") for trace in traces]
    xla = {name: seconds for name, seconds in medians.items() if "/xla_" in name or name.startswith("cluster_")}
    variant = Variant(
        block=block,
        fused=fused,
        first_s=first,
        median_s=statistics.median(times),
        steps=len(times),
        ops=len(medians),
        kernel_s=sum(medians.values()),
        xla_ops=xla,
        devices=devices,
        outputs=values,
        op_kernels=medians,
        busy_s=statistics.median(busy for busy, _ in spans),
        idle_s=statistics.median(idle for _, idle in spans),
    )
    return variant, lowered, chain_ops


def stream_bandwidth(mib: int = 64, repeats: int = 20) -> float:
    """Bytes per second of ``numpy.add(a, 1, out=b)`` on ``mib`` MiB (read + write; one thread, this process)."""
    a = np.ones(mib << 18, np.float32)
    b = np.empty_like(a)
    times = []
    for _ in range(repeats):
        begin = time.perf_counter()
        np.add(a, 1.0, out=b)
        times.append(time.perf_counter() - begin)
    return 2 * a.nbytes / statistics.median(times)


def _device_span(trace: Any, task: str) -> tuple[float, float]:
    """(kernel time, idle time between kernels) of one traced step on the device of ``task``.

    The idle time is the executor's gaps between one kernel's end and the next kernel's start on the
    worker's one thread (its per-op overhead), without the client's RPC before and after the step.
    """
    spans = sorted(
        (stat.start, stat.end) for name, stat in trace.ops.items() if task in stat.device and name != "_SOURCE"
    )
    busy = idle = 0.0
    reached = spans[0][0] if spans else 0.0
    for start, end in spans:
        idle += max(start - reached, 0.0)
        busy += max(end - max(start, reached), 0.0)
        reached = max(reached, end)
    return busy, idle


def _combine(runs: Sequence[Variant]) -> Variant:
    """The first run with the medians over ``runs`` of its step, kernel-sum and first-step times."""
    return dataclasses.replace(
        runs[0],
        median_s=statistics.median(v.median_s for v in runs),
        kernel_s=statistics.median(v.kernel_s for v in runs),
        busy_s=statistics.median(v.busy_s for v in runs),
        idle_s=statistics.median(v.idle_s for v in runs),
        first_s=statistics.median(v.first_s for v in runs),
        steps=sum(v.steps for v in runs),
    )


def _row(v: Variant) -> str:
    kind = "XLA cluster" if v.fused else "unfused"
    return (
        f"| {v.block} | {kind} | {v.ops} | {v.median_s * 1e3:.3f} | {v.kernel_s * 1e3:.3f} | "
        f"{(v.median_s - v.kernel_s) * 1e3:.3f} | {v.idle_s * 1e3:.3f} | {v.first_s * 1e3:.1f} | {v.steps} |"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the blocks unfused and fused; print a Markdown table and the details."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", default="ln_gelu,softmax,ln_gelu_grad")
    parser.add_argument("--min-seconds", type=float, default=3.0, help="timed steps add up to at least this")
    parser.add_argument("--steps", type=int, default=20, help="at least this many timed steps")
    parser.add_argument("--distributed", action="store_true", help="chain on task 1 of a 2-worker rig")
    parser.add_argument(
        "--xla-flags",
        default="--tf_xla_enable_lazy_compilation=false --tf_xla_disable_constant_folding=true",
        help="TF_XLA_FLAGS of the workers",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs of each pair (alternating); medians reported")
    parser.add_argument("--feed", action="store_true", help="feed the inputs every step instead of holding them")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from graphir.backends.tf.check import relative_error

    environment = {"TF_XLA_FLAGS": args.xla_flags} if args.xla_flags else {}
    print(f"TF_XLA_FLAGS of the workers: {args.xla_flags!r}; distributed: {args.distributed}; fed: {args.feed}")
    bandwidth = stream_bandwidth()
    print(f"stream rate of this process (numpy add, 64 MiB, one thread): {bandwidth / 1e9:.2f} GB/s")
    print(
        "| block | variant | TF ops | median step ms | kernel sum ms | step - kernels ms "
        "| idle between kernels ms | first step ms | steps |"
    )
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|")
    figures = []
    details = []
    for block in args.blocks.split(","):
        options = {
            "distributed": args.distributed,
            "min_seconds": args.min_seconds,
            "steps": args.steps,
            "environment": environment,
            "feed": args.feed,
        }
        plains: list[Variant] = []
        fuseds: list[Variant] = []
        loads: list[float] = []
        for _ in range(args.repeat):
            plain, lowered, chain_ops = run_variant(block, False, **options)
            fused, fused_lowered, _ = run_variant(block, True, **options)
            plains.append(plain)
            fuseds.append(fused)
            loads.append(os.getloadavg()[0])
        plain, fused = _combine(plains), _combine(fuseds)
        print(_row(plain))
        print(_row(fused))
        external, made = cluster_bytes(fused_lowered.graph_def(), chain_ops, lowered.fetches)
        chain_tf = [op for op in plain.op_kernels if op in chain_ops]
        chain_kernel = sum(plain.op_kernels[op] for op in chain_tf)
        error = relative_error(fused.outputs, plain.outputs)
        removed = plain.ops - fused.ops
        saved = plain.median_s - fused.median_s
        gap_saved = (plain.median_s - plain.kernel_s) - (fused.median_s - fused.kernel_s)
        run_s = sum(seconds for name, seconds in fused.xla_ops.items() if name.endswith("/xla_run"))
        row = {
            "block": block,
            "distributed": args.distributed,
            "xla_flags": args.xla_flags,
            "chain_tf_ops": len(chain_ops),
            "chain_ops_run": len(chain_tf),
            "chain_kernel_s": chain_kernel,
            "external_bytes": external,
            "made_bytes": made,
            "ops_removed": removed,
            "step_saved_s": saved,
            "saved_per_removed_op_s": saved / removed if removed else None,
            "compile_s": fused.first_s - fused.median_s,
            "gap_saved_s": gap_saved,
            "idle_saved_s": plain.idle_s - fused.idle_s,
            "xla_run_s": run_s,
            "stream_bytes_per_s": bandwidth,
            "load_1min": loads,
            "runs": {
                variant: [(v.median_s, v.kernel_s, v.first_s) for v in runs]
                for variant, runs in (("plain", plains), ("fused", fuseds))
            },
            "max_relative_error": error,
            "plain": {k: v for k, v in dataclasses.asdict(plain).items() if k not in ("outputs", "op_kernels")},
            "fused": {k: v for k, v in dataclasses.asdict(fused).items() if k not in ("outputs", "op_kernels")},
        }
        figures.append(row)
        details.append(
            f"{block}: chain {len(chain_ops)} TF ops ({len(chain_tf)} ran, kernels {chain_kernel * 1e3:.3f} ms); "
            f"fused XLA ops {', '.join(f'{k} {v * 1e3:.3f} ms' for k, v in sorted(fused.xla_ops.items()))}; "
            f"devices {fused.devices}; external bytes {external / 2**20:.2f} MiB, made {made / 2**20:.2f} MiB; "
            f"ops removed {removed}, step saved {saved * 1e3:.3f} ms"
            + (f" = {saved / removed * 1e6:.1f} us per removed op" if removed else "")
            + f"; of which gaps (step - kernels) {gap_saved * 1e3:.3f} ms"
            + (f" = {gap_saved / removed * 1e6:.1f} us per removed op" if removed else "")
            + f"; idle between kernels {plain.idle_s * 1e3:.3f} -> {fused.idle_s * 1e3:.3f} ms"
            + (f" = {(plain.idle_s - fused.idle_s) / removed * 1e6:.2f} us per removed op" if removed else "")
            + f"; xla_run {run_s * 1e3:.3f} ms against external bytes at the stream rate "
            f"{external / bandwidth * 1e3:.3f} ms and made bytes {made / bandwidth * 1e3:.3f} ms"
            + f"; compile ~{(fused.first_s - fused.median_s) * 1e3:.0f} ms; max relative error {error:.3g}"
            + f"; load {', '.join(f'{x:.1f}' for x in loads)}"
        )
    print()
    for line in details:
        print(line)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=1, default=float)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except GraphIRError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
