"""Measure a TensorFlow-dialect module with TensorFlow itself: per-op times and memory from ``RunMetadata``.

This module holds every TensorFlow call of ``profile{mode=tf}`` and ``profile{mode=regression}``
(:mod:`graphir.passes.profile`); TensorFlow is imported inside the functions, so importing this
module does not load it.

**From the IR back to a GraphDef** (:func:`module_graphdef`). The module is re-exported rather than
re-read from its source file, so modules imported from a concrete function, `.gir` text of TF ops
or a module rewritten by passes all work: every ``tf.<Op>`` node becomes a ``NodeDef`` of the same
name, its params become attrs (:class:`graphir.importers.tf.AttrWriter`, the builder the TF lowering
uses too: typed by the op's registered ``OpDef``; ``_device`` becomes the
requested device and is cleared, so everything runs on the host CPU), its inputs the TF tensor
names (:func:`graphir.importers.tf.tf_tensor_name`), control dependencies ``^name``; graph
constants (large ``Const`` weights) become ``Const`` nodes holding their data, or seeded random
data of their type when the data is not available (``external`` in `.gir` text); graph inputs
become ``Placeholder`` nodes of their type.

**Running** (:func:`measure_graphdef`): a ``tf.compat.v1.Session`` on the host CPU with every
graph rewrite off (Grappler's meta optimizer disabled, graph optimizer level ``L0``, no constant
folding or CSE), so each IR node is one TF kernel and keeps its name; TF still runs its oneDNN
kernels. Before measuring:

* **Variables** (``VarHandleOp``, ``VarHandleOp``-like ``VariableV2``) are initialised in the
  session with seeded uniform values in ``[0, 0.05)`` of their dtype and shape (integers: 0); the
  zoo graphs hold no weights. Non-negative values keep optimizer slots such as Adam's ``v``
  (square-rooted) and batch-norm variances valid, so no NaN or denormal distorts kernel times.
* **Inputs**: every ``Placeholder`` is fed seeded data of its static shape (floats: standard
  normal × 0.1; integers and booleans: 0, always a valid label, token or index). A placeholder of
  unknown shape is an error (one line, naming it).

Then the step (every sink node of the graph as a target, so a training step runs its updates)
runs ``warmup + iterations`` times with ``RunOptions(trace_level=FULL_TRACE)``; the warm-up runs
are discarded and for each node the **median** over the measured runs is kept of

* its kernel time (``op_end_rel`` − ``op_start_rel`` of its ``NodeExecStats``, in nanoseconds
  where TF reports them);
* its output bytes (``requested_bytes`` of each output's allocation; a node that forwards its
  input buffer, like ``Identity``, still reports the tensor it returns);
* its temporary bytes: the allocator's ``total_bytes`` for the node minus its output bytes
  (clipped at 0; scratch the kernel allocated and freed).

The whole-step wall time (median and fastest) is reported too. Nodes the trace does not report
(fed placeholders, pruned nodes) are absent from the result; the caller decides their treatment.
"""

from __future__ import annotations

import contextlib
import os
import re
import statistics
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from graphir.errors import GraphIRError, PassError, describe_exception
from graphir.importers.tf import load_tensorflow
from graphir.ir import Module
from graphir.regions import Region
from graphir.runguard import Deadline
from graphir.sampling import constant_array

if TYPE_CHECKING:
    from tensorflow.core.framework import graph_pb2

__all__ = ["TfMeasurement", "graphdef_placeholders", "measure_graphdef", "module_graphdef", "node_stats"]

_INIT_HIGH = 0.05


@attrs.frozen(eq=False)
class TfMeasurement:
    """What one measured TF session run reports, keyed by TF node name.

    Attributes:
        times: median kernel seconds per reported node.
        output_bytes: median output bytes per reported node.
        temp_bytes: median temporary bytes per reported node.
        run_time: median wall seconds of one step.
        fastest_run: wall seconds of the fastest measured step.
        iterations: measured steps.
    """

    times: dict[str, float]
    output_bytes: dict[str, int]
    temp_bytes: dict[str, int]
    run_time: float
    fastest_run: float
    iterations: int


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    yield


