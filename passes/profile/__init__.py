"""``profile``: annotate every node with ``cost`` (compute time per device kind) and ``mem``.

**One profiler API.** Each mode (option ``mode``) is a frozen dataclass derived from
:class:`ProfileMode`, registered with :func:`register_profile_mode` in :data:`MODES`, with a ``name``,
typed option fields and a docstring (first line: the summary ``--list-passes`` shows; ``Options:``:
one entry per field). ``profile{mode=tf iterations=3}`` resolves ``mode`` first and then accepts
only that mode's options, at parse time (``profile{mode=analytical iterations=3}`` is an error with a
caret listing the mode's options). Its method ``profile(module, ctx)`` writes the annotations and
returns the pass result. The built-in modes:

* ``analytical`` (default): the roofline model of :mod:`graphir.passes.profile.roofline`, FLOPs and bytes from
  shapes, ``max(flops/peak, bytes/bandwidth) + launch overhead`` for each device kind of the
  module's cluster (Moirai §III-C's "operational intensity" estimate). Works on any graph;
  nothing is run.
* ``onnxruntime``: runs the model with onnxruntime's CPU provider and its profiler on this machine,
  graph optimisations off (``ORT_DISABLE_ALL``) so every IR node is exactly one ORT kernel, and
  annotates the median of each node's kernel time over ``iterations`` runs after ``warmup``
  discarded runs (Pesto §3.1 and Celeritas §6 average per-op times over steps after warm-up; the
  median resists outliers). The model is **re-exported from the IR** (ops, params, constants), so
  it works for modules imported from ONNX and for `.gir` text alike; constants whose data is not
  available (printed ``external``) and graph inputs get seeded random data (the ``--seed``), which
  does not change the kernels' times. Symbolic dimensions run as 1.
  **Semantics**: the times are measured on the host CPU; the same measured time is written for
  every device kind of the module's cluster (use an ``Nxcpu`` cluster to place on this machine).
  Nodes that ORT does not run as a kernel (e.g. ``Constant``, folded into an initializer at load)
  get the analytical host-CPU time and are counted as ``unmeasured-ops``.

* ``tf``: for TF-dialect modules, runs one step in a traced ``tf.compat.v1.Session``
  (``RunOptions(trace_level=FULL_TRACE)``) and annotates per-node median kernel times and measured
  output / temporary bytes; ``regression``: Celeritas's Standard Evaluation (§4.2.1), per-node
  linear fits of memory and time against batch size measured at ``batches`` and predicted at
  ``target``. Both are documented in :mod:`graphir.passes.profile.tf` (variables, inputs,
  unmeasured nodes, re-batching, deviation statistics).
* ``tf-run``: lowers the module and runs it on the cluster's local TensorFlow workers (the
  fidelity rig, ``--cluster=2xcpu-workers``), each node's cost the median kernel time measured on
  the device it ran on; see :mod:`graphir.passes.profile.tf_run`.
* ``cost-table``: per-(node, device) measured times read from a cost store that ``graphir-tune``
  wrote, unknown costs 0 (FastT's exploration rule); see :mod:`graphir.passes.profile.cost_table`.

In the analytical and onnxruntime modes ``mem`` comes from the analytical model (persistent weights attributed to their
first user, activation = output bytes, temporary where known; see :mod:`graphir.passes.profile.roofline`).

The pass and the mode API (:class:`Profile`, :class:`ProfileMode`, :data:`MODES`,
:func:`register_profile_mode`) live in :mod:`graphir.passes.profile.base` and are re-exported here;
``analytical`` and ``onnxruntime`` are defined here, the other modes in the modules this package
imports, each registering itself in :data:`MODES` (no mode module imports this package).

Provides: cost, mem. Requires nothing. Statistics: ``fallback-ops`` (nodes costed by the
bytes-only fallback) and ``fallback-op-types``, ``symbolic-ops``, ``total-flops``,
``total-bytes``, ``compute-s.<kind>`` (sum of node times per kind), ``persistent-bytes``,
``activation-bytes``; measured mode adds ``measured-run-s`` (median whole-model run),
``measured-fastest-run-s``, ``measured-node-sum-s`` and ``unmeasured-ops``.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import tempfile
import threading
from bisect import bisect_right
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from graphir.annotations import Cost, Mem
from graphir.attributes import DenseTensor, Opaque
from graphir.backends.host import cpu_cluster
from graphir.errors import PassError
from graphir.extras import require
from graphir.ir import Module, Node, Value
from graphir.pass_infra import PassContext, PassResult, Stat

# The other modes register themselves (their modules import TensorFlow only when a mode runs).
from graphir.passes.profile import cost_table, standard_eval, tf, tf_run
from graphir.passes.profile.base import (
    DEFAULT_MODE,
    MODES,
    Profile,
    ProfileMode,
    check_measurement,
    kind_times,
    register_profile_mode,
)
from graphir.passes.profile.roofline import GraphWork, analyze_graph
from graphir.runguard import Deadline, check_runnable
from graphir.sampling import constant_array, random_array
from graphir.types import DType

__all__ = [
    "DEFAULT_MODE",
    "MODES",
    "Analytical",
    "MeasuredProfile",
    "OnnxRuntime",
    "Profile",
    "ProfileMode",
    "check_measurement",
    "cost_table",
    "export_onnx",
    "kind_times",
    "measure_onnxruntime",
    "register_profile_mode",
    "standard_eval",
    "tf",
    "tf_run",
]

# --------------------------------------------------------------------------- analytical


def _fallback_stats(module: Module, work: GraphWork) -> dict[str, Stat]:
    nodes = module.graph.index().nodes
    types = Counter(nodes[i].op for i in np.flatnonzero(work.fallback).tolist())
    return {
        "nodes": len(nodes),
        "fallback-ops": int(work.fallback.sum()),
        "fallback-op-types": ",".join(sorted(types)),
        "symbolic-ops": int(work.symbolic.sum()),
        "total-flops": float(work.flops.sum()),
        "total-bytes": float(work.bytes.sum()),
        "persistent-bytes": int(work.persistent.sum()),
        "activation-bytes": int(work.activation.sum()),
    }


def _annotate(module: Module, times: dict[str, np.ndarray], work: GraphWork) -> None:
    """Write ``cost`` ({kind: seconds}, kinds sorted) and ``mem`` on every node, in index order."""
    nodes = module.graph.index().nodes
    kinds = list(times)  # already sorted: Cost keeps its items sorted by kind
    # 12 significant digits: far finer than any measurement or model, and `.gir` then prints 1.112us
    # rather than the 1.1119999999999999us a division may leave.
    rows = [[float(f"{t:.12g}") for t in row] for row in np.stack([times[k] for k in kinds], axis=1).tolist()]
    persistent = work.persistent.tolist()
    activation = work.activation.tolist()
    temporary = work.temporary.tolist()
    for i, node in enumerate(nodes):
        node.cost = Cost(tuple(zip(kinds, rows[i], strict=True)))
        node.mem = Mem(persistent[i], activation[i], temporary[i])


@register_profile_mode
@dataclasses.dataclass(frozen=True)
class Analytical(ProfileMode):
    """The roofline model from shapes on each device kind of the cluster; nothing is run."""

    name: ClassVar[str] = "analytical"

    def profile(self, module: Module, ctx: PassContext) -> PassResult:
        """Roofline times per device kind and analytical memory."""
        return _run_analytical(module, ctx)


def _run_analytical(module: Module, ctx: PassContext) -> PassResult:
    work = analyze_graph(module.graph)
    times = kind_times(module.cluster, work)
    _annotate(module, times, work)
    stats = _fallback_stats(module, work)
    for kind, values in times.items():
        stats[f"compute-s.{kind}"] = float(values.sum())
    ctx.log(f"profile: {stats['nodes']} nodes, {stats['fallback-ops']} by the bytes-only fallback")
    return PassResult(True, stats)


# --------------------------------------------------------------------------- onnxruntime


@dataclasses.dataclass
class MeasuredProfile:
    """Result of running a module under onnxruntime's profiler.

    Attributes:
        node_times: median kernel seconds per node (nodes ORT did not run as a kernel are absent).
        run_time: median seconds of a whole ``run`` (ORT's ``model_run`` event).
        fastest_run: seconds of the fastest measured run, the one least disturbed by other processes
            sharing the host (per-node medians filter such disturbances node by node, so their sum
            compares with this one when the machine is busy).
        iterations: measured runs.
    """

    node_times: dict[Node, float]
    run_time: float
    fastest_run: float
    iterations: int


_SKIPPED_PARAMS = frozenset({"_absent_inputs", "_absent_outputs", "_captured_inputs"})


def _onnx_names(names: list[str], absent: Any) -> list[str]:
    """Re-insert ``""`` at the ONNX positions the importer recorded in ``_absent_inputs``/``_absent_outputs``."""
    if not isinstance(absent, tuple) or not absent:
        return names
    out: list[str] = []
    pending = iter(names)
    total = len(names) + len(absent)
    for position in range(total):
        out.append("" if position in absent else next(pending))
    return out


def _attribute(key: str, value: Any, where: str) -> Any:
    """One IR param as an ``onnx.AttributeProto`` (the inverse of the ONNX importer's mapping)."""
    import onnx
    from onnx import AttributeProto, helper, numpy_helper

    def tensor(item: DenseTensor) -> Any:
        return numpy_helper.from_array(np.asarray(item.numpy()))

    def opaque(item: Opaque) -> Any:
        parsers = {
            "onnx.GraphProto": onnx.GraphProto,
            "onnx.SparseTensorProto": onnx.SparseTensorProto,
            "onnx.TypeProto": onnx.TypeProto,
        }
        if item.kind == "onnx.bytes":
            return item.data
        if item.kind in parsers:
            return parsers[item.kind].FromString(item.data)
        raise PassError(f"{where}: param '{key}' holds {item.kind} data that cannot be exported to ONNX")

    if isinstance(value, Opaque) and value.kind == "onnx.AttributeProto":
        attr = AttributeProto.FromString(value.data)
        attr.name = key
        return attr
    if isinstance(value, bool):
        return helper.make_attribute(key, int(value))
    if isinstance(value, (int, float, str)):
        return helper.make_attribute(key, value)
    if isinstance(value, DenseTensor):
        return helper.make_attribute(key, tensor(value))
    if isinstance(value, Opaque):
        return helper.make_attribute(key, opaque(value))
    if isinstance(value, tuple):
        if not value:
            return helper.make_attribute(key, [], attr_type=AttributeProto.INTS)
        if all(isinstance(v, DenseTensor) for v in value):
            return helper.make_attribute(key, [tensor(v) for v in value])
        if all(isinstance(v, Opaque) for v in value):
            return helper.make_attribute(key, [opaque(v) for v in value])
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            if all(isinstance(v, int) for v in value):
                return helper.make_attribute(key, list(value))
            return helper.make_attribute(key, [float(v) for v in value], attr_type=AttributeProto.FLOATS)
        if all(isinstance(v, str) for v in value):
            return helper.make_attribute(key, list(value))
    raise PassError(f"{where}: param '{key}' = {value!r} has no ONNX attribute form")


_ONNX_DTYPE_NAMES: dict[DType, str] = {
    DType.F32: "FLOAT", DType.U8: "UINT8", DType.I8: "INT8", DType.U16: "UINT16", DType.I16: "INT16",
    DType.I32: "INT32", DType.I64: "INT64", DType.STRING: "STRING", DType.BOOL: "BOOL", DType.F16: "FLOAT16",
    DType.F64: "DOUBLE", DType.U32: "UINT32", DType.U64: "UINT64", DType.C64: "COMPLEX64",
    DType.C128: "COMPLEX128", DType.BF16: "BFLOAT16", DType.F8E4M3: "FLOAT8E4M3FN", DType.F8E5M2: "FLOAT8E5M2",
    DType.U4: "UINT4", DType.I4: "INT4",
}  # fmt: skip


def _onnx_dtype(dtype: DType) -> int:
    from onnx import TensorProto

    return int(getattr(TensorProto, _ONNX_DTYPE_NAMES.get(dtype, "UNDEFINED")))


def _value_info(value: Value) -> Any:
    from onnx import helper

    shape = value.type.shape
    dims = None if shape is None else [d if d is not None else None for d in shape]
    return helper.make_tensor_value_info(value.name, _onnx_dtype(value.type.dtype), dims)


def _opsets(module: Module) -> list[Any]:
    from onnx import helper

    text = module.metadata.get("opset")
    imports: dict[str, int] = {}
    if isinstance(text, str) and text:
        for item in text.split(","):
            domain, _, version = item.rpartition(":")
            imports["" if domain in ("ai.onnx", "") else domain] = int(version)
    imports.setdefault("", 17)
    return [helper.make_opsetid(domain, version) for domain, version in imports.items()]


def export_onnx(module: Module, rng: np.random.Generator) -> tuple[Any, dict[str, np.ndarray]]:
    """Rebuild an ONNX model from an ONNX-dialect module, and seeded feeds for its inputs.

    Node names are the IR node names (unique), so onnxruntime's profile events map back 1:1.

    Raises:
        PassError: a node is not an ONNX op, or a param has no ONNX form (one line, naming the node).
    """
    from onnx import FunctionProto, helper, numpy_helper

    graph = module.graph
    nodes = []
    for node in graph.index().nodes:
        if not node.op.startswith("onnx."):
            raise PassError(
                f"profile{{mode=onnxruntime}} runs ONNX ops only, but node '{node.name}' is '{node.op}' "
                "(use mode=analytical)"
            )
        domain, _, op_type = node.op[len("onnx.") :].rpartition(".")
        captured = node.params.get("_captured_inputs", 0)
        inputs = [v.name for v in node.inputs]
        if isinstance(captured, int) and captured:
            inputs = inputs[:-captured]
        attributes = [
            _attribute(key, value, f"node '{node.name}'")
            for key, value in node.params.items()
            if key not in _SKIPPED_PARAMS
        ]
        proto = helper.make_node(
            op_type,
            _onnx_names(inputs, node.params.get("_absent_inputs")),
            _onnx_names([v.name for v in node.outputs], node.params.get("_absent_outputs")),
            name=node.name,
            domain=domain,
        )
        proto.attribute.extend(attributes)
        nodes.append(proto)
    initializers = []
    value: Value | None = None  # the value whose data is being made
    try:
        for value in graph.constants:
            array = constant_array(value, rng)
            initializers.append(numpy_helper.from_array(np.asarray(array), value.name))
        feeds = {}
        for value in graph.inputs:
            feeds[value.name] = random_array(value.type, rng)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # a type numpy cannot hold, a hostile shape
        what = f"value '%{value.name}' ({value.type})" if value is not None else "a value"
        raise PassError(f"{what}: no data can be made for it to run") from exc
    onnx_graph = helper.make_graph(
        nodes,
        graph.name,
        [_value_info(v) for v in graph.inputs],
        [_value_info(v) for v in graph.outputs],
        initializer=initializers,
    )
    opsets = _opsets(module)
    model = helper.make_model(onnx_graph, opset_imports=opsets)
    model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    functions = module.metadata.get("functions")
    if isinstance(functions, tuple):
        model.functions.extend(
            FunctionProto.FromString(f.data)
            for f in functions
            if isinstance(f, Opaque) and f.kind == "onnx.FunctionProto"
        )
    return model, feeds


def measure_onnxruntime(
    module: Module, *, iterations: int = 10, warmup: int = 2, threads: int = 1, seed: int = 0
) -> MeasuredProfile:
    """Run ``module`` under onnxruntime's profiler; per-node median kernel times and the median run time.

    Raises:
        MissingExtraError: onnxruntime (the ``ort`` extra) is not installed.
        PassError: onnxruntime cannot load the exported model, or fails to run.
    """
    ort = require("onnxruntime", "ort", "profile{mode=onnxruntime}")
    what = "profile{mode=onnxruntime}"
    check_runnable(module, what)
    model, feeds = export_onnx(module, np.random.default_rng(seed))
    deadline = Deadline(None, what)
    with tempfile.TemporaryDirectory(prefix="graphir-ort-") as tmp:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "profile")
        options.log_severity_level = 3
        if threads:
            options.intra_op_num_threads = threads
        run_options = ort.RunOptions()
        # The time limit: onnxruntime polls `terminate` between kernels and fails the run.
        timer = threading.Timer(deadline.remaining(), setattr, (run_options, "terminate", True))
        timer.daemon = True
        timer.start()
        try:
            session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            for _ in range(warmup + iterations):
                deadline.check()
                session.run(None, feeds, run_options)
        except Exception as exc:  # onnxruntime raises its own exception types
            if run_options.terminate:
                raise deadline.error("onnxruntime's run was terminated") from None
            message = " ".join(str(exc).split())
            raise PassError(f"onnxruntime cannot run module '{module.name}': {message}") from None
        finally:
            timer.cancel()
        events = json.loads(Path(session.end_profiling()).read_text())
    return _parse_profile(module, events, warmup, iterations)


def _parse_profile(module: Module, events: list[dict[str, Any]], warmup: int, iterations: int) -> MeasuredProfile:
    """Group ``<node>_kernel_time`` events by ``model_run`` window; median per node over measured runs."""
    runs = sorted((e["ts"], e["ts"] + e["dur"], e["dur"]) for e in events if e.get("name") == "model_run")
    measured = runs[warmup:]
    if not measured:
        raise PassError("onnxruntime's profile has no measured model_run events")
    starts = [start for start, _, _ in runs]
    by_node: dict[str, dict[int, float]] = {}
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        run = bisect_right(starts, event["ts"]) - 1
        if run < warmup:
            continue
        per_run = by_node.setdefault(name[: -len("_kernel_time")], {})
        per_run[run] = per_run.get(run, 0.0) + event["dur"] * 1e-6
    graph = module.graph
    node_times: dict[Node, float] = {}
    for name, per_run in by_node.items():
        node = graph.get_node(name)
        if node is not None:
            samples = [per_run.get(run, 0.0) for run in range(warmup, len(runs))]
            node_times[node] = float(statistics.median(samples))
    durations = [duration * 1e-6 for _, _, duration in measured]
    return MeasuredProfile(node_times, float(statistics.median(durations)), min(durations), len(measured))


@register_profile_mode
@dataclasses.dataclass(frozen=True)
class OnnxRuntime(ProfileMode):
    """Median kernel times measured with onnxruntime's CPU provider and profiler on this machine.

    Options:
        iterations: measured runs whose per-node median is kept.
        warmup: runs discarded before measuring.
        threads: onnxruntime intra-op threads. 1 (default) gives per-kernel times that stay stable
            when other processes load the host and models one of several logical CPU devices
            sharing it; 0 is the runtime's default (all cores).
    """

    name: ClassVar[str] = "onnxruntime"
    runs: ClassVar[bool] = True
    iterations: int = 10
    warmup: int = 2
    threads: int = 1

    def profile(self, module: Module, ctx: PassContext) -> PassResult:
        """Measured times for every kind of the cluster, analytical memory."""
        check_measurement(self.iterations, self.warmup, self.threads)
        return _run_onnxruntime(self, module, ctx)


def _run_onnxruntime(options: OnnxRuntime, module: Module, ctx: PassContext) -> PassResult:
    measured = measure_onnxruntime(
        module, iterations=options.iterations, warmup=options.warmup, threads=options.threads, seed=ctx.seed
    )
    work = analyze_graph(module.graph)
    nodes = module.graph.index().nodes
    # Nodes onnxruntime did not run as kernels: the analytical time on the host CPU.
    host = cpu_cluster(1).devices[0]
    estimate = work.times(host)
    seconds = np.array([measured.node_times.get(node, np.nan) for node in nodes])
    unmeasured = np.isnan(seconds)
    seconds = np.where(unmeasured, estimate, seconds)
    times = {kind: seconds for kind in sorted(module.cluster.kinds)}
    _annotate(module, times, work)
    stats = _fallback_stats(module, work)
    stats["unmeasured-ops"] = int(unmeasured.sum())
    stats["unmeasured-op-types"] = ",".join(sorted({nodes[i].op for i in np.flatnonzero(unmeasured).tolist()}))
    stats["measured-run-s"] = measured.run_time
    stats["measured-fastest-run-s"] = measured.fastest_run
    stats["measured-node-sum-s"] = float(seconds[~unmeasured].sum())
    stats["iterations"] = measured.iterations
    return PassResult(True, stats)
