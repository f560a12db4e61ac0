"""Control-flow ops holding regions (:mod:`graphir.regions`): ONNX ``If``/``Loop``/``Scan``, TF ``While``/``If``.

**Cost** (what ``profile`` charges the node, which fusion and placement treat as one unit with its
whole body on one device): the work of one pass through a region is the sum of its nodes' own
estimates (nested regions included), and the node's work is

* ``If``: the costlier branch (by FLOPs, then bytes): a conservative bound, since the branch
  taken is known only at run time;
* ``Loop``: ``trips · body``, ``trips`` the constant trip count ``M`` when it is one (bounded by
  nothing else: a loop that ends early on its condition is over-charged), else
  :data:`DEFAULT_TRIPS` (a documented guess for a data-dependent count);
* ``Scan``: ``length · body``, the length of the first scan input along its scan axis (Scan-8: batch ·
  steps, an upper bound when ``sequence_lens`` is given) when static,
  else :data:`DEFAULT_TRIPS`;
* TF ``While``: :data:`DEFAULT_TRIPS` · (cond + body) (TF's functional loops carry no count).

FLOPs and bytes add up, so the roofline of a loop is that of its summed work (an optimistic bound
against per-op rooflines: the body's kernels are charged no launch overhead of their own).
Temporary bytes: the body's largest scratch plus all its activations (every result of one trip
alive at once: an upper bound of what a trip holds), plus the body's constants.

**Lowering** (:func:`lower_region` lowers one pass through a region with the ops' own lowerings,
inside the holder's device scope): ``If`` -> ``tf.cond``; ``Loop`` -> ``tf.while_loop`` over
``(i, condition, carried..., one TensorArray per scan output)``, stopping at ``M`` trips or a false
condition, carried values free to change shape between trips; ``Scan`` (opset 9+) ->
``tf.while_loop`` over the scan axis (input axes and directions applied before, output axes and
directions after), slices read per trip; Scan-8 (batched, ``sequence_lens``) -> ``tf.map_fn`` over
the batch of such loops, each row running its own length.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np

from graphir.attributes import DenseTensor
from graphir.ops.lower_context import OpContext, onnx_inputs, tf_dtype
from graphir.ops.registry import Estimate, cost, lowering, lowering_of
from graphir.ops.work import estimate_node, int_params
from graphir.regions import captured_count, node_regions

if TYPE_CHECKING:
    from graphir.ir import Graph, Node, Value

__all__ = ["DEFAULT_TRIPS", "lower_region", "region_work", "trip_count"]

_SCOPE_BAD = re.compile(r"[^A-Za-z0-9_.\-]")

DEFAULT_TRIPS = 16
"""Trips charged to a loop whose count is known only at run time."""


def region_work(graph: Graph) -> Estimate:
    """``(flops, bytes, temporary)`` of one pass through a region graph (see the module docstring)."""
    flops = nbytes = 0.0
    scratch = activations = 0
    for node in graph.nodes:
        f, b, t, _, _ = estimate_node(node)
        flops += f
        nbytes += b
        scratch = max(scratch, t)
        activations += sum(v.type.nbytes_or(0) for v in node.outputs)
    constants = sum(v.type.nbytes_or(0) for v in graph.constants)
    return flops, nbytes, scratch + activations + constants


def _constant_scalar(value: Value | None) -> int | None:
    """The integer value of a constant scalar operand (an initializer or an ``onnx.Constant``), else ``None``."""
    if value is None:
        return None
    data = value.const
    if data is None and value.producer is not None and value.producer.op == "onnx.Constant":
        data = value.producer.params.get("value")
    if not isinstance(data, DenseTensor):
        return None
    array = np.asarray(data.numpy()).reshape(-1)
    return int(array[0]) if array.size == 1 else None


def trip_count(node: Node) -> tuple[int, bool]:
    """``(trips, exact)``: how many times ``node``'s body runs, and whether that is known before the run."""
    op = node.op.rsplit(".", 1)[-1]
    if op == "Loop":
        absent = set(int_params(node, "_absent_inputs"))
        m = None if 0 in absent or not node.inputs else _constant_scalar(node.inputs[0])
        if m is not None and m >= 0:
            return m, True
    if op == "Scan":
        scan_count = node.params.get("num_scan_inputs")
        captures = node.params.get("_captured_inputs", 0)
        own = node.inputs[: len(node.inputs) - captures] if isinstance(captures, int) else node.inputs
        if isinstance(scan_count, int) and 0 < scan_count <= len(own):
            first = own[len(own) - scan_count].type
            axes = int_params(node, "scan_input_axes") or (0,)
            axis = axes[0]
            if first.shape is not None and first.shape:
                length = first.shape[axis]
                if _is_scan8(node, first) and len(first.shape) >= 2:  # batch x steps trips of the body
                    rows, steps = first.shape[0], first.shape[1]
                    if isinstance(rows, int) and isinstance(steps, int):  # an upper bound under sequence_lens
                        return rows * steps, 0 in set(int_params(node, "_absent_inputs"))
                elif isinstance(length, int):
                    return length, True
    return DEFAULT_TRIPS, False


