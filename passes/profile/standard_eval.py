"""``profile{mode=standard-eval}``: Celeritas's Standard Evaluation, both steps (§4.2.1).

Step 1 is ``profile{mode=regression}`` (:mod:`graphir.passes.profile.tf`): the model measured at small
batch sizes, one least-squares line per node for time and memory, evaluated at the target batch.
Celeritas measures step 1 on one device of the kind step 2 runs on; here (``step1=rig``, the
default) each small batch runs on the cluster's first TensorFlow worker (the whole model placed
there, ``place{algo=single}``, ``warmup`` then ``iterations`` traced steps), so both steps time the
same kernels in the same runtime. ``step1=local`` measures in a local single-threaded session
instead (``mode=regression``'s own way). The two runtimes run different kernels for the same op:
the local session's graph optimisation rewrites ``MatMul`` into oneDNN's ``_MklMatMul``, while the
rig's distributed workers run TensorFlow's Eigen ``MatMul``; on the small LSTM training graph of
``benchmarks/results/online.md`` the backward ``MatMul``s of every LSTM cell took ~70 µs locally and
~800 µs on a worker, so step 1 measured locally missed a quarter of the nodes by 10x.

Step 2 ("we acquire accurate operation information by running the large-batch model for a few
iterations using a sequential placement strategy based on memory constraints"): the module itself,
at its own batch (the target), is placed **sequentially** over the cluster's devices by ``placer``
(default ``m-topo``: devices filled one after another along a topological order up to an equal
memory share, with the step-1 memory predictions; Celeritas compares m-TOPO and DFS-TOPO for this
step, §6) and run on the cluster's TensorFlow workers (the rig, ``--cluster=Nxcpu-workers``):
``warmup`` steps, then ``iterations`` traced steps
(:func:`graphir.backends.tf.strategy_run.run_strategy`). Per node it reads the kernel time (median,
on the device it ran on) and the output and temporary bytes (as ``mode=tf`` reads them), and
compares them with the step-1 predictions:

* the **deviation** ``|predicted − measured| / measured`` per node (nodes whose measured value is
  positive), reported as ``se2-time-deviation-*`` and ``se2-mem-deviation-*`` (mean, median, p90,
  share within 20 %, count; memory = output + temporary bytes of every node but variables and
  constants, whose bytes are persistent, temporary bytes read without the allocator's padding of the
  outputs, :func:`unpadded_temporary`; ``se2-time-10us-*`` over nodes measured at ≥ 10 µs), plus the
  deviation of the totals
  (``se2-mem-total-deviation``, ``se2-time-total-deviation``);
* where a node's deviation exceeds ``threshold``, its **measured** value replaces the prediction
  (time and memory separately; ``se2-replaced-time-ops``, ``se2-replaced-mem-ops``).

The module's placement and order are restored afterwards. Statistics of step 1 keep their names;
``se2-devices`` counts the devices the sequential placement used and ``se2-run-s`` is the untraced
step's median wall time under it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from graphir.annotations import Cost, Mem
from graphir.cluster_model import Cluster
from graphir.errors import PassError
from graphir.ir import Module, Node
from graphir.ops import is_variable, owns_value
from graphir.pass_infra import PassContext, PassResult, Stat
from graphir.pass_manager import PassManager
from graphir.passes.profile.base import check_measurement, register_profile_mode
from graphir.passes.profile.tf import (
    NodeMeasure,
    Regression,
    deviation_stats,
    relative_deviation,
    run_regression,
)
from graphir.passes.transform.batching import module_batch
from graphir.pipeline import parse_pipeline

__all__ = ["BFC_ALLOCATION_BYTES", "SLOW_NODE_S", "StandardEval", "unpadded_temporary"]

BFC_ALLOCATION_BYTES = 256
"""TF's BFC allocator (the rig workers' allocator) rounds every allocation up to a multiple of 256 bytes
(``kMinAllocationSize``): a node's allocated bytes exceed its output's requested bytes by that
padding, which is not temporary memory (a 4-byte scalar reads as 4 output + 252 "temporary" bytes)."""


def unpadded_temporary(output: int, temporary: int) -> int:
    """A rig node's temporary bytes without the BFC padding of its output (see :data:`BFC_ALLOCATION_BYTES`)."""
    if output < 0:
        return temporary
    return max(0, temporary - (-output) % BFC_ALLOCATION_BYTES)


