"""Variable shapes from a TensorFlow checkpoint, to complete what a bare GraphDef cannot tell.

A training step saved with ``concrete.graph.as_graph_def()`` fixes most of its variables' shapes
(:mod:`graphir.importers.tf_resources`) but not all: a ``SAME``-padded or strided kernel's spatial
size leaves no trace in the graph, nor does the class count behind sparse labels. The user who
trained the model has its checkpoint (``tf.train.Checkpoint(model=..., optimizer=...)``, or the
``variables/`` of a SavedModel), which lists every variable with its dtype and shape but under
object paths, not the GraphDef's placeholder names. :func:`read_variables` reads that list (no
tensor data); :func:`match_variables` gives an unresolved placeholder a checkpoint shape only when
the evidence forces it:

* **by shape**: every checkpoint variable compatible with what the graph fixed (dtype, rank, known
  dims) has the same shape (a ``[?,?,128,32]`` kernel where every ``[*,*,128,32]`` variable is
  ``[3,3,128,32]``);
* **by elimination**: when each recovered placeholder's (dtype, shape) can be taken out of the
  checkpoint's list once (so the list and the graph's variables correspond), the compatible shapes
  left over are unique (the learning-rate scalar, read only elementwise, is the one float scalar
  left).

Both assume the placeholder is one of the checkpoint's variables; a candidate list with two shapes is
never resolved by guessing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from graphir.errors import ImportError_

PartialShape = tuple[int | None, ...] | None

_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


@dataclass(frozen=True)
class CheckpointVariable:
    """One variable of a checkpoint: its name (object-graph ``full_name`` or key), TF dtype enum, shape."""

    name: str
    dtype: int
    shape: tuple[int, ...]


def checkpoint_prefix(path: Path) -> str:
    """The checkpoint prefix ``path`` designates.

    ``path`` is a prefix, its ``.index`` file, a directory holding a ``checkpoint`` file (or one
    ``*.index``), or a SavedModel directory (its ``variables/variables``).

    Raises:
        ImportError_: nothing there looks like a checkpoint.
    """
    import tensorflow as tf

    if path.suffix == ".index" and path.is_file():
        return str(path.with_suffix(""))
    if path.is_dir():
        saved = path / "variables" / "variables"
        if saved.with_suffix(".index").is_file():
            return str(saved)
        latest = tf.train.latest_checkpoint(str(path))
        if latest:
            return latest
        indexes = sorted(path.glob("*.index"))
        if len(indexes) == 1:
            return str(indexes[0].with_suffix(""))
        raise ImportError_(f"'{path}': no TensorFlow checkpoint here (no 'checkpoint' file, no single *.index)")
    if Path(str(path) + ".index").is_file():
        return str(path)
    raise ImportError_(
        f"'{path}': not a TensorFlow checkpoint prefix (no '{path.name}.index'), directory or SavedModel"
    )


def read_variables(path: Path) -> list[CheckpointVariable]:
    """Every variable a checkpoint holds, with its dtype and shape (tensor data is not read).

    Raises:
        ImportError_: the path is no readable checkpoint.
    """
    import tensorflow as tf
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    prefix = checkpoint_prefix(path)
    try:
        reader = tf.train.load_checkpoint(prefix)
    except Exception as exc:  # TensorFlow raises various errors for a damaged bundle
        raise ImportError_(f"'{path}': cannot read the TensorFlow checkpoint: {str(exc).splitlines()[0]}") from None
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    names = {key: key for key in shapes}
    if _OBJECT_GRAPH_KEY in shapes:  # an object-based (TF2) checkpoint: keys are object paths
        graph = trackable_object_graph_pb2.TrackableObjectGraph()
        graph.ParseFromString(reader.get_tensor(_OBJECT_GRAPH_KEY))
        for node in graph.nodes:
            for attribute in node.attributes:
                if attribute.full_name and attribute.checkpoint_key in names:
                    names[attribute.checkpoint_key] = attribute.full_name
    return [
        CheckpointVariable(names[key], dtypes[key].as_datatype_enum, tuple(int(d) for d in shapes[key]))
        for key in sorted(shapes)
        if key != _OBJECT_GRAPH_KEY
    ]


def _fits(variable: CheckpointVariable, dtype: int | None, shape: PartialShape) -> bool:
    if dtype is not None and variable.dtype != dtype:
        return False
    if shape is None:
        return True
    if len(shape) != len(variable.shape):
        return False
    return all(d is None or d == v for d, v in zip(shape, variable.shape, strict=True))


def _unique(candidates: Iterable[tuple[int, tuple[int, ...]]]) -> tuple[int, tuple[int, ...]] | None:
    found = set(candidates)
    return found.pop() if len(found) == 1 else None


def match_variables(
    variables: Sequence[CheckpointVariable],
    unresolved: Mapping[str, tuple[int | None, PartialShape]],
    recovered: Mapping[str, tuple[int, tuple[int, ...]]],
) -> dict[str, tuple[int, tuple[int, ...], str]]:
    """Checkpoint shapes forced for ``unresolved`` placeholders.

    Args:
        variables: the checkpoint's variables (:func:`read_variables`).
        unresolved: placeholder -> (dtype or ``None``, partial shape) of those still unknown.
        recovered: placeholder -> (dtype, shape) of those known (from the graph or the checkpoint).

    Returns:
        placeholder -> (dtype, shape, ``"shape"`` or ``"elimination"``) for each one resolved.
    """
    out: dict[str, tuple[int, tuple[int, ...], str]] = {}
    for name, (dtype, shape) in unresolved.items():
        forced = _unique((v.dtype, v.shape) for v in variables if _fits(v, dtype, shape))
        if forced is not None:
            out[name] = (*forced, "shape")
    if out:
        return out
    left = Counter((v.dtype, v.shape) for v in variables)
    for known in recovered.values():
        if left[known] <= 0:  # a recovered variable the checkpoint lacks: no one-to-one correspondence
            return out
        left[known] -= 1
    for name, (dtype, shape) in unresolved.items():
        pool = [key for key, count in left.items() if count > 0]
        forced = _unique((d, s) for d, s in pool if _fits(CheckpointVariable("", d, s), dtype, shape))
        if forced is not None:
            out[name] = (*forced, "elimination")
            left[forced] -= 1
    return out
