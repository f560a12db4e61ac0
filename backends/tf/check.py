"""Prove a lowering: run it on logical CPU devices, compare with onnxruntime, check TF's placement.

The command line ``check MODEL.onnx... --cluster=4xcpu --passes=PIPELINE`` (the driver layer's,
which loads the passes a pipeline names and resolves host clusters) prints one JSON object per
model (one line each):

* ``max_rel_error``: the largest ``max |tf - ort| / max |ort|`` over every node result (the
  norm-wise relative error of each tensor, robust to entries near zero where an element-wise ratio
  means nothing; ``worst_value`` names the tensor), from the GraphDef run in a session;
  ``output_rel_error``: the same over the graph outputs of the ``tf.function``;
* ``placement_mismatches``: ops whose device in TensorFlow's partition graphs (``RunMetadata``
  of a session run with soft placement, Grappler and the classic graph optimiser off, so ops are
  neither moved, folded nor renamed) differs from the device graphir assigned to their node, or
  which did not run at all; ``ops_checked`` counts the ops found;
* ``devices``: nodes per assigned device;
* ``weights``: constants held as variables outside the graph (above 1 MiB), ``graphdef_bytes`` the
  size of the session's GraphDef (weights referenced, not embedded).

**Training-step mode** (``--train GRAPH.pb --passes='microbatch{n=2},place{algo=m-topo}'``): a TF
training-step GraphDef (variables, optimizer updates) is run for one step twice from the same
initial variables (seeded: weights ``0.05 N(0,1)``, Adam's slots zero so that the slots after the
step are the gradients' moments, scalar variables such as Adam's beta powers 0.5) and the same
batch (seeded; integers in ``[0, --int-high)``): as imported, on one device, and after ``passes``
(a rewrite such as ``microbatch`` or ``data-parallel`` and a placement) lowered on the logical CPUs.
A data-parallel graph's per-replica feeds (``replica<r>/x``) get the replica's slice of the batch.
One JSON line: ``max_rel_error``, the largest ``max |new - original|`` of a variable after the step
over the largest magnitude among the variables of its role (weights, Adam's first moments, Adam's
second moments: a variable whose gradient is zero in exact arithmetic, such as attention's key
bias, holds rounding noise that a per-variable ratio would report as a large error);
``max_rel_error_per_variable`` (each variable against itself, with the worst named) and
``update_rel_error`` (the same over the variables' changes) for information; ``loss_rel_error``;
the variables compared and how many the step changed; the nodes and devices used; ``enforce_order``
and ``order_dependencies`` (the control dependencies added along the devices' orders: by default
when the placement recorded the ``enforced`` order, as ``place{algo=pipeline}`` does; forced on by
``--enforce-order``), so a pipelined step is proven under the schedule's order, without deadlock.

**Fused kernels** (both modes): when the placed module has ``kernel`` annotations (``fuse-kernels``),
the lowering marks each set as one XLA cluster (:mod:`graphir.backends.tf.xla`) and the line
also reports ``xla_clusters_marked`` (the sets graphir marked that the step needs;
``xla_kernels_pruned`` counts the others), ``xla_clusters_run`` (the
``_XlaRun`` ops in the partition graphs of the checked step: the clusters TensorFlow compiled
and ran), ``xla_clusters_matched`` (sets matched one to one to a run on their device by the ops
around them) and ``xla_cluster_problems`` (a device where the two counts differ, or a marked op that
ran outside its cluster); without annotations they are 0, 0, 0 and ``[]``. Marked ops are not counted
as "not run" among the ``placement_mismatches``: they ran inside their cluster.

TensorFlow's logical devices must be configured before its runtime starts, so this runs in a
fresh process (:func:`configure_logical_cpus` first, which also turns oneDNN's graph rewrites
off: they fuse ops under new names, e.g. a ``Pad`` into its ``Conv2D``). The tests call it through ``subprocess``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from graphir.backends.tf.session import configure_logical_cpus
from graphir.errors import GraphIRError
from graphir.extras import require
from graphir.runguard import check_run_memory, check_runnable

CHECK_RUN = "the TensorFlow lowering check"
"""What a refused run is called in its one-line message (:mod:`graphir.runguard`)."""

__all__ = [
    "FUNCTIONAL_CONTROL_FLOW",
    "check_onnx_model",
    "check_training_step",
    "configure_logical_cpus",
    "placement_mismatches",
    "reference_values",
    "relative_error",
    "session_run",
    "xla_clusters",
]


def relative_error(actual: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> float:
    """``max |actual - expected| / max |expected|`` over all outputs (shapes must agree)."""
    worst = 0.0
    for got, want in zip(actual, expected, strict=True):
        got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
        if got.shape != want.shape:
            return float("inf")
        scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-30)
        worst = max(worst, float(np.max(np.abs(got - want))) / scale if want.size else 0.0)
    return worst


_TRANSFER_OPS = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv"})
"""Ops the partitioner adds for cross-device edges; they are not lowered ops."""


def _same_device(actual: str, expected: str) -> bool:
    """Whether TF's full device name ``actual`` is the (possibly partial) device ``expected``."""
    from tensorflow.python.framework import device_spec

    want = device_spec.DeviceSpecV2.from_string(expected)
    got = device_spec.DeviceSpecV2.from_string(actual)
    for field in ("job", "replica", "task", "device_type", "device_index"):
        value = getattr(want, field)
        if value is not None and value != getattr(got, field):
            return False
    return True


