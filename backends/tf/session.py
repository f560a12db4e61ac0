"""The TensorFlow session a lowered module runs in: devices, seeded inputs and variables, timed steps.

:class:`SessionRunner` imports the lowered GraphDef (:meth:`LoweredGraph.graph_def`) into a
``tf.Graph`` and runs it in a ``tf.compat.v1.Session``: locally on logical CPU devices, or against a
``tf.distribute.Server`` (``target="grpc://..."``, see :mod:`graphir.backends.tf.distributed`), the
same code either way. Grappler and the classic graph optimiser are off and soft placement is off
(:func:`session_config`): every op runs on the device graphir assigned, under its own name, so the
measured step is the placement graphir evaluated (and ``RunMetadata`` can prove it).

Variables (training graphs): the importer keeps no values, so the caller passes
``variables={shared_name or VarHandleOp node name: array}``; the runner assigns them once before
the first step through a companion graph (:func:`graphir.backends.tf.tf_graphdef.variables_graphdef`,
values fed, so their size is not bound by the 2 GB GraphDef limit)
and :meth:`SessionRunner.read_variables` reads every variable back. Without values, every variable
gets seeded random values (:func:`random_variables`).

**Held inputs** (``held_inputs``): a fed tensor reaches a remote session through its master's task
(task 0 of the rig): TensorFlow's client graph puts the feed's ``_Recv`` on the master's device, and
a placeholder placed on another task receives the value from there by a ``RecvTensor``, which the
master task's worker serves on its compute pool once that pool is idle (the rig's workers run one
thread each: :data:`graphir.backends.tf.rig.WORKER_SERVICE`'s ``serve_when_idle``). So an input of
task 1 arrives only when task 0 has run out of ready work: in the data-parallel pair of the fidelity
benchmark, replica 1's batch reached worker 1 after replica 0's whole forward and backward pass on
worker 0 (1.38 s of a 2.9 s step, ``benchmarks/results/fidelity-allreduce-notes.md``), so the two
replicas ran one after the other. The simulator, like a real data-parallel input pipeline (one per
worker), has every input on its device when the step starts. A held input is a resource variable on
its placeholder's device, assigned once before the first step (as the weights are) and read by
every step in place of the placeholder (``input_map``, data and control edges): the step feeds
nothing across tasks.
:func:`graphir.backends.tf.run.remote_feeds` names the feeds to hold for a master task.

**Logical devices**: ``tf.config.set_logical_device_configuration`` only works before TensorFlow
initialises its devices (the first op, session or device listing). :func:`configure_cpus` is
therefore the first TensorFlow call of a run; when TensorFlow was initialised earlier in the
process with too few CPU devices, it is a one-line :class:`BackendError` (run in a fresh process).

This module is the bottom of the TensorFlow runners: the local run (:mod:`graphir.backends.tf.run`),
the rig (:mod:`graphir.backends.tf.rig`), the multi-host servers (:mod:`.distributed`), the
strategy runs (:mod:`.strategy_run`) and the checks (:mod:`.check`) build on it, and it imports
none of them. Importing it does not load TensorFlow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from graphir.attributes import numpy_dtype
from graphir.errors import BackendError, GraphIRError, describe_exception
from graphir.ir import Module, Value
from graphir.runguard import Deadline, check_runnable
from graphir.types import is_static_shape

__all__ = [
    "INIT_BATCH_BYTES",
    "XLA_FLAGS",
    "SessionRunner",
    "configure_cpus",
    "configure_logical_cpus",
    "random_inputs",
    "random_variables",
    "session_config",
    "tf_run_error",
    "time_steps",
    "timed_calls",
    "set_xla_flags",
    "with_xla_flags",
]

XLA_FLAGS = "--tf_xla_enable_lazy_compilation=false --tf_xla_disable_constant_folding=true"
"""``TF_XLA_FLAGS`` of every graphir run, for fused kernels (``kernel`` annotations) marked as XLA clusters.