SLOW_NODE_S = 10e-6
"""Nodes measured at or above this time get their own time-deviation statistics (``se2-time-10us-*``): below
it, timer resolution and the tracer's own cost dominate a relative deviation."""


@register_profile_mode
@dataclasses.dataclass(frozen=True)
class StandardEval(Regression):
    """Celeritas's Standard Evaluation, both steps: the regression, then a sequential multi-device run at the target.

    Options:
        iterations: measured steps per batch size (step 1) and traced steps on the workers (step 2).
        warmup: steps discarded before measuring.
        threads: TensorFlow threads of the step-1 measurements (0: the runtime's default).
        batches: the small batch sizes of step 1 (at least two).
        target: the batch size predicted: the module's own batch (0), which step 2 runs.
        validate: also measure the target on one device as ``mode=regression`` does.
        threshold: relative deviation above which step 2's measured value replaces the prediction.
        placer: the sequential placement of step 2 (a ``place`` algorithm, default ``m-topo``).
        steps: untraced timed steps of step 2 (its ``se2-run-s``).
        step1: where step 1 measures: ``rig`` (one TensorFlow worker of the cluster) or ``local``
            (a local session with ``threads`` threads).
    """

    name: ClassVar[str] = "standard-eval"
    checks_memory: ClassVar[bool] = True  # step 2 runs the module itself
    threshold: float = 0.2
    placer: str = "m-topo"
    steps: int = 2
    step1: str = "rig"

    def profile(self, module: Module, ctx: PassContext) -> PassResult:
        """Both steps (see the module docstring)."""
        check_measurement(self.iterations, self.warmup, self.threads)
        if self.threshold < 0:
            raise PassError(f"'threshold' must be >= 0, got {self.threshold}")
        if not module.cluster.devices or not all("/job:" in d.tf_device for d in module.cluster.devices):
            raise PassError(
                f"profile{{mode=standard-eval}} runs step 2 on TensorFlow workers: cluster '{module.cluster.spec}' "
                "needs /job:worker/task:k devices (e.g. --cluster=2xcpu-workers)"
            )
        own = module_batch(module)
        if self.target not in (0, own):
            raise PassError(
                f"step 2 runs the module itself: 'target' must be its batch ({own}) or 0, got {self.target}"
            )
        if self.step1 not in ("rig", "local"):
            raise PassError(f"'step1' must be 'rig' or 'local', got '{self.step1}'")
        measure = _rig_measure(module.cluster) if self.step1 == "rig" else None
        step1 = run_regression(self, module, ctx, measure)
        stats = dict(step1.stats)
        stats |= _step2(self, module, ctx)
        return PassResult(True, stats)


def _rig_measure(cluster: Cluster) -> Callable[[Module, Regression, int, list[str]], NodeMeasure]:
    """Step 1's measurement of one batch size on the cluster's first rig worker (see the module docstring)."""

    def measure(at_batch: Module, options: Regression, seed: int, names: list[str]) -> NodeMeasure:
        from graphir.backends.tf.rig import rig
        from graphir.backends.tf.strategy_run import run_strategy

        at_batch.set_cluster(cluster)
        PassManager(parse_pipeline("place{algo=single}")).run(at_batch, PassContext(seed=seed))
        with rig(cluster) as servers:
            measured = run_strategy(
                at_batch, servers, steps=1, warmup=options.warmup, trace_steps=options.iterations, seed=seed
            )
        run = measured.run
        seconds = np.array([run.node_seconds.get(name, np.nan) for name in names])
        memory = [measured.node_memory.get(name, (-1, -1)) for name in names]
        output = np.array([out for out, _ in memory], dtype=np.int64)
        temporary = np.array([unpadded_temporary(out, temp) for out, temp in memory], dtype=np.int64)
        return NodeMeasure(seconds, output, temporary, run.median_s, min(run.times_s), options.iterations)

    return measure