def session_run(
    lowered: Any,
    inputs: Sequence[np.ndarray],
    devices: int,
    fetches: Sequence[str] | None = None,
    partitions: list[Any] | None = None,
) -> tuple[list[np.ndarray], dict[str, str]]:
    """Run the lowered GraphDef in a session; the fetched values and each op's device from ``RunMetadata``.

    ``fetches`` are TF tensor names (default: the graph outputs); the step's partition graphs are
    appended to ``partitions`` when given (:func:`xla_clusters` reads them).
    """
    import tensorflow as tf

    from graphir.backends.tf.session import session_config

    graph = tf.Graph()
    with graph.as_default():
        # Large weights stay variables (VarHandleOp), filled once below: the GraphDef stays small.
        tf.graph_util.import_graph_def(lowered.graph_def(embed_weights=False), name="")
    # No soft placement, Grappler off, no constant folding (it would fold a ConstantOfShape's Fill away).
    config = session_config(tf, devices)
    options = tf.compat.v1.RunOptions(output_partition_graphs=True)
    metadata = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        lowered.initialize_weights(session)
        feed = dict(zip(lowered.feeds, inputs, strict=True))
        outputs = session.run(list(fetches or lowered.fetches), feed, options=options, run_metadata=metadata)
    if partitions is not None:
        partitions.extend(metadata.partition_graphs)
    placed = {
        node.name: node.device
        for partition in metadata.partition_graphs
        for node in partition.node
        if node.op not in _TRANSFER_OPS  # named after their source op ("<src>/_k"), on either end's device
    }
    return [np.asarray(o) for o in outputs], placed


FUNCTIONAL_CONTROL_FLOW = frozenset({"While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase"})
"""TF ops the session replaces by their lowered parts (``LowerFunctionalOpsPass``) before it places them."""


def _graph_ops(lowered: Any) -> dict[str, Any] | None:
    """Op name -> ``NodeDef`` of the lowered GraphDef (``None`` when the lowering has none)."""
    graph_def: Any = getattr(lowered, "graph_def", None)
    if graph_def is None:
        return None
    nodes: Any = graph_def(embed_weights=False).node
    return {node.name: node for node in nodes}


def _live_ops(ops: dict[str, Any], roots: Sequence[str]) -> set[str]:
    """The ops some tensor of ``roots`` depends on (data and control inputs): the ones a session runs."""
    live: set[str] = set()
    pending = [root.split(":")[0] for root in roots]
    while pending:
        name = pending.pop()
        if name in live or name not in ops:
            continue
        live.add(name)
        pending.extend(ref.lstrip("^").split(":")[0] for ref in ops[name].input)
    return live