def _is_scan8(node: Node, first_scan: Any) -> bool:
    """Whether a ``Scan`` node is opset 8's (its body's scan slices drop two axes: batch and steps)."""
    regions = dict(node_regions(node))
    body = regions.get("body")
    scan_count = node.params.get("num_scan_inputs")
    if body is None or not isinstance(scan_count, int) or first_scan.shape is None:
        return False
    formals = body.graph.inputs[: len(body.graph.inputs) - captured_count(node)]
    if len(formals) < scan_count:
        return False
    slice_type = formals[len(formals) - scan_count].type
    return slice_type.shape is not None and len(slice_type.shape) == len(first_scan.shape) - 2


def _looped_cost(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """``trips · (work of the regions)`` (``If``: the costlier branch); see the module docstring."""
    regions = node_regions(node)
    if not regions:
        return None
    works = [region_work(region.graph) for _, region in regions]
    if node.op.rsplit(".", 1)[-1] == "If":
        flops, nbytes, _ = max(works, key=lambda w: (w[0], w[1]))
        return flops, nbytes, max(w[2] for w in works)
    trips, _ = trip_count(node)
    flops = sum(w[0] for w in works)
    nbytes = sum(w[1] for w in works)
    return trips * flops, trips * nbytes + float(sum(ib) + sum(ob)), max(w[2] for w in works)


cost("onnx.If", "onnx.Loop", "onnx.Scan", "tf.While", "tf.StatelessWhile", "tf.If", "tf.StatelessIf")(_looped_cost)


# --------------------------------------------------------------------------- lowering


def lower_region(cx: OpContext, graph: Graph, inputs: list[Any]) -> list[Any]:
    """Lower one pass through region ``graph`` on the TF tensors ``inputs``; its outputs as TF tensors.

    Each node is lowered by its op's ``lower`` facet, in the region's topological order, inside the
    TensorFlow function being built (a ``tf.cond`` branch or a ``tf.while_loop`` body): the
    region's ops inherit the device of its holder.
    """
    tf = cx.tf
    env: dict[Value, Any] = dict(zip(graph.inputs, inputs, strict=True))
    for value in graph.constants:
        try:
            if value.const is None:
                raise AttributeError("it has no data")
            env[value] = tf.constant(np.asarray(value.const.numpy()))
        except (AttributeError, ValueError) as exc:
            raise cx.error(f"region '{graph.name}' constant '%{value.name}' has no data ({exc})") from None
    for node in graph.index().nodes:
        convert = lowering_of(node.op)
        if convert is None:
            raise cx.error(f"region '{graph.name}' holds '{node.op}' ('{node.name}'), which has no TensorFlow lowering")
        operands = [None if v is None else env[v] for v in onnx_inputs(node)]
        with tf.name_scope(_SCOPE_BAD.sub("_", node.name) or "n"):
            results = convert(OpContext(tf, node, cx.opset, operands), operands)
        if len(results) != len(node.outputs):
            raise cx.error(f"region node '{node.name}' lowered to {len(results)} results for {len(node.outputs)}")
        env.update(zip(node.outputs, results, strict=True))
    return [tf.identity(env[v]) for v in graph.outputs]


def _regions(cx: OpContext) -> dict[str, Graph]:
    regions = {name: region.graph for name, region in node_regions(cx.node)}
    if not regions:
        raise cx.error("holds no region graphs (imported as an opaque node); re-import it")
    return regions


def _split_captures(cx: OpContext, operands: list[Any]) -> tuple[list[Any], list[Any]]:
    """``(own operands, captured operands)``, each first copied onto the node's device.

    TensorFlow's session lowers a functional ``While``/``If`` into ``Enter``/``Switch``/``Merge``
    ops placed with the *producer* of each input: an operand from another device would keep the
    loop's machinery there and cross devices on every trip. The copies (``tf.identity`` in the
    node's device scope) move each input once, before the loop or branch.
    """
    tf = cx.tf
    local = [None if x is None else tf.identity(x) for x in operands]
    count = captured_count(cx.node)
    return local[: len(local) - count], local[len(local) - count :]


def _scalar_bool(tf: Any, value: Any) -> Any:
    return tf.reshape(tf.cast(value, tf.bool), [])


def _element_shape(tf: Any, value: Value) -> Any:
    """The static shape of a region output (a scan slice) as TensorFlow's ``TensorShape``, or unknown."""
    shape = value.type.shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        return tf.TensorShape(None)
    return tf.TensorShape(list(shape))


def _stacked_outputs(tf: Any, body: Graph, first: int) -> list[Any]:
    """One TensorArray per body output from ``first`` on (scan outputs), growing one element per trip."""
    arrays = []
    for value in body.outputs[first:]:
        dtype = tf_dtype(tf, value.type)
        arrays.append(
            tf.TensorArray(dtype, size=0, dynamic_size=True, infer_shape=False, element_shape=_element_shape(tf, value))
        )
    return arrays


@lowering("If")
def _lower_if(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    regions = _regions(cx)
    own, captured = _split_captures(cx, operands)
    results = tf.cond(
        _scalar_bool(tf, own[0]),
        lambda: lower_region(cx, regions["then_branch"], captured),
        lambda: lower_region(cx, regions["else_branch"], captured),
    )
    return _with_ir_shapes(tf, cx.node, list(results) if isinstance(results, (list, tuple)) else [results])


def _with_ir_shapes(tf: Any, node: Node, results: list[Any]) -> list[Any]:
    """``results`` with the static shape facts of the node's IR result types merged in.

    Branches of different shapes leave ``tf.cond``'s results without a static rank, which the ops
    after it may need; ONNX shape inference often knows it. A fact TensorFlow contradicts is skipped.
    """
    for tensor, value in zip(results, node.outputs, strict=False):
        shape = value.type.shape
        if shape is None:
            continue
        try:
            tensor.set_shape(tf.TensorShape([d if isinstance(d, int) else None for d in shape]))
        except ValueError:
            continue
    return results


@lowering("Loop")
def _lower_loop(cx: OpContext, operands: list[Any]) -> list[Any]:
    """``tf.while_loop`` over ``(i, condition, carried..., scan TensorArrays...)``; carried shapes may vary."""
    tf = cx.tf
    body = _regions(cx)["body"]
    own, captured = _split_captures(cx, operands)
    own = own + [None] * (2 - len(own))
    trips, condition, carried = own[0], own[1], own[2:]
    limit = tf.constant(np.iinfo(np.int64).max) if trips is None else tf.cast(tf.reshape(trips, []), tf.int64)
    keep_going = tf.constant(True) if condition is None else _scalar_bool(tf, condition)
    count = len(carried)
    arrays = _stacked_outputs(tf, body, 1 + count)

    def test(i: Any, going: Any, *rest: Any) -> Any:
        return tf.logical_and(i < limit, going)

    slice_shapes: list[Any] = []

    def step(i: Any, going: Any, *rest: Any) -> tuple[Any, ...]:
        values, outs = rest[:count], rest[count:]
        results = lower_region(cx, body, [i, going, *values, *captured])
        slice_shapes[:] = [r.shape for r in results[1 + count :]]  # static facts of the traced body
        written = [ta.write(tf.cast(i, tf.int32), r) for ta, r in zip(outs, results[1 + count :], strict=True)]
        return (i + 1, _scalar_bool(tf, results[0]), *results[1 : 1 + count], *written)

    start = (tf.constant(0, tf.int64), keep_going, *carried, *arrays)
    final = _while(tf, test, step, start, 2)
    return _with_ir_shapes(tf, cx.node, [*final[2 : 2 + count], *_stack(tf, final[2 + count :], slice_shapes, None)])


def _while(tf: Any, test: Any, step: Any, start: tuple[Any, ...], fixed: int) -> Any:
    """``tf.while_loop`` keeping the carried tensors' static shapes when the body keeps them.

    The first ``fixed`` loop variables are scalars. The others are tried with the shapes they enter
    with (so the body's ops see static ranks and dims), then with their ranks only, then unknown:
    ONNX lets a carried value change shape from one trip to the next, which TensorFlow accepts
    only under a relaxed shape invariant.
    """
    carried = start[fixed:]

    def relaxed(level: int) -> tuple[Any, ...]:
        shapes = []
        for value in carried:
            if not hasattr(value, "shape") or level == 2:  # a TensorArray, or nothing known
                shapes.append(tf.TensorShape(None))
            elif level == 0:
                shapes.append(value.shape)
            else:
                shapes.append(tf.TensorShape(None if value.shape.rank is None else [None] * value.shape.rank))
        return (tf.TensorShape([]),) * fixed + tuple(shapes)

    for level in (0, 1):
        try:
            return tf.while_loop(test, step, start, shape_invariants=relaxed(level))
        except ValueError as exc:
            if "shape" not in str(exc):
                raise
    return tf.while_loop(test, step, start, shape_invariants=relaxed(2))


def _stack(tf: Any, arrays: Any, slice_shapes: list[Any], trips: int | None) -> list[Any]:
    """Each TensorArray stacked, with the static slice shape the traced body gave its elements."""
    stacked = []
    for k, array in enumerate(arrays):
        tensor = array.stack()
        if k < len(slice_shapes) and slice_shapes[k].rank is not None:
            tensor.set_shape(tf.TensorShape([trips]).concatenate(slice_shapes[k]))
        stacked.append(tensor)
    return stacked


def _move_axis(tf: Any, x: Any, source: int, target: int) -> Any:
    rank = x.shape.rank
    if rank is None:
        raise ValueError("a scan input or output of unknown rank")
    source, target = source % rank, target % rank
    if source == target:
        return x
    perm = [k for k in range(rank) if k != source]
    perm.insert(target, source)
    return tf.transpose(x, perm)


@lowering("Scan")
def _lower_scan(cx: OpContext, operands: list[Any]) -> list[Any]:
    """Scan (opset 9+): ``tf.while_loop`` over the scan axis, slices read per trip, outputs in TensorArrays."""
    tf = cx.tf
    if cx.opset < 9:
        return _lower_scan8(cx, operands)
    body = _regions(cx)["body"]
    own, captured = _split_captures(cx, operands)
    scan_count = int(cx.param("num_scan_inputs"))
    states, sequences = own[: len(own) - scan_count], own[len(own) - scan_count :]
    in_axes = [int(a) for a in cx.param("scan_input_axes", ()) or ()] or [0] * scan_count
    in_dirs = [int(d) for d in cx.param("scan_input_directions", ()) or ()] or [0] * scan_count
    sequences = [_move_axis(tf, x, axis, 0) for x, axis in zip(sequences, in_axes, strict=True)]
    sequences = [tf.reverse(x, [0]) if d else x for x, d in zip(sequences, in_dirs, strict=True)]
    length = tf.shape(sequences[0])[0]
    count = len(states)
    arrays = _stacked_outputs(tf, body, count)

    slice_shapes: list[Any] = []

    def step(t: Any, *rest: Any) -> tuple[Any, ...]:
        values, outs = rest[:count], rest[count:]
        results = lower_region(cx, body, [*values, *(x[t] for x in sequences), *captured])
        slice_shapes[:] = [r.shape for r in results[count:]]  # static facts of the traced body
        written = [ta.write(t, r) for ta, r in zip(outs, results[count:], strict=True)]
        return (t + 1, *results[:count], *written)

    start = (tf.constant(0), *states, *arrays)
    final = _while(tf, lambda t, *_: t < length, step, start, 1)
    scanned = _stack(tf, final[1 + count :], slice_shapes, sequences[0].shape[0])
    out_axes = [int(a) for a in cx.param("scan_output_axes", ()) or ()] or [0] * len(scanned)
    out_dirs = [int(d) for d in cx.param("scan_output_directions", ()) or ()] or [0] * len(scanned)
    scanned = [tf.reverse(y, [0]) if d else y for y, d in zip(scanned, out_dirs, strict=True)]
    scanned = [_move_axis(tf, y, 0, axis) for y, axis in zip(scanned, out_axes, strict=True)]
    return _with_ir_shapes(tf, cx.node, [*final[1 : 1 + count], *scanned])


def _lower_scan8(cx: OpContext, operands: list[Any]) -> list[Any]:
    """Scan-8: ``tf.map_fn`` over the batch axis 0; per row a ``tf.while_loop`` over its ``sequence_lens[b]`` steps.

    Operands ``(sequence_lens?, states [B, ...]..., scans [B, T, ...]...)``; the body sees one row's
    states and one step of its scans. ``directions`` reverses a scan input within the row's
    length. Scan outputs ``[B, T, ...]`` hold zeros past a row's length (onnxruntime's padding).
    """
    tf = cx.tf
    body = _regions(cx)["body"]
    own, captured = _split_captures(cx, operands)
    lengths, values = own[0], own[1:]
    scan_count = int(cx.param("num_scan_inputs"))
    states, sequences = values[: len(values) - scan_count], values[len(values) - scan_count :]
    directions = [int(d) for d in cx.param("directions", ()) or ()] or [0] * scan_count
    batch, steps = tf.shape(sequences[0])[0], tf.shape(sequences[0])[1]
    lengths = tf.fill([batch], steps) if lengths is None else tf.cast(tf.reshape(lengths, [-1]), tf.int32)
    count = len(states)

    def row(b: Any) -> tuple[Any, ...]:
        length = lengths[b]
        slices = [x[b][:length] for x in sequences]
        slices = [tf.reverse(x, [0]) if d else x for x, d in zip(slices, directions, strict=True)]
        arrays = _stacked_outputs(tf, body, count)
        slice_shapes: list[Any] = []

        def step(t: Any, *rest: Any) -> tuple[Any, ...]:
            carried, outs = rest[:count], rest[count:]
            results = lower_region(cx, body, [*carried, *(x[t] for x in slices), *captured])
            slice_shapes[:] = [r.shape for r in results[count:]]
            written = [ta.write(t, r) for ta, r in zip(outs, results[count:], strict=True)]
            return (t + 1, *results[:count], *written)

        start = (tf.constant(0), *(s[b] for s in states), *arrays)
        final = _while(tf, lambda t, *_: t < length, step, start, 1)
        scanned = _stack(tf, final[1 + count :], slice_shapes, None)
        padded = []
        for y in scanned:
            pad = tf.concat([[[0, steps - length]], tf.zeros([tf.rank(y) - 1, 2], tf.int32)], 0)
            padded.append(tf.pad(y, pad))
        return (*final[1 : 1 + count], *padded)

    signature = tuple(tf.TensorSpec(None, tf_dtype(tf, v.type)) for v in cx.node.outputs)
    results = tf.map_fn(row, tf.range(batch), fn_output_signature=signature)
    return _with_ir_shapes(tf, cx.node, list(results))
