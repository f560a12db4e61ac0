"""``--emit=summary``: a readable overview of a module.

Counts of nodes, edges and values, op types (most frequent first), parameter (constant) bytes,
activation bytes, and when annotated: total and critical-path compute time (and per device kind on
heterogeneous clusters), the number of ops the analytical cost model can only estimate from their
bytes (its fallback), persistent memory, groups, devices. Tensors larger than every device of the
cluster are flagged (``oversized:``), since no placement can hold them.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from graphir.attributes import format_bytes
from graphir.budget import human_bytes, largest_device_memory, oversized_values
from graphir.emit import register_emitter
from graphir.importers.tf_attrs import is_variable_op
from graphir.importers.tf_attrs import persistent_bytes as variable_bytes
from graphir.ir import Module
from graphir.ops import fallback_count
from graphir.paths import longest_path


def _human_duration(seconds: float) -> str:
    """Four significant digits with a unit (the exact value is in the .gir/JSON output)."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.4g} {unit}"
    return f"{seconds * 1e9:.4g} ns" if seconds else "0 s"


def _human_bytes(count: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.2f} {unit} ({count} B)"
    return f"{count} B"


@register_emitter("summary", "human-readable overview: counts, op types, bytes, costs")
def summarize(module: Module) -> str:
    """The summary text."""
    graph = module.graph
    index = graph.index()
    # Parameters: weights held as constants (ONNX initializers, large TF Consts) plus TF variables
    # (VarHandleOp dtype x shape; in training graphs the optimizer slots are variables too).
    # Only nodes of a TF variable op can hold one (variable_bytes is 0 for the others): the op
    # is looked at once per distinct op, not once per node.
    ops = Counter(node.op for node in index.nodes)
    variable_ops = {op for op in ops if is_variable_op(op)}
    variables = [node for node in index.nodes if node.op in variable_ops] if variable_ops else []
    params = sum(v.nbytes for v in graph.constants) + sum(variable_bytes(node) for node in variables)
    activations = int(index.value_bytes.sum())
    lines = [
        f"module @{module.name} (graph @{graph.name})",
        f"  cluster:          {module.cluster.spec} ({len(module.cluster.devices)} devices)",
        f"  nodes:            {index.num_nodes}",
        f"  edges:            {index.num_edges}",
        f"  inputs:           {len(graph.inputs)}",
        f"  outputs:          {len(graph.outputs)}",
        f"  constants:        {len(graph.constants)}",
        f"  parameter bytes:  {_human_bytes(params)}",
        f"  activation bytes: {_human_bytes(activations)}",
    ]
    oversized = oversized_values(module)
    if oversized:
        device, capacity = largest_device_memory(module)
        names = ", ".join(f"'{v.name}' {human_bytes(v.nbytes)}" for v in oversized[:3])
        more = f", ... and {len(oversized) - 3} more" if len(oversized) > 3 else ""
        lines.append(
            f"  oversized:        {len(oversized)} tensor(s) larger than any device (largest device '{device}': "
            f"{human_bytes(capacity)}): {names}{more}"
        )
    times = index.times()
    costed = int(np.count_nonzero(~np.isnan(times)))
    if costed:
        clean = np.nan_to_num(times, nan=0.0)
        critical = longest_path(clean, index.pred_offsets, index.pred)
        lines.append(f"  costed nodes:     {costed}/{index.num_nodes}")
        lines.append(f"  total compute:    {_human_duration(float(clean.sum()))}")
        lines.append(f"  critical path:    {_human_duration(float(critical.max()))}")
        kinds = module.cluster.kinds
        if len(kinds) > 1:
            per_kind = (f"{k} {_human_duration(float(np.nansum(index.times(k))))}" for k in kinds)
            lines.append("  compute per kind: " + ", ".join(per_kind))
        fallback = fallback_count(index.nodes)
        lines.append(f"  fallback-costed:  {fallback} ops (no analytical estimator: bytes-only estimate)")
    persistent = int(index.persistent_bytes().sum())
    if persistent:
        lines.append(f"  persistent mem:   {format_bytes(persistent)}")
    groups = index.groups()
    if (groups >= 0).any():
        lines.append(f"  groups:           {index.quotient().num_groups} (quotient nodes)")
    placed = Counter(device for device in index.annotation_list("device") if device is not None)
    if placed:
        lines.append("  placement:        " + ", ".join(f"{d}: {c}" for d, c in sorted(placed.items())))
    lines.append(f"  op types ({len(ops)}):")
    for op, count in sorted(ops.items(), key=lambda item: (-item[1], item[0])):
        lines.append(f"    {count:7d}  {op}")
    return "\n".join(lines) + "\n"