def _lowered_parts(op: str, placed: dict[str, str], graph_ops: dict[str, Any]) -> list[str]:
    """The partition-graph ops a functional control-flow op ``op`` became: ``<op>/...`` and ``Func/<op>/...``.

    The session lowers a ``While``/``If`` into ``Enter``/``Switch``/``Merge``... named under the op,
    and inlines its branch and body functions under ``<op>/<branch>/_k/`` (their argument and result
    identities under ``Func/<op>/``); every part runs on the op's device. Ops of the lowered
    GraphDef itself under the same name scope (a TF graph's ``while/loop_counter``) are not parts.
    """
    prefixes = (op + "/", "Func/" + op + "/")
    return [name for name in placed if name.startswith(prefixes) and name not in graph_ops]


def placement_mismatches(lowered: Any, placed: dict[str, str]) -> tuple[int, list[str]]:
    """(ops checked, ``"op: expected X, got Y"`` lines) for every op lowered from a placed node and every constant.

    Large weights count twice: their ``ReadVariableOp`` (in ``const_devices``) and their ``VarHandleOp``.
    A functional control-flow op (``While``, ``If``; :data:`FUNCTIONAL_CONTROL_FLOW`) is checked also through
    the parts the session lowered it into (:func:`_lowered_parts`: its loop machinery and the ops of its
    bodies, each on the op's device). An op that no node result or graph output depends on (dead code
    a TF helper left in a node's scope, e.g. ``tf.scan``'s unused TensorArray) is pruned by the
    session by design and is not reported as not run.
    """
    checked = 0
    problems: list[str] = []
    expected: list[tuple[str, str]] = []
    for node, ops in lowered.node_ops.items():
        device = lowered.node_devices.get(node, "")
        if device:
            expected.extend((op, device) for op in ops)
    expected.extend((op, device) for op, device in lowered.const_devices.items() if device)
    expected.extend((op, weight.device) for op, weight in getattr(lowered, "weights", {}).items() if weight.device)
    fed = {feed.rsplit(":", 1)[0] for feed in lowered.feeds}  # fed placeholders become session args
    graph_ops = _graph_ops(lowered) or {}
    roots = [*lowered.fetches, *getattr(lowered, "value_tensors", {}).values()]
    live = _live_ops(graph_ops, roots) if graph_ops else None
    users = _users(graph_ops)
    clustered = {op for kernel in getattr(lowered, "kernels", {}).values() for op in kernel.ops}
    for op, device in expected:
        if op in fed:
            continue
        node_def = graph_ops.get(op)
        parts = (
            _lowered_parts(op, placed, graph_ops)
            if node_def is not None and node_def.op in FUNCTIONAL_CONTROL_FLOW
            else []
        )
        checked += len(parts)
        problems.extend(
            f"{part}: expected {device}, got {placed[part]}" for part in parts if not _same_device(placed[part], device)
        )
        actual = placed.get(op)
        if actual is None:
            if op in clustered:
                continue  # compiled into its kernel's XLA cluster
            if parts:
                continue  # lowered into its parts (a fetched one also leaves an IdentityN of its name)
            if live is not None and op not in live:
                continue  # dead: the session prunes it
            if _dropped_by_loops(op, placed, graph_ops, users):
                continue  # read only by lowered loops, which dropped it (e.g. a loop's unused trip limit)
            problems.append(f"{op}: expected {device}, not run")
            continue
        checked += 1
        if not _same_device(actual, device):
            problems.append(f"{op}: expected {device}, got {actual}")
    return checked, problems


