"""``profile{mode=tf-run}``: costs measured from the module itself run on the rig's TensorFlow workers.

The module is lowered (:mod:`graphir.backends.tf`, ONNX- and TF-imported modules alike) and run on
its cluster's local ``tf.distribute.Server`` workers, each pinned to one core with one thread
(:mod:`graphir.backends.tf.rig`, e.g. ``--cluster=2xcpu-workers``). After ``warmup`` discarded steps
and three timed (untraced) steps, ``iterations`` steps run traced (``RunMetadata`` step statistics), and every
node's ``cost`` becomes the **median kernel time** of the TF ops lowered from it, **on the device
it ran on**:

* a fully placed module runs as placed; each node's cost for its device's kind is its measured
  time (other kinds keep a cost they already had, else get the same time);
* otherwise, for each device kind of the cluster, the unplaced nodes run on the first device of
  that kind (placed nodes stay where they are), in the graph index's topological order enforced
  as a single-device placement would be (when no node has an order yet), so every kind gets its
  own measurement; placement and order are restored afterwards.

**Tracing correction.** Tracing is not free: with ``FULL_TRACE`` (the only level at which a
distributed run reports step statistics) the kernels' measured times add up to more than the
untraced step on one worker (light_densenet121: 150 ms of kernels in a 116 ms step, measured on
the quiet 2-worker rig). When the module ran on one device, every measured time is therefore
scaled by ``min(1, (untraced step − step overhead) / sum of every traced TF op)`` of the same run
(statistic ``trace-scale``; the step overhead is the cluster's ``step_overhead``, the fixed cost
of a step beyond its graph, which the untraced step includes and the kernels do not); a placed
run on several devices has no single such ratio and is left unscaled.

What the cost does **not** include: the worker executor's gap between kernels (the cluster's
``op_overhead``), transfers between tasks (the link model, ``calibrate-comm{rig=true}``), both
of which the simulator adds, and the step's fixed cost (``step_overhead``, added by whatever
compares a makespan with a measured step). Nodes that ran no kernel (fed inputs, ops TensorFlow pruned) cost 0 and are
counted as ``unmeasured-ops``. ``mem`` comes from the analytical model, as in ``mode=onnxruntime``.

Statistics: ``nodes``, ``unmeasured-ops``, ``iterations``, ``compute-s`` (sum of costs),
``measured-run-s`` (the untraced step's wall time), ``measured-node-sum-s`` (traced, unscaled),
``traced-op-sum-s`` (every traced TF op), ``trace-scale``, ``executor-gap-s``
(``(run − step overhead − node sum) / nodes`` when the run used one device: the per-op
overhead; compare with the cluster's ``op_overhead``), ``transfers``,
``transfer-bytes`` and ``transfer-s`` (measured transfers between tasks in a placed run).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

from graphir.annotations import Cost, Mem
from graphir.errors import PassError
from graphir.ir import Module, Node
from graphir.pass_infra import PassContext, PassResult, Stat
from graphir.passes.profile.base import ProfileMode, check_measurement, register_profile_mode
from graphir.passes.profile.roofline import analyze_graph
from graphir.runguard import Deadline

if TYPE_CHECKING:
    from graphir.backends.tf.rig import RigRun

__all__ = ["TfRun", "measure_placed", "run_tf_run"]


@register_profile_mode
@dataclasses.dataclass(frozen=True)
class TfRun(ProfileMode):
    """Median kernel times of the module run on the cluster's local TensorFlow workers, per device.

    Options:
        iterations: traced steps whose per-node median is kept.
        warmup: steps discarded before measuring.
    """

    name: ClassVar[str] = "tf-run"
    runs: ClassVar[bool] = True
    iterations: int = 10
    warmup: int = 2

    def profile(self, module: Module, ctx: PassContext) -> PassResult:
        """Measured costs on the rig (see the module docstring)."""
        check_measurement(self.iterations, self.warmup)
        return run_tf_run(self, module, ctx)


def _check_rig(module: Module) -> None:
    if not module.cluster.devices or not all("/job:" in d.tf_device for d in module.cluster.devices):
        raise PassError(
            f"profile{{mode=tf-run}} runs on local TensorFlow workers: cluster '{module.cluster.spec}' needs "
            "/job:worker/task:k devices (e.g. --cluster=2xcpu-workers)"
        )


def measure_placed(module: Module, iterations: int, warmup: int, seed: int, steps: int = 1) -> RigRun:
    """Run ``module`` as placed on its cluster's rig and return the measurements."""
    from graphir.backends.tf.rig import rig, run_on_rig

    deadline = Deadline(None, "profile{mode=tf-run}")
    with rig(module.cluster, timeout_s=deadline.remaining()) as servers:
        return run_on_rig(
            module,
            servers,
            steps=steps,
            warmup=warmup,
            trace_steps=iterations,
            seed=seed,
            timeout_s=deadline.remaining(),
            what=deadline.what,
        )