# --------------------------------------------------------------------------- IR -> GraphDef


def module_graphdef(module: Module, rng: np.random.Generator) -> graph_pb2.GraphDef:
    """Re-export a TF-dialect module as a GraphDef (see the module docstring).

    Raises:
        PassError: a node is not a TF op, its op is not registered in this TensorFlow, or a param
            has no attr form (one line, naming the node).
    """
    with _quiet():
        tf = load_tensorflow("measuring with TensorFlow")
        from tensorflow.core.framework import graph_pb2

        from graphir.backends.tf.tf_graphdef import region_function
        from graphir.importers.tf import AttrWriter, tf_tensor_name

    writer = AttrWriter()

    graph = module.graph
    graph_def = graph_pb2.GraphDef()
    producer = str(module.metadata.get("producer", ""))
    if producer.startswith("tensorflow graphdef ") and producer.rsplit(" ", 1)[-1].isdigit():
        graph_def.versions.producer = int(producer.rsplit(" ", 1)[-1])  # the importer's record of it
    for value in graph.constants:
        try:
            array = constant_array(value, rng)
        except (KeyError, TypeError, ValueError, OverflowError):  # a type numpy cannot hold, a hostile shape
            raise PassError(f"constant '%{value.name}' ({value.type}): no data can be made for it to run") from None
        node = graph_def.node.add(name=value.name, op="Const")
        proto = tf.make_tensor_proto(array)
        node.attr["dtype"].type = proto.dtype
        node.attr["value"].tensor.CopyFrom(proto)
    for value in graph.inputs:  # graph inputs (e.g. of `.gir` text) become placeholders of their type
        node = graph_def.node.add(name=value.name, op="Placeholder")
        node.attr["dtype"].type = writer.dtype_enum(value.type.dtype.short)
        shape = value.type.shape
        node.attr["shape"].shape.CopyFrom(
            writer.shape("*" if shape is None else [d if isinstance(d, int) else -1 for d in shape])
        )
    for ir_node in graph.index().nodes:
        if not ir_node.op.startswith("tf."):
            raise PassError(f"profile{{mode=tf}} runs TensorFlow ops only, but node '{ir_node.name}' is '{ir_node.op}'")
        op_type = ir_node.op[3:]
        try:
            kinds = writer.kinds(op_type)
        except ValueError:
            raise PassError(f"node '{ir_node.name}': op '{op_type}' is not registered in this TensorFlow") from None
        node = graph_def.node.add(name=ir_node.name, op=op_type)
        node.input.extend(tf_tensor_name(v) for v in ir_node.inputs)
        node.input.extend(f"^{c.name}" for c in ir_node.control_inputs)
        for key, value in ir_node.params.items():
            if key == "_device":
                continue
            if isinstance(value, Region):  # a While/If body: a library function rebuilt from the region
                node.attr[key].func.name = region_function(graph_def.library, ir_node, key, value, None, tf)
                continue
            try:
                node.attr[key].CopyFrom(writer.attr(value, kinds.get(key)))
            except ValueError as exc:
                raise PassError(f"node '{ir_node.name}': attr '{key}': {exc}") from None
    return graph_def


def graphdef_placeholders(graph_def: graph_pb2.GraphDef) -> dict[str, tuple[int, ...] | None]:
    """Placeholder name -> its static shape attr (None: unknown rank or a dim unknown)."""
    out: dict[str, tuple[int, ...] | None] = {}
    for node in graph_def.node:
        if node.op != "Placeholder":
            continue
        shape = node.attr["shape"].shape
        dims = tuple(int(d.size) for d in shape.dim)
        out[node.name] = None if shape.unknown_rank or any(d < 0 for d in dims) else dims
    return out


# --------------------------------------------------------------------------- running