def _profiled(node: Node) -> tuple[Cost, Mem]:
    """``node``'s cost and mem, which step 1 annotated."""
    cost, mem = node.cost, node.mem
    assert cost is not None and mem is not None, f"step 1 annotated every node ('{node.name}' has no cost or mem)"
    return cost, mem


def _step2(options: StandardEval, module: Module, ctx: PassContext) -> dict[str, Stat]:
    from graphir.backends.tf.rig import rig
    from graphir.backends.tf.strategy_run import run_strategy

    nodes = module.graph.index().nodes
    kinds = sorted(module.cluster.kinds)
    profiled = [_profiled(node) for node in nodes]
    predicted_t = np.array([cost.time(kinds[0]) or 0.0 for cost, _ in profiled])
    predicted_m = np.array([mem.activation + mem.temporary for _, mem in profiled], dtype=float)
    saved = [(node.device, node.order) for node in nodes]
    try:
        PassManager(parse_pipeline(f"place{{algo={options.placer}}}")).run(module, ctx)
        used = len({node.device for node in nodes})
        ctx.log(f"profile: standard evaluation step 2: '{module.name}' on {used} device(s) ({options.placer})")
        with rig(module.cluster) as servers:
            measured = run_strategy(
                module,
                servers,
                steps=options.steps,
                warmup=options.warmup,
                trace_steps=options.iterations,
                seed=ctx.seed,
            )
    finally:
        for node, (device, order) in zip(nodes, saved, strict=True):
            node.device, node.order = device, order
    run = measured.run
    seconds = np.array([run.node_seconds.get(node.name, np.nan) for node in nodes])
    bytes_of = [measured.node_memory.get(node.name, (-1, 0)) for node in nodes]
    memory = np.array([out + unpadded_temporary(out, temp) if out >= 0 else -1 for out, temp in bytes_of], dtype=float)
    has_t = ~np.isnan(seconds)
    # memory compared on activations and scratch: variables and constants hold persistent bytes (as in step 1)
    has_m = (memory >= 0) & ~np.array([is_variable(node.op) or owns_value(node.op) for node in nodes], dtype=bool)
    stats: dict[str, Stat] = {"se2-devices": used, "se2-run-s": run.median_s, "se2-threshold": options.threshold}
    stats |= deviation_stats("se2-time", relative_deviation(predicted_t[has_t], seconds[has_t]))
    stats |= deviation_stats("se2-mem", relative_deviation(predicted_m[has_m], memory[has_m]))
    slow = has_t & (np.nan_to_num(seconds) >= SLOW_NODE_S)
    stats |= deviation_stats("se2-time-10us", relative_deviation(predicted_t[slow], seconds[slow]))
    total_m, total_t = memory[has_m].sum(), seconds[has_t].sum()
    stats["se2-mem-total-deviation"] = float(abs(predicted_m[has_m].sum() - total_m) / total_m) if total_m else 0.0
    stats["se2-time-total-deviation"] = float(abs(predicted_t[has_t].sum() - total_t) / total_t) if total_t else 0.0
    replaced_t = replaced_m = 0
    for i, node in enumerate(nodes):
        if has_t[i] and seconds[i] > 0 and abs(predicted_t[i] - seconds[i]) > options.threshold * seconds[i]:
            node.cost = Cost(tuple((kind, float(f"{seconds[i]:.12g}")) for kind in kinds))
            replaced_t += 1
        if has_m[i] and memory[i] > 0 and abs(predicted_m[i] - memory[i]) > options.threshold * memory[i]:
            out, temp = measured.node_memory[node.name]
            temp = unpadded_temporary(out, temp)
            persistent = node.mem.persistent if node.mem is not None else 0
            node.mem = Mem(persistent, int(out), int(temp))
            replaced_m += 1
    stats["se2-replaced-time-ops"] = replaced_t
    stats["se2-replaced-mem-ops"] = replaced_m
    return stats