Lazy compilation off: a cluster is exactly an ``_XlaCompile``/``_XlaRun`` pair and a cluster XLA
cannot compile is an error, not a silent fallback to the TF ops. XLA's constant folding of the
cluster's TF graph off: inside a ``tf.distribute.Server`` it fails with "Multiple CPU devices" on
clusters holding float constants (XLA's own HLO folding stays on). TensorFlow reads the variable
once, when the process creates its first session, so it is set before that: by
:func:`configure_logical_cpus` (every local run and check starts there), by :class:`SessionRunner`
(before its session) and in the environment of the rig's workers. It changes nothing for graphs
without marks: auto-jit stays off, so nothing is clustered (``tests/unit/test_tf_xla.py`` checks
that an unmarked step runs the same ops with the same results under the flags)."""


def with_xla_flags(current: str | None) -> str:
    """``TF_XLA_FLAGS`` with :data:`XLA_FLAGS` added to ``current`` (flags already set there are kept)."""
    flags = (current or "").split()
    names = {flag.split("=", 1)[0] for flag in flags}
    flags += [flag for flag in XLA_FLAGS.split() if flag.split("=", 1)[0] not in names]
    return " ".join(flags)


def set_xla_flags() -> None:
    """Add :data:`XLA_FLAGS` to this process's ``TF_XLA_FLAGS`` (effective before its first TF session)."""
    os.environ["TF_XLA_FLAGS"] = with_xla_flags(os.environ.get("TF_XLA_FLAGS"))


def configure_logical_cpus(count: int) -> Any:
    """Split the host CPU into ``count`` logical devices (before TensorFlow initialises them).

    Also sets ``TF_XLA_FLAGS`` (:data:`XLA_FLAGS`), which TensorFlow reads at its first session.
    """
    from graphir.importers.tf import load_tensorflow

    # oneDNN's graph rewrite fuses ops (Pad into Conv2D) under new names, hiding their placement.
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    set_xla_flags()
    tf = load_tensorflow("running on TensorFlow")
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    return tf


def configure_cpus(count: int) -> Any:
    """Give TensorFlow ``count`` logical CPU devices; must precede any other TensorFlow use.

    Returns:
        The ``tensorflow`` module.

    Raises:
        BackendError: TensorFlow was already initialised with fewer CPU devices.
    """
    from graphir.importers.tf import load_tensorflow

    try:
        return configure_logical_cpus(max(count, 1))
    except RuntimeError:  # "Virtual devices cannot be modified after being initialized"
        tf = load_tensorflow("running on TensorFlow")
        have = len(tf.config.list_logical_devices("CPU"))
        if have < count:
            raise BackendError(
                f"TensorFlow was initialised with {have} CPU device(s) before {count} logical devices could be "
                "configured; run in a fresh process"
            ) from None
        return tf


TASK = re.compile(r"/job:([^/]+)/(?:replica:\d+/)?task:(\d+)")
"""``/job:J/task:K`` of a TF device string (groups: job, task)."""


def feed_devices(lowered: Any) -> dict[str, str]:
    """Each feed tensor of a :class:`~graphir.backends.tf.lowering.LoweredGraph` -> its placeholder's TF device.

    ``""`` for an unplaced placeholder (TensorFlow puts it on the master's task).
    """
    op_device = {op: lowered.node_devices.get(node, "") for node, ops in lowered.node_ops.items() for op in ops}
    return {feed: op_device.get(feed.rsplit(":", 1)[0], "") for feed in lowered.feeds}


def remote_feeds(lowered: Any, master_task: str) -> tuple[str, ...]:
    """The feeds whose placeholder is placed on a task other than ``master_task`` (``/job:J/task:K``).

    What a session on that master should hold on their own task (``SessionRunner(held_inputs=...)``,
    module docstring): fed, they would wait for the master task's compute pool to go idle.
    """
    master = TASK.search(master_task)
    if master is None:
        raise BackendError(f"'{master_task}' names no task (expected /job:NAME/task:K)")
    out = []
    for feed, device in feed_devices(lowered).items():
        task = TASK.search(device)
        if task is not None and (task.group(1), task.group(2)) != (master.group(1), master.group(2)):
            out.append(feed)
    return tuple(out)


def _values_by_name(module: Module) -> dict[str, Value]:
    values = {v.name: v for v in module.graph.inputs}
    for node in module.graph.nodes:
        values.update((v.name, v) for v in node.outputs)
    return values


def random_inputs(module: Module, names: Sequence[str], seed: int = 0, int_high: int = 2) -> list[np.ndarray]:
    """Seeded inputs for the IR values ``names``: standard normal floats, integers in ``[0, int_high)``.

    Unknown dims become 1. Integers stay small so that token ids and class labels are valid for
    any vocabulary or class count of at least ``int_high``; booleans are random.
    """
    from graphir.budget import human_bytes
    from graphir.runguard import RunMemoryError, available_memory

    rng = np.random.default_rng(seed)
    values = _values_by_name(module)
    arrays = []
    free = available_memory()
    for name in names:
        vtype = values[name].type
        shape = [d if isinstance(d, int) and d >= 0 else 1 for d in (vtype.shape or ())]
        try:
            dtype = np.dtype(numpy_dtype(vtype.dtype))
        except (KeyError, TypeError):
            raise BackendError(f"input '%{name}' has type {vtype}, for which no random data can be made") from None
        need = math.prod(shape) * max(dtype.itemsize, 8)  # floats are drawn in float64 first
        if math.prod(d for d in shape if d) * max(dtype.itemsize, 8) >= 1 << 63:  # numpy's own limit, even when empty
            raise BackendError(f"input '%{name}' has type {vtype}, too large for any array (unknown dims fed as 1)")
        if free and need > free:
            raise RunMemoryError(
                f"input '%{name}' ({vtype}, unknown dims fed as 1) needs {human_bytes(need)} of seeded data, more "
                f"than this machine can give: {human_bytes(free)} available"
            )
        if dtype.kind == "f":
            arrays.append(rng.standard_normal(shape).astype(dtype))
        elif dtype.kind in "iu":
            arrays.append(rng.integers(0, int_high, size=shape).astype(dtype))
        elif dtype.kind == "b":
            arrays.append(rng.integers(0, 2, size=shape).astype(bool))
        else:
            raise BackendError(f"input '%{name}' has type {vtype}, for which no random data can be made")
    return arrays


def random_variables(
    module: Module, seed: int = 0, scale: float = 0.05, skip: set[str] | None = None
) -> dict[str, np.ndarray]:
    """Seeded values for every variable (keyed by VarHandleOp node name): ``scale``·N(0,1) floats, integer zeros.

    Variables named in ``skip`` get none (the caller has their values); the others draw from one
    generator in topological order.
    """
    from graphir.backends.tf.tf_graphdef import variable_nodes
    from graphir.importers.tf import variable_type

    rng = np.random.default_rng(seed + 1)
    result: dict[str, np.ndarray] = {}
    for node in variable_nodes(module):
        vtype = variable_type(node)
        if skip and node.name in skip:
            continue
        vshape = vtype.shape if vtype is not None else None
        if vtype is None or not is_static_shape(vshape):
            raise BackendError("variable has no static shape: pass its value explicitly", _loc(node.name))
        dtype = np.dtype(numpy_dtype(vtype.dtype))
        shape = tuple(int(d) for d in vshape)
        if dtype.kind == "f":
            result[node.name] = (scale * rng.standard_normal(shape)).astype(dtype)
        else:
            result[node.name] = np.zeros(shape, dtype)
    return result


def _loc(node: str) -> Any:
    from graphir.errors import Location

    return Location(node=node)


def session_config(tf: Any, cpu_devices: int | None = None, timeout_s: float | None = None) -> Any:
    """No soft placement, Grappler off, graph optimiser at L0 (no folding, CSE or inlining).

    Every blocking call of the session, and every call a remote session makes to its master
    (creating the session, registering and running its graph on the workers), is bounded by
    ``timeout_s`` (``operation_timeout_in_ms``; ``None``: the run time limit,
    :func:`graphir.runguard.run_timeout`): a worker that hangs or dies makes the call fail instead
    of blocking the client forever.
    """
    from graphir.runguard import run_timeout

    limit = run_timeout() if timeout_s is None else timeout_s
    config = tf.compat.v1.ConfigProto(allow_soft_placement=False, operation_timeout_in_ms=max(int(limit * 1000), 1))
    if cpu_devices is not None:
        config.device_count["CPU"] = cpu_devices
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    optimizer = config.graph_options.optimizer_options
    optimizer.opt_level = tf.compat.v1.OptimizerOptions.L0
    optimizer.do_constant_folding = False
    optimizer.do_common_subexpression_elimination = False
    optimizer.do_function_inlining = False
    return config


def tf_run_error(exc: BaseException, what: str, deadline: Deadline | None = None) -> GraphIRError:
    """The one-line error of a TensorFlow call that failed while running a model.

    ``DeadlineExceeded`` is the run's time limit (:class:`~graphir.runguard.RunTimeoutError` when a
    ``deadline`` is known); ``ResourceExhausted`` is memory TensorFlow could not allocate; anything
    else names TensorFlow's error type and the first line of its message.
    """
    name = type(exc).__name__
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    if name == "DeadlineExceededError" and deadline is not None:
        return deadline.error("TensorFlow's call exceeded its deadline")
    detail = describe_exception(exc) if not first else f"{name}: {first}"
    if name == "ResourceExhaustedError":
        return BackendError(f"{what}: TensorFlow ran out of memory ({detail})")
    return BackendError(f"{what}: TensorFlow failed running the model ({detail})")


class SessionRunner:
    """A session holding a lowered graph, its variables assigned, ready to run steps.

    Args:
        module: the lowered module (to find its variables and their devices).
        lowered: the :class:`~graphir.backends.tf.lowering.LoweredGraph`.
        target: session target: ``""`` (in process) or ``grpc://host:port`` (a TF server).
        cpu_devices: CPU devices of an in-process session (``None``: TensorFlow's default).
        variables: ``{shared_name or VarHandleOp node name: array}``; variables left out keep
            whatever the runtime holds (in a fresh runtime: uninitialised, an error when read).
        timeout_s: time limit of everything this runner runs, from its creation (each call's
            ``RunOptions.timeout_in_ms`` is what is left of it; the session's operations are bounded
            by it too, :func:`session_config`); ``None``: the run time limit,
            :func:`graphir.runguard.run_timeout`.
        what: the run, named in errors.
        held_inputs: ``{feed tensor name: array}``: inputs held on their placeholder's device for
            every step instead of fed (module docstring; e.g. :func:`graphir.backends.tf.run.remote_feeds`); :meth:`run`
            then takes the other feeds only (:attr:`feeds`).

    The module is checked first (:func:`graphir.runguard.check_runnable`). TensorFlow's errors
    while running are one-line :class:`BackendError` or :class:`~graphir.runguard.RunTimeoutError`
    (:func:`tf_run_error`).
    """

    def __init__(
        self,
        module: Module,
        lowered: Any,
        target: str = "",
        cpu_devices: int | None = None,
        variables: Mapping[str, Any] | None = None,
        timeout_s: float | None = None,
        what: str = "running the model",
        held_inputs: Mapping[str, np.ndarray] | None = None,
    ):
        from graphir.backends.tf.lowering import node_devices
        from graphir.backends.tf.tf_graphdef import variable_values, variables_graphdef
        from graphir.importers.tf import load_tensorflow

        check_runnable(module, what)
        set_xla_flags()  # in case this is the process's first session
        tf = load_tensorflow("running on TensorFlow")
        self.tf = tf
        self.lowered = lowered
        self.what = what
        self.deadline = Deadline(timeout_s, what)
        held = dict(held_inputs or {})
        unknown = sorted(set(held) - set(lowered.feeds))
        if unknown:
            raise BackendError(f"{what}: cannot hold '{unknown[0]}': it is not one of the graph's feeds")
        self.feeds: tuple[str, ...] = tuple(feed for feed in lowered.feeds if feed not in held)
        """The tensors :meth:`run` feeds, one input each, in order (the lowering's feeds minus the held ones)."""
        step = lowered.graph_def()
        kernels = list(getattr(lowered, "kernels", {}).values())
        if target and kernels:
            from graphir.backends.tf.xla import fed_kernel_inputs

            fed = fed_kernel_inputs(step, kernels, self.feeds)
            if fed:
                raise BackendError(
                    f"{what}: fused kernels depend on input '{fed[0]}', fed to a remote session, where a fed input "
                    "splits XLA clusters: hold it (held_inputs)"
                )
        devices = node_devices(module)
        self.graph = tf.Graph()
        reader = variables_graphdef(module, devices, tf)
        init = variables_graphdef(module, devices, tf, variable_values(module, variables or {}))
        holder = _held_inputs_graphdef(step, held, tf)
        with self.graph.as_default():
            tf.graph_util.import_graph_def(holder.graph_def, name="")
            input_map = {}
            for feed, read in holder.fetches.items():  # its users, and the order's control edges on it
                input_map[feed] = input_map["^" + feed.rsplit(":", 1)[0]] = self.graph.get_tensor_by_name(read)
            tf.graph_util.import_graph_def(step, input_map=input_map or None, name="")
            tf.graph_util.import_graph_def(init.graph_def, name="graphir_init")
            tf.graph_util.import_graph_def(reader.graph_def, name="graphir_read")
        self.init_targets = [f"graphir_init/{name}" for name in init.targets] + holder.targets
        init_feeds = {f"graphir_init/{name}": array for name, array in init.feeds.items()} | holder.feeds
        self._release = [f"{target.removesuffix('graphir_assign')}graphir_release" for target in holder.targets]
        self.read_fetches = {name: f"graphir_read/{tensor}" for name, tensor in reader.fetches.items()}
        config = session_config(tf, cpu_devices, self.deadline.seconds)
        self.session = tf.compat.v1.Session(target=target, graph=self.graph, config=config)
        try:
            for targets, feeds in _init_batches(self.init_targets, init_feeds):
                self._call(targets, feeds, self._options())
        except BaseException:
            self.close()
            raise

    def _options(self, trace: bool = False) -> Any:
        self.deadline.check()
        return self.tf.compat.v1.RunOptions(output_partition_graphs=trace, timeout_in_ms=self.deadline.remaining_ms())

    def _call(self, fetches: Any, feed: Any, options: Any, run_metadata: Any = None) -> Any:
        """``session.run`` with TensorFlow's errors as one line (:func:`tf_run_error`)."""
        try:
            return self.session.run(fetches, feed, options=options, run_metadata=run_metadata)
        except self.tf.errors.OpError as exc:
            raise tf_run_error(exc, self.what, self.deadline) from None

    def run(self, inputs: Sequence[np.ndarray], fetches: Sequence[str] | None = None) -> list[np.ndarray]:
        """One step: feed ``inputs`` (one per :attr:`feeds`), return the fetched values (default: the outputs)."""
        feed = dict(zip(self.feeds, inputs, strict=True))
        outputs = self._call(list(fetches or self.lowered.fetches), feed, self._options())
        return [np.asarray(o) for o in outputs]

    def run_traced(
        self, inputs: Sequence[np.ndarray], fetches: Sequence[str] | None = None
    ) -> tuple[list[np.ndarray], dict[str, str]]:
        """:meth:`run`, also returning each op's device from ``RunMetadata``'s partition graphs."""
        outputs, partitions = self.run_partitioned(inputs, fetches)
        placed = {node.name: node.device for part in partitions for node in part.node}
        return outputs, placed

    def run_partitioned(
        self, inputs: Sequence[np.ndarray], fetches: Sequence[str] | None = None
    ) -> tuple[list[np.ndarray], list[Any]]:
        """:meth:`run`, also returning the step's partition graphs (one ``GraphDef`` per device, as TF ran them)."""
        feed = dict(zip(self.feeds, inputs, strict=True))
        metadata = self.tf.compat.v1.RunMetadata()
        outputs = self._call(list(fetches or self.lowered.fetches), feed, self._options(trace=True), metadata)
        return [np.asarray(o) for o in outputs], list(metadata.partition_graphs)

    def run_metadata(self, inputs: Sequence[np.ndarray], fetches: Sequence[str] | None = None) -> Any:
        """One step traced in full (``FULL_TRACE``, partition graphs): its ``RunMetadata``."""
        feed = dict(zip(self.feeds, inputs, strict=True))
        metadata = self.tf.compat.v1.RunMetadata()
        options = self._options(trace=True)
        options.trace_level = self.tf.compat.v1.RunOptions.FULL_TRACE
        self._call(list(fetches or self.lowered.fetches), feed, options, metadata)
        return metadata

    def read_variables(self) -> dict[str, np.ndarray]:
        """Every variable's current value, keyed by its VarHandleOp node name."""
        if not self.read_fetches:
            return {}
        names = sorted(self.read_fetches)
        values = self._call([self.read_fetches[n] for n in names], None, self._options())
        return {n: np.asarray(v) for n, v in zip(names, values, strict=True)}

    def close(self) -> None:
        """Release the held inputs (a server keeps resources across sessions) and close the session."""
        release, self._release = getattr(self, "_release", []), []
        if release:
            with contextlib.suppress(Exception):  # a session that failed or timed out: nothing more to do
                self.session.run(release)
        self.session.close()

    def __enter__(self) -> SessionRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_HOLDERS = itertools.count()


@dataclasses.dataclass(frozen=True)
class _HeldInputs:
    graph_def: Any
    targets: list[str]
    """The assign ops (``graphir_input/<op>/graphir_assign``), fed by ``.../graphir_value:0``."""
    feeds: dict[str, np.ndarray]
    fetches: dict[str, str]
    """Feed tensor -> the tensor reading its held value."""


def _held_inputs_graphdef(step: Any, held: Mapping[str, np.ndarray], tf: Any) -> _HeldInputs:
    """A resource variable per held feed, on its placeholder's device: handle, read, assign, release.

    The variable's ``shared_name`` is unique to this runner (a server keeps resources from session
    to session; the runner releases them when it closes).
    """
    from tensorflow.core.framework import graph_pb2
    from tensorflow.python.framework import versions

    graph_def = graph_pb2.GraphDef()
    graph_def.versions.producer = versions.GRAPH_DEF_VERSION
    out = _HeldInputs(graph_def, [], {}, {})
    if not held:
        return out
    placeholders = {node.name: node for node in step.node}
    token = f"{os.getpid()}-{next(_HOLDERS)}"
    for feed, array in held.items():
        op = feed.rsplit(":", 1)[0]
        placeholder = placeholders[op]
        dtype = placeholder.attr["dtype"].type
        shape = tf.TensorShape(np.shape(array)).as_proto()
        base = f"graphir_input/{op}"
        handle = graph_def.node.add(name=base, op="VarHandleOp", device=placeholder.device)
        handle.attr["dtype"].type = dtype
        handle.attr["shape"].shape.CopyFrom(shape)
        handle.attr["shared_name"].s = f"graphir_input/{token}/{op}".encode()
        read = graph_def.node.add(name=f"{base}/read", op="ReadVariableOp", device=placeholder.device)
        read.input.append(base)
        read.attr["dtype"].type = dtype
        value = graph_def.node.add(name=f"{base}/graphir_value", op="Placeholder", device=placeholder.device)
        value.attr["dtype"].type = dtype
        value.attr["shape"].shape.CopyFrom(shape)
        assign = graph_def.node.add(name=f"{base}/graphir_assign", op="AssignVariableOp", device=placeholder.device)
        assign.input.extend([base, value.name])
        assign.attr["dtype"].type = dtype
        release = graph_def.node.add(name=f"{base}/graphir_release", op="DestroyResourceOp", device=placeholder.device)
        release.input.append(base)
        release.attr["ignore_lookup_error"].b = True
        out.targets.append(assign.name)
        out.feeds[f"{value.name}:0"] = np.asarray(array)
        out.fetches[feed] = f"{read.name}:0"
    return out


INIT_BATCH_BYTES = 256 << 20
"""Variable values fed per initialising ``session.run``: a remote session serialises its feeds into one
gRPC message, which must stay below protobuf's 2 GB (a training step's weights and optimizer slots
exceed it: ``lstm_train`` holds about 3 GB)."""


def _init_batches(
    targets: Sequence[str], feeds: Mapping[str, np.ndarray]
) -> list[tuple[list[str], dict[str, np.ndarray]]]:
    """Split the assign ``targets`` into runs of at most :data:`INIT_BATCH_BYTES` of fed values.

    Target ``X/graphir_assign`` is fed by ``X/graphir_value:0``; a larger value runs alone.
    """
    batches: list[tuple[list[str], dict[str, np.ndarray]]] = []
    size = 0
    for target in targets:
        key = target.removesuffix("graphir_assign") + "graphir_value:0"
        value = feeds.get(key)
        nbytes = int(value.nbytes) if value is not None else 0
        if not batches or size + nbytes > INIT_BATCH_BYTES:
            batches.append(([], {}))
            size = 0
        batches[-1][0].append(target)
        if value is not None:
            batches[-1][1][key] = value
        size += nbytes
    return batches


def timed_calls(call: Callable[[], Any], steps: int, warmup: int) -> list[float]:
    """``call()`` ``warmup`` times untimed, then ``steps`` times timed: the wall seconds of each timed call."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(steps):
        begin = time.perf_counter()
        call()
        times.append(time.perf_counter() - begin)
    return times


def time_steps(runner: SessionRunner, inputs: Sequence[np.ndarray], steps: int, warmup: int) -> list[float]:
    """Run ``warmup`` untimed then ``steps`` timed steps; the wall time of each timed step."""
    return timed_calls(lambda: runner.run(inputs), steps, warmup)