def xla_clusters(lowered: Any, partitions: Sequence[Any], fetched: Sequence[str] | None = None) -> dict[str, Any]:
    """The fused kernels graphir marked against the XLA clusters TensorFlow ran, from one step's partition graphs.

    * ``xla_clusters_marked``: the kernel sets (``LoweredGraph.kernels``) that something ``fetched``
      (default: the graph outputs) depends on;
    * ``xla_kernels_pruned``: the other sets (the session prunes them);
    * ``xla_clusters_run``: the ``_XlaRun`` ops of the step (one per compiled cluster);
    * ``xla_clusters_matched``: the sets matched one to one to a run on their device by the ops
      around them (:func:`graphir.backends.tf.xla.cluster_runs`);
    * ``xla_cluster_problems``: a device whose count of clusters run differs from its count of sets,
      an unasked-for cluster, or a marked op that ran outside its cluster
      (:func:`graphir.backends.tf.xla.cluster_report`).
    """
    from graphir.backends.tf.xla import cluster_report, cluster_runs, live_sets

    graph_def = lowered.graph_def(embed_weights=False)
    marked_sets = list(getattr(lowered, "kernels", {}).values())
    sets = live_sets(graph_def, marked_sets, fetched or lowered.fetches)
    marked, run, problems = cluster_report(sets, partitions, _same_device)
    matched = len(cluster_runs(graph_def, sets, partitions, _same_device)) if sets else 0
    return {
        "xla_clusters_marked": marked,
        "xla_kernels_pruned": len(marked_sets) - len(sets),
        "xla_clusters_run": run,
        "xla_clusters_matched": matched,
        "xla_cluster_problems": problems[:20],
    }


def _users(ops: dict[str, Any]) -> dict[str, list[str]]:
    """Op -> the ops that take its results or wait on it."""
    users: dict[str, list[str]] = {}
    for name, node_def in ops.items():
        for ref in node_def.input:
            users.setdefault(ref.lstrip("^").split(":")[0], []).append(name)
    return users


def _dropped_by_loops(op: str, placed: dict[str, str], ops: dict[str, Any], users: dict[str, list[str]]) -> bool:
    """Whether ``op`` (not run) feeds only functional control-flow ops the session lowered.

    Directly or through ops that were not run either: the lowering dropped an input its loop never reads.
    """
    pending, seen = [op], set()
    found_loop = False
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for user in users.get(name, ()):
            if ops[user].op in FUNCTIONAL_CONTROL_FLOW and _lowered_parts(user, placed, ops):
                found_loop = True
            elif user not in placed:
                pending.append(user)
            else:
                return False
    return found_loop