def _session_config(threads: int, timeout_ms: int = 0) -> Any:
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=threads,
        inter_op_parallelism_threads=threads,
        allow_soft_placement=True,
        operation_timeout_in_ms=timeout_ms,
    )
    config.graph_options.optimizer_options.opt_level = tf.compat.v1.OptimizerOptions.L0
    config.graph_options.optimizer_options.do_constant_folding = False
    config.graph_options.optimizer_options.do_common_subexpression_elimination = False
    config.graph_options.optimizer_options.do_function_inlining = False
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    return config


def _initialisers(graph: Any, seed: int) -> list[Any]:
    """Assign ops giving every variable seeded values (see the module docstring)."""
    import tensorflow as tf

    ops = []
    for k, op in enumerate(graph.get_operations()):
        if op.type not in ("VarHandleOp", "VariableV2"):
            continue
        dtype = tf.dtypes.as_dtype(op.get_attr("dtype"))
        shape = tf.TensorShape(op.get_attr("shape"))
        if not shape.is_fully_defined():
            raise PassError(f"variable '{op.name}' has no static shape {shape}: cannot initialise it")
        with tf.name_scope("graphir_init"):
            if dtype.is_floating:
                value = tf.random.stateless_uniform(_dims(shape), seed=(seed, k), maxval=_INIT_HIGH, dtype=tf.float32)
                value = tf.cast(value, dtype)
            else:
                value = tf.zeros(shape, dtype)
            if op.type == "VarHandleOp":
                ops.append(tf.raw_ops.AssignVariableOp(resource=op.outputs[0], value=value))
            else:
                ops.append(tf.compat.v1.assign(op.outputs[0], value, validate_shape=True).op)
    return ops


def _dims(shape: Any) -> list[int]:
    """The dimensions of a fully defined ``tf.TensorShape``."""
    return [int(d) for d in shape.as_list()]


def _feeds(graph: Any, rng: np.random.Generator) -> dict[Any, np.ndarray]:
    import tensorflow as tf

    feeds = {}
    for op in feeds_ops(graph):
        shape = tf.TensorShape(op.get_attr("shape"))
        if not shape.is_fully_defined():
            raise PassError(f"placeholder '{op.name}' has no static shape ({shape}): cannot feed it")
        dtype = tf.dtypes.as_dtype(op.get_attr("dtype"))
        try:
            if dtype.is_floating:
                array = (rng.standard_normal(_dims(shape)) * 0.1).astype(dtype.as_numpy_dtype)
            else:
                array = np.zeros(_dims(shape), dtype=dtype.as_numpy_dtype)
        except (ValueError, TypeError, OverflowError, MemoryError):  # numpy's own size limit, a hostile dtype
            raise PassError(f"placeholder '{op.name}' of shape {shape} and type {dtype.name}: cannot feed it") from None
        feeds[op.outputs[0]] = array
    return feeds


_ARG = re.compile(r"^_arg_(.+)_(\d+)_(\d+)$")


def feeds_ops(graph: Any) -> list[Any]:
    """The placeholders of a ``tf.Graph`` (fed by :func:`measure_graphdef`)."""
    return [op for op in graph.get_operations() if op.type == "Placeholder"]


def _rename_feeds(samples: dict[str, list[Any]], placeholders: set[str]) -> None:
    """A fed placeholder runs as the session's ``_arg_<name>_<output>_<index>`` node: report it under its name."""
    for name in list(samples):
        match = _ARG.match(name)
        if match and match.group(1) in placeholders and match.group(1) not in samples:
            samples[match.group(1)] = samples.pop(name)


def node_stats(run_metadata: Any) -> dict[str, tuple[float, int, int]]:
    """TF node name -> (kernel seconds, output bytes, temporary bytes) of one traced run."""
    out: dict[str, tuple[float, int, int]] = {}
    for device in run_metadata.step_stats.dev_stats:
        for ns in device.node_stats:
            name = ns.node_name
            if ns.op_end_rel_nanos or ns.op_start_rel_nanos:
                seconds = (ns.op_end_rel_nanos - ns.op_start_rel_nanos) * 1e-9
            else:
                seconds = (ns.op_end_rel_micros - ns.op_start_rel_micros) * 1e-6
            outputs = sum(int(o.tensor_description.allocation_description.requested_bytes) for o in ns.output)
            allocated = sum(int(m.total_bytes) for m in ns.memory)
            temp = max(0, allocated - outputs)
            previous = out.get(name)
            if previous is not None:  # a node reported twice in one run (e.g. by two executors): add up
                seconds += previous[0]
                outputs = max(outputs, previous[1])
                temp = max(temp, previous[2])
            out[name] = (max(seconds, 0.0), outputs, temp)
    return out


