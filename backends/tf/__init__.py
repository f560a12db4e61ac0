"""TensorFlow backend: lower a placed module to a TF graph whose every op carries its device.

Python API::

    from graphir.backends.tf import lower
    lowered = lower(module, enforce_order=True)   # LoweredGraph
    outputs = lowered(*inputs)                    # runs the tf.function on the cluster's devices
    graph_def = lowered.graph_def()               # tf.compat.v1.GraphDef, devices set

Emitters (registered on import; TensorFlow is loaded only when one runs):

* ``--emit=tf-graphdef -o g.pb``: the binary GraphDef (``-o g.pbtxt``: text format; without ``-o``
  the text format goes to stdout). Large weights, held as variables by the lowering, are embedded
  as ``Const`` ops so the file is self-contained (more than 2 GB of weights: an error, use a
  SavedModel). The emitted text (a manifest: feeds, fetches, devices) goes to
  ``g.pb.txt``.
* ``--emit=tf-savedmodel -o DIR``: a SavedModel with the signature ``serving_default``; the large
  weights are its variables (checkpoint shards, devices kept); the manifest goes to
  ``DIR/tf-savedmodel.txt``.

Both enforce each device's ``order`` with control dependencies when the module is ordered (every
placed node has ``order``) and its placement runs under the ``enforced`` execution order (not
``dynamic``), so the exported graph runs the schedule graphir evaluated.

See :mod:`graphir.backends.tf.lowering` (paths, constants, ordering), :mod:`.onnx_ops` (the ONNX
op table, NCHW handling) and :mod:`.tf_graphdef` (re-emitting TF-imported graphs).
Importing this package does not import TensorFlow.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphir.emit import EMITTERS, Emitter, register_runner
from graphir.errors import BackendError
from graphir.fileio import write_atomically
from graphir.ir import Module

if TYPE_CHECKING:
    from graphir.backends.tf.lowering import LoweredGraph

__all__ = ["LoweredGraph", "lower", "manifest"]


def lower(module: Module, enforce_order: bool | None = None, large_weight_bytes: int | None = 1 << 20) -> LoweredGraph:
    """Lower ``module`` to TensorFlow (see :func:`graphir.backends.tf.lowering.lower`).

    ``enforce_order=None`` follows the execution order the placement recorded.

    Constants above ``large_weight_bytes`` are held as resource variables outside the graph.
    """
    from graphir.backends.tf.lowering import lower as lower_module

    return lower_module(module, enforce_order=enforce_order, large_weight_bytes=large_weight_bytes)


def __getattr__(name: str) -> Any:
    if name == "LoweredGraph":
        from graphir.backends.tf.lowering import LoweredGraph

        return LoweredGraph
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def manifest(module: Module, lowered: LoweredGraph, what: str) -> str:
    """A short text describing a lowered graph: feeds, fetches, and nodes per device."""
    counts: dict[str, int] = {}
    for device in lowered.node_devices.values():
        counts[device or "(unplaced)"] = counts.get(device or "(unplaced)", 0) + 1
    lines = [f"{what} of module @{module.name}: {len(lowered.node_devices)} nodes"]
    lines.append(f"enforce-order: {'true' if lowered.enforce_order else 'false'}")
    for value, feed in zip(lowered.input_names, lowered.feeds, strict=True):
        lines.append(f"feed %{value} -> {feed}")
    for value, fetch in zip(lowered.output_names, lowered.fetches, strict=True):
        lines.append(f"fetch %{value} -> {fetch}")
    for device in sorted(counts):
        lines.append(f"device {device}: {counts[device]} nodes")
    weights = getattr(lowered, "weights", {})
    if weights:
        size = sum(w.variable.shape.num_elements() * w.variable.dtype.size for w in weights.values())
        lines.append(f"large weights: {len(weights)} ({size} bytes), held as variables by the lowering")
    kernels = getattr(lowered, "kernels", {})
    if kernels:
        ops = sum(len(kernel.ops) for kernel in kernels.values())
        where = (
            "the GraphDef only: the SavedModel's function runs them unfused" if "SavedModel" in what else "the GraphDef"
        )
        lines.append(f"fused kernels: {len(kernels)} ({ops} ops), marked as XLA clusters in {where}")
    return "\n".join(lines) + "\n"


def emit_tf_graphdef(module: Module, output: Path | None) -> str:
    """``--emit=tf-graphdef``: write the GraphDef to ``output``; return the manifest (stdout: the pbtxt)."""
    lowered = lower(module)
    graph_def = lowered.graph_def()  # large weights embedded as Const ops: a self-contained file
    if graph_def.ByteSize() >= 2**31:
        raise BackendError(
            "--emit=tf-graphdef: the weights make the GraphDef exceed protobuf's 2 GB limit; "
            "use --emit=tf-savedmodel (weights in variable shards)"
        )
    if output is None:
        from google.protobuf import text_format

        return text_format.MessageToString(graph_def)
    target = output / "graph.pb" if output.is_dir() else output
    if target.suffix == ".pbtxt":
        from google.protobuf import text_format

        write_atomically(target, text_format.MessageToString(graph_def), BackendError)
    else:
        write_atomically(target, graph_def.SerializeToString(), BackendError)
    return manifest(module, lowered, f"GraphDef {target}")


def emit_tf_savedmodel(module: Module, output: Path | None) -> str:
    """``--emit=tf-savedmodel``: write a SavedModel directory at ``output``; return the manifest."""
    if output is None:
        raise BackendError("--emit=tf-savedmodel needs -o DIR (the SavedModel directory)")
    if output.exists() and not output.is_dir():
        raise BackendError(f"--emit=tf-savedmodel: '{output}' exists and is not a directory")
    if output.is_dir() and any(output.iterdir()) and not (output / "saved_model.pb").exists():
        raise BackendError(f"--emit=tf-savedmodel: '{output}' is a non-empty directory that holds no SavedModel")
    lowered = lower(module)
    import tensorflow as tf

    parent = output.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=parent))
    try:
        holder = tf.Module()
        holder.serve = lowered.function  # pyright: ignore[reportAttributeAccessIssue]  # tf.Module tracks new attributes
        # The large weights are variables: tracked here, the SavedModel stores them in its shards.
        variables = [weight.variable for weight in lowered.weights.values()]
        holder.weights = variables  # pyright: ignore[reportAttributeAccessIssue]  # tf.Module tracks new attributes
        options = tf.saved_model.SaveOptions(experimental_variable_policy="save_variable_devices")
        tf.saved_model.save(holder, str(staging), signatures=lowered.function, options=options)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staging, 0o777 & ~umask)  # mkdtemp creates 0700; give the usual permissions
        if output.exists():
            shutil.rmtree(output)
        os.replace(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest(module, lowered, f"SavedModel {output}")


class _ArtifactEmitter(Emitter):
    """An emitter whose ``-o`` file is the binary artifact: the manifest text goes beside it."""

    def text_path(self, output: Path) -> Path:
        """``g.pb`` -> ``g.pb.txt``; a directory -> ``DIR/<name>.txt``."""
        if output.is_dir():
            return output / f"{self.name}.txt"
        return output.with_name(output.name + ".txt")


EMITTERS["tf-graphdef"] = _ArtifactEmitter(
    "tf-graphdef", "TensorFlow GraphDef (-o g.pb), every op on its device", emit_tf_graphdef, writes_files=True
)
EMITTERS["tf-savedmodel"] = _ArtifactEmitter(
    "tf-savedmodel", "TensorFlow SavedModel (-o DIR), every op on its device", emit_tf_savedmodel, writes_files=True
)


def run_report(module: Module, steps: int, seed: int = 0, warmup: int = 2) -> str:
    """``--run-tf=STEPS``: time ``steps`` steps of the placed ``module`` on TensorFlow; the one-line report.

    Raises:
        BackendError: the module cannot be lowered or run (one line).
    """
    from graphir.backends.tf.run import run_module
    from graphir.runguard import RunMemoryError

    try:
        return run_module(module, steps, warmup=warmup, seed=seed).line()
    except MemoryError:  # sizes no check could know beforehand: still one line
        raise RunMemoryError("--run-tf: this machine cannot allocate the memory the run needs") from None


register_runner("tf", run_report)