def reference_values(path: Path, names: Sequence[str], feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every value in ``names`` computed by onnxruntime (graph optimisations off, one thread)."""
    import onnx

    ort = require("onnxruntime", "ort", "the onnxruntime reference run")

    model = onnx.load_model(str(path))
    present = {o.name for o in model.graph.output}
    for name in names:
        if name not in present:
            model.graph.output.append(onnx.ValueInfoProto(name=name))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    wanted = [o.name for o in session.get_outputs() if o.name in set(names)]
    return dict(zip(wanted, session.run(wanted, feeds), strict=True))


def check_onnx_model(
    path: Path, cluster: str, passes: str, enforce_order: bool, devices: int, seed: int = 0
) -> dict[str, Any]:
    """Import, run ``passes``, lower, run, compare with onnxruntime, check TF's placement.

    The light models' weights are constant fills, so their final outputs are nearly uniform
    (a softmax over equal logits) and comparing only them would prove little: every node result
    (intermediate values included) is compared with onnxruntime's, through the GraphDef run in a
    session; the graph outputs are also compared through the ``tf.function``.
    """
    from graphir.backends.tf.lowering import lower
    from graphir.importers.onnx import import_onnx
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline

    module = import_onnx(path)
    module.cluster_spec = cluster
    check_runnable(module, CHECK_RUN)  # before the pipeline: a measuring profile mode runs the model too
    if passes:
        PassManager(parse_pipeline(passes)).run(module, PassContext(seed=seed))
    check_run_memory(module, CHECK_RUN)
    lowered = lower(module, enforce_order=enforce_order)
    rng = np.random.default_rng(seed)
    inputs = []
    for value in module.graph.inputs:
        shape = [d if isinstance(d, int) else 1 for d in (value.type.shape or ())]
        inputs.append(rng.standard_normal(shape).astype(np.float32))
    names = sorted(lowered.value_tensors)
    feeds = {v.name: x for v, x in zip(module.graph.inputs, inputs, strict=True)}
    expected = reference_values(path, [*names, *lowered.output_names], feeds)
    compared = [n for n in names if n in expected]
    actual = lowered(*inputs)
    partitions: list[Any] = []
    fetched, placed = session_run(lowered, inputs, devices, [lowered.value_tensors[n] for n in compared], partitions)
    errors = {n: relative_error([got], [expected[n]]) for n, got in zip(compared, fetched, strict=True)}
    worst = max(errors, key=errors.__getitem__) if errors else ""
    checked, problems = placement_mismatches(lowered, placed)
    counts: dict[str, int] = {}
    for node in module.graph.nodes:
        counts[node.device or ""] = counts.get(node.device or "", 0) + 1
    return {
        "model": path.name,
        "nodes": len(module.graph),
        "devices": dict(sorted(counts.items())),
        "output_rel_error": relative_error(actual, [expected[n] for n in lowered.output_names]),
        "values_compared": len(compared),
        "max_rel_error": errors.get(worst, 0.0),
        "worst_value": worst,
        "ops_checked": checked,
        "placement_mismatches": problems[:20],
        "enforce_order": enforce_order,
        "weights": len(lowered.weights),
        "graphdef_bytes": lowered.graph_def(embed_weights=False).ByteSize(),
        **xla_clusters(lowered, partitions, [lowered.value_tensors[n] for n in compared]),
    }


def initial_variables(module: Any, seed: int) -> dict[str, np.ndarray]:
    """Seeded variable values for a training step (see the module docstring), by VarHandleOp name."""
    from graphir.backends.tf.session import random_variables

    values = random_variables(module, seed)
    for node in module.graph.nodes:
        if node.op.startswith("tf.ResourceApply") and node.op.endswith("Adam"):
            for slot in node.inputs[1:3]:
                if slot.producer is not None and slot.producer.name in values:
                    values[slot.producer.name] = np.zeros_like(values[slot.producer.name])
    for name, array in values.items():
        if array.ndim == 0 and array.dtype.kind == "f":
            values[name] = np.asarray(0.5, dtype=array.dtype)
    return values


def variable_roles(module: Any) -> dict[str, str]:
    """``weights``, ``adam_m`` or ``adam_v`` for each variable an Adam update reads, by VarHandleOp name."""
    roles: dict[str, str] = {}
    for node in module.graph.nodes:
        if node.op.startswith("tf.ResourceApply") and node.op.endswith("Adam"):
            for value, role in zip(node.inputs[:3], ("weights", "adam_m", "adam_v"), strict=False):
                if value.producer is not None:
                    roles[value.producer.name] = role
    return roles


def _scaled_error(got: np.ndarray, want: np.ndarray, scale: float) -> float:
    """``max |got - want|`` over the largest magnitude of the variables of the same role."""
    if got.shape != want.shape:
        return float("inf")
    if not want.size:
        return 0.0
    return float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) / max(scale, 1e-30)


def _replica_feed(name: str, whole: dict[str, np.ndarray], replicas: int) -> np.ndarray:
    """The array fed to input ``name``: a replica's slice of the batch for ``replica<r>/x``."""
    from graphir.copies import copy_of

    if name in whole:
        return whole[name]
    replica, _, original = copy_of(name)
    if replica < 0 or original not in whole:
        raise GraphIRError(f"the rewritten graph takes an input '{name}' the original does not")
    array = whole[original]
    size = array.shape[0] // replicas
    return array[replica * size : (replica + 1) * size]


def check_training_step(
    path: Path,
    cluster: str,
    passes: str,
    devices: int,
    seed: int = 0,
    int_high: int = 2,
    enforce_order: bool | None = None,
) -> dict[str, Any]:
    """One training step as imported and after ``passes``, from the same variables and batch (module docstring).

    ``enforce_order`` applies to the rewritten graph's lowering (None: when its placement recorded
    the ``enforced`` order, as ``place{algo=pipeline}`` does; the original always runs without).
    """
    from graphir.backends.tf.lowering import lower, lowering_sequence
    from graphir.backends.tf.session import SessionRunner, random_inputs
    from graphir.copies import REPLICAS_METADATA, original_name
    from graphir.importers import load_module
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline

    original = load_module(path)
    original.cluster_spec = cluster
    check_runnable(original, CHECK_RUN)  # a training step runs: its ops must stay inside the process
    rewritten = load_module(path)
    rewritten.cluster_spec = cluster
    PassManager(parse_pipeline(passes)).run(rewritten, PassContext(seed=seed))
    variables = initial_variables(original, seed)
    lowered = lower(original, enforce_order=False)
    inputs = random_inputs(original, lowered.input_names, seed=seed, int_high=int_high)
    with SessionRunner(original, lowered, "", devices, variables=variables, timeout_s=600) as runner:
        (loss,) = runner.run(inputs)
        want = runner.read_variables()
    lowered_new = lower(rewritten, enforce_order=enforce_order)
    whole = dict(zip(lowered.input_names, inputs, strict=True))
    replicas = int(cast(int, rewritten.metadata.get(REPLICAS_METADATA, 1)) or 1)  # an int: replicate writes it
    feeds = [_replica_feed(name, whole, replicas) for name in lowered_new.input_names]
    # Mirrored variables (data-parallel{sync=allreduce}): every replica's copy starts from, and must
    # end at, the original variable's value.
    mirrors = {
        node.name: original_name(node.name) for node in rewritten.graph.nodes if original_name(node.name) in variables
    }
    start = {name: variables[origin] for name, origin in mirrors.items()}
    with SessionRunner(rewritten, lowered_new, "", devices, variables=start, timeout_s=600) as runner:
        (new_loss,), partitions = runner.run_partitioned(feeds)
        got = runner.read_variables()
    roles = variable_roles(original)
    scale: dict[str, float] = {}
    for name, array in want.items():
        role = roles.get(name, "other")
        scale[role] = max(scale.get(role, 0.0), float(np.max(np.abs(array))) if array.size else 0.0)
    missing = sorted(set(want) - {mirrors.get(n, n) for n in got})
    if missing:
        raise GraphIRError(f"the rewritten step has no variable '{missing[0]}' of the original")
    origin = {n: mirrors.get(n, n) for n in got if mirrors.get(n, n) in want}
    errors = {n: _scaled_error(got[n], want[o], scale[roles.get(o, "other")]) for n, o in origin.items()}
    strict = {n: relative_error([got[n]], [want[o]]) for n, o in origin.items()}
    changed = [n for n in want if not np.array_equal(want[n], variables.get(n, want[n]))]
    updates = {
        n: relative_error([got[n] - variables[o]], [want[o] - variables[o]])
        for n, o in origin.items()
        if o in changed and o in variables
    }
    worst = max(errors, key=errors.__getitem__) if errors else ""
    worst_strict = max(strict, key=strict.__getitem__) if strict else ""
    worst_update = max(updates, key=updates.__getitem__) if updates else ""
    return {
        "model": path.name,
        "passes": passes,
        "nodes": len(original.graph),
        "nodes_after": len(rewritten.graph),
        "devices": sorted({n.device for n in rewritten.graph.nodes if n.device}),
        "enforce_order": lowered_new.enforce_order,
        "order_dependencies": len(lowering_sequence(rewritten, True)[1]) if lowered_new.enforce_order else 0,
        "variables": len(want),
        "variables_after": len(got),
        "changed": len(changed),
        "max_rel_error": errors.get(worst, 0.0),
        "worst_variable": worst,
        "max_rel_error_per_variable": strict.get(worst_strict, 0.0),
        "worst_per_variable": worst_strict,
        "update_rel_error": updates.get(worst_update, 0.0),
        "worst_update": worst_update,
        "loss_rel_error": relative_error([new_loss], [loss]),
        **xla_clusters(lowered_new, partitions),
    }