def _first_line(exc: BaseException) -> str:
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def measure_graphdef(
    graph_def: graph_pb2.GraphDef,
    *,
    iterations: int = 3,
    warmup: int = 1,
    threads: int = 1,
    seed: int = 0,
    timeout_s: float | None = None,
    what: str = "profile{mode=tf}",
) -> TfMeasurement:
    """Run ``graph_def`` in a traced TF session; per-node medians (see the module docstring).

    Args:
        graph_def: a flat GraphDef (no function calls needed; calls run as one node).
        iterations: measured steps.
        warmup: steps run first and discarded.
        threads: TF intra- and inter-op threads (0: TF's default, all cores).
        seed: seeds variable initial values and the fed inputs.
        timeout_s: time limit of the whole measurement (``None``: the run time limit,
            :func:`graphir.runguard.run_timeout`); each call's deadline is what is left of it.
        what: the run, named in errors.

    Raises:
        PassError: TensorFlow rejects the graph or a step fails (one line; out of memory says so).
        RunTimeoutError: the time limit passed.
    """
    with _quiet():
        import tensorflow as tf

    graph = tf.Graph()
    try:
        with graph.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
            targets = [
                op
                for op in graph.get_operations()
                if not op._control_outputs and all(not t.consumers() for t in op.outputs)  # noqa: SLF001
            ]
            init = _initialisers(graph, seed)
    except PassError:
        raise
    except Exception as exc:
        raise PassError(f"TensorFlow rejects the graph ({describe_exception(exc)})") from None
    feeds = _feeds(graph, np.random.default_rng(seed))
    deadline = Deadline(timeout_s, what)

    def options() -> Any:
        deadline.check()
        return tf.compat.v1.RunOptions(
            trace_level=tf.compat.v1.RunOptions.FULL_TRACE, timeout_in_ms=deadline.remaining_ms()
        )

    samples: dict[str, list[tuple[float, int, int]]] = {}
    walls: list[float] = []
    try:
        with tf.compat.v1.Session(graph=graph, config=_session_config(threads, deadline.remaining_ms())) as session:
            if init:
                session.run(init, options=options())
            for step in range(warmup + iterations):
                metadata = tf.compat.v1.RunMetadata()
                start = time.perf_counter()
                session.run(targets, feed_dict=feeds, options=options(), run_metadata=metadata)
                wall = time.perf_counter() - start
                if step < warmup:
                    continue
                walls.append(wall)
                for name, stats in node_stats(metadata).items():
                    samples.setdefault(name, []).append(stats)
    except GraphIRError:
        raise
    except tf.errors.DeadlineExceededError:
        raise deadline.error("TensorFlow's call exceeded its deadline") from None
    except tf.errors.ResourceExhaustedError as exc:
        raise PassError(f"TensorFlow ran out of memory running the graph ({_first_line(exc)})") from None
    except Exception as exc:  # tf.errors.OpError and friends
        raise PassError(f"TensorFlow cannot run the graph ({describe_exception(exc)})") from None
    _rename_feeds(samples, {op.name for op in feeds_ops(graph)})
    times = {name: float(statistics.median(s[0] for s in rows)) for name, rows in samples.items()}
    out_bytes = {name: int(statistics.median(s[1] for s in rows)) for name, rows in samples.items()}
    temp_bytes = {name: int(statistics.median(s[2] for s in rows)) for name, rows in samples.items()}
    return TfMeasurement(times, out_bytes, temp_bytes, float(statistics.median(walls)), min(walls), len(walls))