def run_tf_run(options: TfRun, module: Module, ctx: PassContext) -> PassResult:
    """``profile{mode=tf-run}`` (see the module docstring)."""
    _check_rig(module)
    nodes = module.graph.index().nodes
    cluster = module.cluster
    unplaced = [node for node in nodes if node.device is None]
    by_tf_device = {device.tf_device: device for device in cluster.devices}
    measured: dict[str, dict[str, float]] = {}  # kind -> node name -> seconds
    runs: list[RigRun] = []
    kinds = sorted(cluster.kinds) if unplaced else [None]
    for kind in kinds:
        ordered = False
        if kind is not None:
            first = next(d for d in cluster.devices if d.kind == kind)
            ordered = all(node.order is None for node in nodes)
            for position, node in enumerate(unplaced):
                node.device = first.name
                if ordered:  # the order a single-device placement enforces: the index's topological order
                    node.order = position
        try:
            ctx.log(f"profile: running '{module.name}' on the rig ({cluster.spec}) for its measured costs")
            run = measure_placed(module, options.iterations, options.warmup, ctx.seed, steps=3)
        finally:
            for node in unplaced:
                node.device = None
                if kind is not None and ordered:
                    node.order = None
        runs.append(run)
        scale = _trace_scale(run, cluster.step_overhead)
        for name, seconds in run.node_seconds.items():
            seconds *= scale
            device = by_tf_device.get(run.node_devices[name])
            where = device.kind if device is not None else (kind or "")
            measured.setdefault(where, {})[name] = seconds
    return PassResult(True, _write(module, nodes, measured, runs, options.iterations))


def _trace_scale(run: RigRun, step_overhead: float = 0.0) -> float:
    """``min(1, (untraced step − step overhead) / traced kernel sum)`` of a run on one device, else 1.

    See the module docstring; a step overhead as long as the step itself is ignored.
    """
    if len(set(run.node_devices.values())) != 1 or run.op_seconds <= 0:
        return 1.0
    graph_s = run.median_s - step_overhead if run.median_s > step_overhead else run.median_s
    return min(1.0, graph_s / run.op_seconds)


def _write(
    module: Module, nodes: list[Node], measured: dict[str, dict[str, float]], runs: list[RigRun], iterations: int
) -> dict[str, Stat]:
    work = analyze_graph(module.graph)
    kinds = sorted(module.cluster.kinds)
    unmeasured = 0
    compute = 0.0
    for i, node in enumerate(nodes):
        own = {kind: measured[kind][node.name] for kind in kinds if node.name in measured.get(kind, {})}
        if not own:
            unmeasured += 1
        before = dict(node.cost.times) if node.cost is not None else {}
        fallback = next(iter(own.values()), 0.0)
        times = {kind: own.get(kind, before.get(kind, fallback)) for kind in kinds}
        node.cost = Cost(tuple((kind, float(f"{t:.12g}")) for kind, t in times.items()))
        node.mem = Mem(int(work.persistent[i]), int(work.activation[i]), int(work.temporary[i]))
        compute += fallback
    first = runs[0]
    node_sum = sum(first.node_seconds.values())
    step_overhead = module.cluster.step_overhead
    scale = _trace_scale(first, step_overhead)
    stats: dict[str, Stat] = {
        "nodes": len(nodes),
        "unmeasured-ops": unmeasured,
        "iterations": iterations,
        "compute-s": compute,
        "measured-run-s": first.median_s,
        "measured-node-sum-s": node_sum,
        "traced-op-sum-s": first.op_seconds,
        "trace-scale": scale,
        "transfers": sum(len(run.transfers) for run in runs),
        "transfer-bytes": sum(t[3] for run in runs for t in run.transfers),
        "transfer-s": sum(t[4] for run in runs for t in run.transfers),
    }
    if len(set(first.node_devices.values())) == 1 and nodes:
        stats["executor-gap-s"] = max(first.median_s - step_overhead - node_sum * scale, 0.0) / len(nodes)
    return stats
