"""The measured TensorFlow modes of ``profile``: ``mode=tf`` and ``mode=regression`` (Celeritas §4.2.1).

Both are profiling modes registered here in :data:`graphir.passes.profile.MODES` (:class:`Tf`,
:class:`Regression`, each with its own options); the TensorFlow calls live in
:mod:`graphir.backends.tf.measure` and :mod:`graphir.passes.transform.batching` (TensorFlow is imported only when a
mode runs).

``profile{mode=tf iterations=N warmup=W threads=T}`` re-exports the TF-dialect module as a
GraphDef, runs one step ``W + N`` times in a traced session and annotates every node with the
median measured kernel time (the same for every device kind of the cluster, like
``mode=onnxruntime``: use an ``Nxcpu`` cluster to place on this machine) and ``mem`` =
(persistent bytes from the analytical model — variables and weights —, measured output bytes,
measured temporary bytes). Variables and weight-like ops (``VarHandleOp``, ``Const``) keep the
analytical memory (their outputs are persistent, not activations).

**Fused kernels.** TF's oneDNN layout pass (on by default on x86 CPUs, not controlled by the session's
rewrite options) fuses e.g. ``Conv2D`` + ``BiasAdd`` and ``Conv2DBackpropFilter`` + ``BiasAddGrad``
and reports the fused kernel under one member's name. An unreported node of such a pattern takes a
share of its partner's measured time proportional to their analytical host-CPU times and its
analytical output bytes, temporary 0 (``fused-ops`` in the statistics; the table is
``_FUSION_PARTNERS``).

**Nodes the trace does not report otherwise** (pruned by TF's executor; fed placeholders are
reported under their feed node and mapped back): nodes whose analytical cost is zero (graph
plumbing: ``NoOp``, ``Const``, ``Identity``-like, shape ops) get time 0; any other node gets the
analytical time of the host CPU and analytical memory. Both are counted in the statistics
(``unmeasured-ops``, ``unmeasured-zero-ops``, ``unmeasured-op-types``).

``profile{mode=regression batches=1,2,4 target=T validate=false}`` is Celeritas's Standard
Evaluation, rough-estimation step: the model is rebuilt at each small batch size
(:func:`graphir.passes.transform.batching.graphdef_at_batch`: the zoo's builder for zoo training
entries, a registered builder, or the module's placeholders re-batched), each is measured as in
``mode=tf``, and for every node a least-squares line ``y = a + k·batch`` is fitted to its
measured time and to its measured memory (output bytes, and temporary bytes, separately) and
evaluated at ``target`` (default 0: the module's own batch). Predictions are clipped at 0. Nodes
not reported at every fitted batch get the ``mode=tf`` treatment above, at the target.

With ``validate=true`` the target batch is measured as well, and the per-node relative deviation
``|estimate − measured| / measured`` (Celeritas §6.5, Table 5) is reported over the nodes whose
measured value is positive: ``mem-deviation-mean`` (memory: output + temporary bytes),
``time-deviation-mean``, their medians, ``mem-deviation-p90``, the share of nodes within 20 %
(Celeritas Fig. 5), ``time-deviation-mean-10us`` (nodes measured at ≥ 10 µs, whose relative
deviation is not dominated by timer resolution) and the counts compared. The annotations keep the
*predicted* values (the estimate is what the Standard Evaluation produces).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import ClassVar

import attrs
import numpy as np

from graphir.annotations import Cost, Mem
from graphir.backends.host import cpu_cluster
from graphir.errors import PassError
from graphir.ir import Module, Node
from graphir.ops import bare_op, is_variable, owns_value
from graphir.pass_infra import PassContext, PassResult, Stat
from graphir.passes.profile.base import ProfileMode, check_measurement, register_profile_mode
from graphir.passes.profile.roofline import analyze_graph
from graphir.runguard import check_runnable

_SLOW_NODE_S = 10e-6


@register_profile_mode
@dataclasses.dataclass(frozen=True)
class Tf(ProfileMode):
    """Median kernel times and measured memory of one traced TensorFlow step of a TF-dialect module.

    Options:
        iterations: measured steps whose per-node median is kept.
        warmup: steps discarded before measuring.
        threads: TensorFlow intra-op and inter-op threads. 1 (default) gives per-kernel times that
            stay stable when other processes load the host; 0 is the runtime's default (all cores).
    """

    name: ClassVar[str] = "tf"
    runs: ClassVar[bool] = True
    iterations: int = 10
    warmup: int = 2
    threads: int = 1

    def profile(self, module: Module, ctx: PassContext) -> PassResult:
        """Measured per-node times and memory (see the module docstring)."""
        check_measurement(self.iterations, self.warmup, self.threads)
        return run_tf(self, module, ctx)


@register_profile_mode
@dataclasses.dataclass(frozen=True)
class Regression(Tf):
    """Celeritas's Standard Evaluation: TF measurements at small batches, fitted per node, predicted at a target.

    Options:
        iterations: measured steps per batch size whose per-node median is kept.
        warmup: steps discarded before measuring.
        threads: TensorFlow intra-op and inter-op threads (0: the runtime's default).
        batches: the small batch sizes measured (at least two).
        target: the batch size predicted (0: the module's own batch).
        validate: also measure ``target`` and report per-node deviations.
    """

    name: ClassVar[str] = "regression"
    checks_memory: ClassVar[bool] = False  # measures smaller batches (and the target only when validating)
    batches: tuple[int, ...] = (1, 2, 4)
    target: int = 0
    validate: bool = False

    def profile(self, module: Module, ctx: PassContext) -> PassResult:
        """Fitted per-node predictions (see the module docstring)."""
        check_measurement(self.iterations, self.warmup, self.threads)
        return run_regression(self, module, ctx)


@attrs.frozen(eq=False)
class NodeMeasure:
    """Per-node measured arrays of one module, in ``graph.index()`` order.

    Attributes:
        seconds: kernel time (NaN where the trace did not report the node).
        output: output bytes (-1 where not reported).
        temporary: temporary bytes (-1 where not reported).
        run_time: median step wall time.
        fastest_run: fastest step wall time.
        iterations: measured steps.
        fused: nodes whose time is a share of a fused kernel reported under another node.
    """

    seconds: np.ndarray
    output: np.ndarray
    temporary: np.ndarray
    run_time: float
    fastest_run: float
    iterations: int
    fused: int = 0


_FUSION_PARTNERS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # op -> (consumer ops it is fused into, sibling ops it is fused with), as TF's oneDNN layout pass
    # fuses them on CPU (the fused kernel is reported under the partner's name).
    "Conv2D": (frozenset({"BiasAdd", "FusedBatchNormV3", "Relu", "Relu6", "AddV2", "Add"}), frozenset()),
    "DepthwiseConv2dNative": (frozenset({"BiasAdd", "Relu", "Relu6"}), frozenset()),
    "MatMul": (frozenset({"BiasAdd", "Relu", "AddV2", "Add"}), frozenset()),
    "BiasAdd": (frozenset({"Relu", "Relu6", "AddV2", "Add"}), frozenset()),
    "BiasAddGrad": (frozenset(), frozenset({"Conv2DBackpropFilter", "MatMul"})),
}


def _split_fused(nodes: list[Node], seconds: np.ndarray, estimate: np.ndarray) -> int:
    """Share a fused kernel's time between its reported node and the members the trace omits (in place).

    An unreported node whose op fuses with a reported consumer (or sibling, a consumer of the same
    input) of a partner op type in :data:`_FUSION_PARTNERS` takes a share of that node's measured
    time proportional to their analytical host times. Returns how many nodes were resolved so.
    """
    position = {id(node): i for i, node in enumerate(nodes)}
    resolved = 0
    for i in np.flatnonzero(np.isnan(seconds)).tolist():
        node = nodes[i]
        partners = _FUSION_PARTNERS.get(bare_op(node.op))
        if partners is None:
            continue
        consumers, siblings = partners
        candidates = [user for value in node.outputs for user, _ in value.uses if bare_op(user.op) in consumers]
        candidates += [
            user for value in node.inputs for user, _ in value.uses if user is not node and bare_op(user.op) in siblings
        ]
        for other in candidates:
            j = position.get(id(other))
            if j is None or np.isnan(seconds[j]):
                continue
            total = estimate[i] + estimate[j]
            share = estimate[i] / total if total > 0 else 0.5
            seconds[i], seconds[j] = seconds[j] * share, seconds[j] * (1.0 - share)
            resolved += 1
            break
    return resolved


def measure_module(module: Module, options: Tf, seed: int, names: list[str] | None = None) -> NodeMeasure:
    """Run ``module`` with TF's tracer and return the measurements of ``names`` (default: its nodes).

    Kernels that TF fused are shared between their members first (:func:`_split_fused`).
    """
    from graphir.backends.tf.measure import measure_graphdef, module_graphdef

    check_runnable(module, f"profile{{mode={options.name}}}")
    graph_def = module_graphdef(module, np.random.default_rng(seed))
    measured = measure_graphdef(
        graph_def, iterations=options.iterations, warmup=options.warmup, threads=options.threads, seed=seed
    )
    nodes = module.graph.index().nodes
    own = np.array([measured.times.get(node.name, np.nan) for node in nodes])
    work = analyze_graph(module.graph)
    unreported = np.isnan(own)
    fused = _split_fused(nodes, own, work.times(cpu_cluster(1).devices[0]))
    resolved = unreported & ~np.isnan(own)  # fused members: their outputs are shaped as analysed
    by_name = {node.name: (float(own[i]), -1, -1) for i, node in enumerate(nodes)}
    for i in np.flatnonzero(resolved).tolist():
        by_name[nodes[i].name] = (float(own[i]), int(work.activation[i]), 0)
    if names is None:
        names = [node.name for node in nodes]
    missing = (np.nan, -1, -1)
    seconds = np.array([by_name.get(n, missing)[0] for n in names])
    output = np.array([measured.output_bytes.get(n, by_name.get(n, missing)[1]) for n in names], dtype=np.int64)
    temporary = np.array([measured.temp_bytes.get(n, by_name.get(n, missing)[2]) for n in names], dtype=np.int64)
    return NodeMeasure(seconds, output, temporary, measured.run_time, measured.fastest_run, measured.iterations, fused)


def _owns_persistent(nodes: list[Node]) -> np.ndarray:
    return np.array([is_variable(n.op) or owns_value(n.op) for n in nodes], dtype=bool)


def _write(
    module: Module, seconds: np.ndarray, activation: np.ndarray, temporary: np.ndarray, persistent: np.ndarray
) -> None:
    kinds = sorted(module.cluster.kinds)
    nodes = module.graph.index().nodes
    for i, node in enumerate(nodes):
        t = float(f"{float(seconds[i]):.12g}")
        node.cost = Cost(tuple((kind, t) for kind in kinds))
        node.mem = Mem(int(persistent[i]), int(activation[i]), int(temporary[i]))


def _fill_unmeasured(
    module: Module, seconds: np.ndarray, activation: np.ndarray, temporary: np.ndarray, missing: np.ndarray
) -> dict[str, Stat]:
    """Apply the documented treatment to nodes without measurements (in place); their statistics."""
    nodes = module.graph.index().nodes
    work = analyze_graph(module.graph)
    host = work.times(cpu_cluster(1).devices[0])
    zero = (work.flops == 0) & (work.bytes == 0)
    seconds[missing] = np.where(zero[missing], 0.0, host[missing])
    activation[missing] = work.activation[missing]
    temporary[missing] = work.temporary[missing]
    owns = _owns_persistent(nodes)
    activation[owns] = work.activation[owns]
    return {
        "unmeasured-ops": int(missing.sum()),
        "unmeasured-zero-ops": int((missing & zero).sum()),
        "unmeasured-op-types": ",".join(sorted({nodes[i].op for i in np.flatnonzero(missing).tolist()})),
        "persistent-bytes": int(work.persistent.sum()),
        "fallback-ops": int(work.fallback.sum()),
    }


def run_tf(options: Tf, module: Module, ctx: PassContext) -> PassResult:
    """``profile{mode=tf}``: measured per-node times and memory (see the module docstring)."""
    measured = measure_module(module, options, ctx.seed)
    seconds = measured.seconds.copy()
    missing = np.isnan(seconds)
    activation = measured.output.copy()
    temporary = measured.temporary.copy()
    stats: dict[str, Stat] = {"nodes": len(seconds)}
    stats |= _fill_unmeasured(module, seconds, activation, temporary, missing)
    persistent = analyze_graph(module.graph).persistent
    _write(module, seconds, activation, temporary, persistent)
    stats["activation-bytes"] = int(activation.sum())
    stats["measured-run-s"] = measured.run_time
    stats["measured-fastest-run-s"] = measured.fastest_run
    stats["measured-node-sum-s"] = float(np.nansum(measured.seconds))
    stats["iterations"] = measured.iterations
    stats["fused-ops"] = measured.fused
    stats["compute-s"] = float(seconds.sum())
    return PassResult(True, stats)


# --------------------------------------------------------------------------- regression


def fit_lines(batches: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares ``value = intercept + slope · batch`` per row of ``values`` (shape nodes × batches)."""
    x = batches.astype(float)
    xm = x.mean()
    ym = values.mean(axis=1)
    slope = ((values - ym[:, None]) * (x - xm)).sum(axis=1) / ((x - xm) ** 2).sum()
    return ym - slope * xm, slope


def relative_deviation(estimate: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """``|estimate - measured| / measured`` where ``measured > 0`` (other entries dropped)."""
    keep = measured > 0
    return np.abs(estimate[keep] - measured[keep]) / measured[keep]


def deviation_stats(prefix: str, deviation: np.ndarray) -> dict[str, Stat]:
    """Mean, median, p90, share within 20 % and count of relative deviations, keyed ``PREFIX-...``."""
    if deviation.size == 0:
        return {f"{prefix}-compared-ops": 0}
    return {
        f"{prefix}-deviation-mean": float(deviation.mean()),
        f"{prefix}-deviation-median": float(np.median(deviation)),
        f"{prefix}-deviation-p90": float(np.quantile(deviation, 0.9)),
        f"{prefix}-within-20pct": float((deviation <= 0.2).mean()),
        f"{prefix}-compared-ops": int(deviation.size),
    }


def _module_at(module: Module, base: object, batch: int) -> tuple[Module, str]:
    from graphir.importers.tf import import_graphdef
    from graphir.passes.transform.batching import graphdef_at_batch

    graph_def, how = graphdef_at_batch(module, base, batch)
    try:
        return import_graphdef(
            graph_def, name=f"{module.name}_b{batch}", source=f"<{module.name} at batch {batch}>"
        ), how
    except Exception as exc:
        message = " ".join(str(exc).split()).split("error: ", 1)[-1]
        hint = " (the graph bakes its batch into constants: register a builder)" if how == "placeholders" else ""
        raise PassError(f"cannot rebuild '{module.name}' at batch {batch}: {message}{hint}") from None


def run_regression(
    options: Regression,
    module: Module,
    ctx: PassContext,
    measure: Callable[[Module, Regression, int, list[str]], NodeMeasure] | None = None,
) -> PassResult:
    """``profile{mode=regression}``: Celeritas's Standard Evaluation (see the module docstring).

    ``measure(module at a batch, options, seed, names)`` measures one batch size (default
    :func:`measure_module`, a local session); ``profile{mode=standard-eval}`` measures on a rig worker.
    """
    from graphir.backends.tf.measure import module_graphdef
    from graphir.passes.transform.batching import module_batch

    measure = measure or measure_module
    batches = sorted(set(options.batches))
    if len(batches) < 2 or batches[0] < 1:
        raise PassError(f"'batches' needs at least two distinct sizes >= 1, got {','.join(map(str, options.batches))}")
    if options.target < 0:
        raise PassError(f"'target' must be >= 0 (0: the module's batch), got {options.target}")
    own_batch = module_batch(module)
    target = options.target or own_batch
    nodes = module.graph.index().nodes
    names = [node.name for node in nodes]
    start = time.perf_counter()
    base = module_graphdef(module, np.random.default_rng(ctx.seed))
    rows_t, rows_o, rows_m = [], [], []
    how = ""
    for batch in batches:
        at_batch, how = _module_at(module, base, batch)
        ctx.log(f"profile: measuring '{module.name}' at batch {batch} ({len(at_batch.graph)} nodes, via {how})")
        measured = measure(at_batch, options, ctx.seed, names)
        rows_t.append(measured.seconds)
        rows_o.append(measured.output)
        rows_m.append(measured.temporary)
        del at_batch
    seconds_b = np.stack(rows_t, axis=1)
    output_b = np.stack(rows_o, axis=1).astype(float)
    temp_b = np.stack(rows_m, axis=1).astype(float)
    fitted = np.asarray(~np.isnan(seconds_b).any(axis=1) & (output_b >= 0).all(axis=1))
    x = np.array(batches, dtype=float)
    seconds = np.full(len(nodes), np.nan)
    activation = np.zeros(len(nodes), dtype=np.int64)
    temporary = np.zeros(len(nodes), dtype=np.int64)
    for values, out in ((seconds_b, seconds), (output_b, activation), (temp_b, temporary)):
        intercept, slope = fit_lines(x, np.nan_to_num(values[fitted]))
        prediction = np.maximum(intercept + slope * target, 0.0)
        out[fitted] = prediction if out.dtype.kind == "f" else np.rint(prediction).astype(np.int64)
    stats: dict[str, Stat] = {
        "nodes": len(nodes),
        "batches": ",".join(map(str, batches)),
        "target": target,
        "module-batch": own_batch,
        "batch-source": how,
        "fitted-ops": int(fitted.sum()),
    }
    if target != own_batch:
        ctx.log(f"profile: warning: predicting batch {target} for a module of batch {own_batch}")
    predicted = (seconds.copy(), activation.copy(), temporary.copy())  # before the unmeasured treatment
    stats |= _fill_unmeasured(module, seconds, activation, temporary, ~fitted)
    persistent = analyze_graph(module.graph).persistent
    _write(module, seconds, activation, temporary, persistent)
    stats["activation-bytes"] = int(activation.sum())
    stats["compute-s"] = float(seconds.sum())
    if options.validate:
        at_target = module if target == own_batch else _module_at(module, base, target)[0]
        measured = measure(at_target, options, ctx.seed, names)
        both = fitted & ~np.isnan(measured.seconds) & (measured.output >= 0)
        p_seconds, p_output, p_temp = (array[both].astype(float) for array in predicted)
        m_output = measured.output[both].astype(float)
        m_seconds = measured.seconds[both]
        stats |= deviation_stats(
            "mem", relative_deviation(p_output + p_temp, m_output + measured.temporary[both].astype(float))
        )
        stats |= deviation_stats("output-mem", relative_deviation(p_output, m_output))
        stats |= deviation_stats("time", relative_deviation(p_seconds, m_seconds))
        slow = m_seconds >= _SLOW_NODE_S
        dev = relative_deviation(p_seconds[slow], m_seconds[slow])
        stats["time-deviation-mean-10us"] = float(dev.mean()) if dev.size else 0.0
        stats["time-compared-ops-10us"] = int(dev.size)
        stats["measured-target-run-s"] = measured.run_time
    stats["standard-evaluation-s"] = time.perf_counter() - start
    return PassResult(True, stats)
