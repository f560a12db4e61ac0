"""Graphviz DOT of the (quotient) graph, nodes filled with the colour of their device.

One DOT node per coarse node of the quotient graph (:meth:`graphir.index.GraphIndex.quotient`: a
``group`` is one node, an ungrouped node stays alone), named ``q<N>`` in the quotient's numbering.
A singleton shows its node name and op, a group ``group <id>`` and its member count. The fill is
the device's colour (the :data:`~graphir.backends.report.timeline.PALETTE` in cluster order,
cycling), white for unplaced nodes, and light grey with the label ``mixed`` when a group's members
sit on several devices. Edges carry the bytes that cross them; edges between devices are drawn
bold red, edges that carry only control dependencies dashed. A legend cluster lists the devices.
The text is deterministic: nodes and edges in quotient order, no layout positions.
"""

from __future__ import annotations

from graphir.backends.report.table import format_size
from graphir.ir import Module

DEVICE_COLOURS = (
    "#a6cee3",
    "#b2df8a",
    "#fb9a99",
    "#fdbf6f",
    "#cab2d6",
    "#ffff99",
    "#1f78b4",
    "#33a02c",
    "#e31a1c",
    "#ff7f00",
    "#6a3d9a",
    "#b15928",
)
"""Fill colours per device, in cluster order (ColorBrewer Paired, light shades first)."""
UNPLACED_COLOUR = "#ffffff"
MIXED_COLOUR = "#d9d9d9"


def _quote(text: str) -> str:
    """A DOT double-quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def device_colour(position: int) -> str:
    """Fill colour of the device at ``position`` in cluster order."""
    return DEVICE_COLOURS[position % len(DEVICE_COLOURS)]


def quotient_dot(module: Module) -> str:
    """The quotient graph of ``module`` as DOT text."""
    index = module.graph.index()
    quotient = index.quotient()
    names = module.cluster.device_names
    position = {name: k for k, name in enumerate(names)}
    lines = [
        f"digraph {_quote(module.name)} {{",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=8];',
    ]
    coarse_device: list[str | None] = []
    for g, members in enumerate(quotient.members()):
        devices = sorted({index.nodes[u].device or "" for u in members})
        first = index.nodes[members[0]]
        if len(members) == 1:
            label = f"{first.name}\n{first.op}"
        else:
            label = f"group {int(quotient.group_ids[g])}\n{len(members)} nodes"
        if devices == [""]:
            colour, placed = UNPLACED_COLOUR, None
        elif len(devices) > 1:
            colour, placed, label = MIXED_COLOUR, None, label + "\nmixed"
        else:
            placed = devices[0]
            colour = device_colour(position[placed]) if placed in position else UNPLACED_COLOUR
            label += f"\n@{placed}"
        coarse_device.append(placed)
        lines.append(f"  q{g} [label={_quote(label)}, fillcolor={_quote(colour)}];")
    for src, dst, nbytes in zip(
        quotient.edge_src.tolist(), quotient.edge_dst.tolist(), quotient.edge_bytes.tolist(), strict=True
    ):
        attributes = []
        if nbytes:
            attributes.append(f"label={_quote(format_size(nbytes))}")
        else:
            attributes.append("style=dashed")
        if (
            coarse_device[src] is not None
            and coarse_device[dst] is not None
            and coarse_device[src] != coarse_device[dst]
        ):
            attributes += ['color="#d62728"', "penwidth=2"]
        lines.append(f"  q{src} -> q{dst} [{', '.join(attributes)}];")
    lines.append("  subgraph cluster_legend {")
    lines.append('    label="devices"; fontname="Helvetica"; fontsize=10;')
    for k, name in enumerate(names):
        lines.append(f"    legend_{k} [label={_quote(name)}, fillcolor={_quote(device_colour(k))}];")
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"
