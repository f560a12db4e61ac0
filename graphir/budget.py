"""Memory budgets no placement can meet: nodes and tensors larger than every device.

A node whose own memory (its ``mem`` annotation: persistent + activation + temporary bytes; without
``mem``, the bytes of its results) exceeds the memory of every device of the cluster cannot be
placed anywhere without running out of memory, whatever the algorithm. :func:`check_node_budgets`
refuses such a module with one line naming the node, its size and the largest device; placement
calls it before searching. ``graphir-opt --allow-oom`` (the :data:`ALLOW_OOM` context variable)
turns the refusal off, so an impossible graph can still be placed and simulated for analysis (the
simulator then reports the OOM).

:func:`oversized_values` lists the tensors larger than any device, which ``--emit=summary`` flags.
"""

from __future__ import annotations

import contextvars

import numpy as np

from graphir.annotations import Mem
from graphir.errors import Location, PassError
from graphir.ir import Module, Node, Value

ALLOW_OOM: contextvars.ContextVar[bool] = contextvars.ContextVar("graphir_allow_oom", default=False)
"""Set by ``graphir-opt --allow-oom``: :func:`check_node_budgets` then accepts impossible nodes."""

_UNITS = (("EiB", 1 << 60), ("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def human_bytes(count: int) -> str:
    """``3.55 PiB (4000000000000000 B)``: two decimals in the largest binary unit, then the exact count."""
    for unit, size in _UNITS:
        if count >= size:
            return f"{count / size:.2f} {unit} ({count} B)"
    return f"{count} B"


def node_bytes(node: Node) -> int:
    """The memory ``node`` needs on its device by itself: ``mem`` total, else its results' bytes."""
    return _node_bytes(node, node.mem)


def _node_bytes(node: Node, mem: Mem | None) -> int:
    """:func:`node_bytes` of ``node`` whose ``mem`` annotation is ``mem``."""
    if mem is not None:
        return mem.persistent + mem.activation + mem.temporary
    return sum(value.nbytes for value in node.outputs)


def largest_device_memory(module: Module) -> tuple[str, int]:
    """Name and memory of the cluster's largest device (the first one on a tie)."""
    best = max(module.cluster.devices, key=lambda device: device.memory)
    return best.name, best.memory


def check_node_budgets(module: Module, allow_oom: bool | None = None) -> None:
    """Refuse a module in which some node alone needs more memory than every device has.

    Args:
        module: the module about to be placed.
        allow_oom: accept such nodes anyway; ``None`` reads :data:`ALLOW_OOM` (``--allow-oom``).

    Raises:
        PassError: one line naming the first such node (topological order), its bytes and the
            largest device, at the node's location.
    """
    if (ALLOW_OOM.get() if allow_oom is None else allow_oom) or not module.cluster.devices:
        return
    device, capacity = largest_device_memory(module)
    index = module.graph.index()
    # The `mem` annotations from the index's list (one read of each node's table, shared with the
    # placers) rather than a property call per node.
    for node, mem in zip(index.nodes, index.annotation_list("mem"), strict=True):
        need = _node_bytes(node, mem)
        if need <= capacity:
            continue
        loc = node.loc if node.loc is not None else Location(node=node.name)
        raise PassError(
            f"node '{node.name}' ({node.op}) needs {human_bytes(need)} of memory by itself, more than any device: "
            f"the largest, '{device}', has {human_bytes(capacity)} (--allow-oom places it anyway)",
            loc,
        )


def oversized_values(module: Module) -> list[Value]:
    """Inputs, constants and results larger than every device of the cluster, largest first."""
    if not module.cluster.devices:
        return []
    _, capacity = largest_device_memory(module)
    graph = module.graph
    # Node results: the index's value_bytes are their nbytes_or(0), compared in one array operation.
    index = graph.index()
    found = [index.values[x] for x in np.flatnonzero(index.value_bytes > capacity).tolist()]
    found += [value for value in (*graph.inputs, *graph.constants) if value.type.nbytes_or(0) > capacity]
    return sorted(found, key=lambda value: (-value.nbytes, value.name))
