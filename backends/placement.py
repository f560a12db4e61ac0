"""``--emit=placement``: the placement as ``{node_id: device}`` JSON.

The file ``place{algo=file path=P.json}`` reads (see ``passes/place/__init__.py``), so a placement can be
saved, edited, or produced by another tool and scored with graphir's simulator::

    graphir-opt model.onnx --passes='place{algo=m-etf}' --emit=placement -o p.json
    graphir-opt model.onnx --passes='place{algo=file path=p.json},simulate' --stats

Node ids are the node names (unique and stable across runs); keys are sorted and the JSON is
indented one entry per line, so the output is byte-identical across runs and diffs well. Every
node must carry a ``device`` annotation.
"""

from __future__ import annotations

import json

from graphir.emit import register_emitter
from graphir.errors import BackendError
from graphir.ir import Module


def placement_map(module: Module) -> dict[str, str]:
    """``{node name: device name}`` for every node of ``module``.

    Raises:
        BackendError: a node has no ``device`` annotation.
    """
    mapping: dict[str, str] = {}
    for node in module.graph.index().nodes:
        if node.device is None:
            raise BackendError(f"--emit=placement: node '{node.name}' has no device: run a 'place' pass first")
        mapping[node.name] = node.device
    return mapping


@register_emitter("placement", "placement JSON {node_id: device} (read back by place{algo=file path=...})")
def emit_placement(module: Module) -> str:
    """The placement as deterministic JSON text (sorted keys, one trailing newline)."""
    return json.dumps(placement_map(module), sort_keys=True, indent=2) + "\n"
