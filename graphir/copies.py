"""Names of the copies a replicating rewrite makes (data parallelism, micro-batches), and its metadata keys.

``data-parallel{replicas=D microbatches=M}`` and ``microbatch{n=M}``
(:mod:`graphir.passes.transform.replicate`) copy a training step's forward and backward pass; copy
``(r, m)`` of node (or value) ``x`` is named by :func:`copy_name`, and :func:`copy_of` reads a name
back. With mirrored variables (``data-parallel{sync=allreduce}``) every replica also holds its own
copy of the shared part (variables, their reads and updates, the gradients' all-reduce):
:func:`mirror_name` names replica ``r``'s copy ``mirror<r>/x`` and :func:`mirror_of` reads it back.
They live in the IR core because the rewrites (passes), the placers that put each copy on a device
and the TensorFlow check that feeds each replica its slice of the batch (backends) all read them.
"""

from __future__ import annotations

__all__ = [
    "MICROBATCHES_METADATA",
    "REPLICAS_METADATA",
    "copy_name",
    "copy_of",
    "mirror_name",
    "mirror_of",
    "original_name",
    "replica_name",
    "replica_of",
]

REPLICAS_METADATA = "data_parallel_replicas"
"""Module metadata key holding the number of replicas of a data-parallel graph."""
MICROBATCHES_METADATA = "microbatches"
"""Module metadata key holding the number of micro-batches per replica (gradient accumulation)."""


def replica_name(name: str, replica: int) -> str:
    """The name of replica ``replica``'s copy of node or value ``name``."""
    return f"replica{replica}/{name}"


def copy_name(name: str, replica: int, microbatch: int, replicas: int, microbatches: int) -> str:
    """The name of copy ``(replica, microbatch)`` of node or value ``name`` in a ``replicas x microbatches`` graph.

    ``replica<r>/x`` when there is one micro-batch (data parallelism as before), ``mb<m>/x`` with one
    replica and several micro-batches, ``replica<r>/mb<m>/x`` with both.
    """
    if microbatches == 1:
        return replica_name(name, replica)
    if replicas == 1:
        return f"mb{microbatch}/{name}"
    return f"replica{replica}/mb{microbatch}/{name}"


def _prefixed(name: str, word: str) -> tuple[int, str] | None:
    if not name.startswith(word):
        return None
    head, sep, rest = name.partition("/")
    digits = head[len(word) :]
    return (int(digits), rest) if sep and digits.isdigit() else None


def copy_of(name: str) -> tuple[int, int, str]:
    """``(replica or 0, micro-batch or 0, original name)`` of a copy's name; ``(-1, -1, name)`` for a shared node.

    The inverse of :func:`copy_name`: ``replica2/mb1/x`` -> ``(2, 1, "x")``, ``mb3/x`` -> ``(0, 3, "x")``,
    ``replica1/x`` -> ``(1, 0, "x")``; aggregation nodes (``dp/...``) and other shared nodes -> ``(-1, -1, name)``.
    """
    replica = _prefixed(name, "replica")
    rest = name
    r = 0
    if replica is not None:
        r, rest = replica
    micro = _prefixed(rest, "mb")
    if micro is not None:
        return r, micro[0], micro[1]
    if replica is not None:
        return r, 0, rest
    return -1, -1, name


def replica_of(name: str) -> int:
    """The replica a node name belongs to (``replica3/x`` -> 3), or -1 for a shared node."""
    if not name.startswith("replica"):
        return -1
    head, sep, _ = name.partition("/")
    digits = head[len("replica") :]
    return int(digits) if sep and digits.isdigit() else -1


def mirror_name(name: str, replica: int) -> str:
    """The name of replica ``replica``'s mirror of shared node or value ``name`` (``mirror<r>/x``)."""
    return f"mirror{replica}/{name}"


def mirror_of(name: str) -> tuple[int, str]:
    """``(replica, original name)`` of a mirror's name (``mirror2/x`` -> ``(2, "x")``); ``(-1, name)`` otherwise."""
    found = _prefixed(name, "mirror")
    return found if found is not None else (-1, name)


def original_name(name: str) -> str:
    """The model's name of a copy or a mirror (``replica1/mb0/x``, ``mirror1/x`` -> ``x``)."""
    return copy_of(mirror_of(name)[1])[2]
