"""``--emit=json``: the neutral cost-graph interchange file.

Schema (stable keys; times in seconds, sizes in bytes)::

    {"graph": str,
     "nodes": [{"id", "op", "time", "times", "mem", "out_bytes", "group", "device", "order"}],
     "edges": [{"src", "dst", "bytes", "control"}],
     "devices": [{"name", "kind", "memory"}],
     "links": [{"src", "dst", "latency", "bandwidth"}],
     "makespan": float | null}

Node ids are the node names (unique and stable across runs); nodes appear in the graph index's
topological order. ``time`` is the time on the first device of the cluster (for heterogeneous
clusters), ``times`` the time on every device; both are null when the node has no cost. An edge
joins two nodes and carries the total bytes of the distinct values flowing between them;
``control`` is true when the two are joined only by control dependencies (zero bytes).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from graphir.emit import register_emitter
from graphir.ir import Module


def cost_graph(module: Module) -> dict[str, Any]:
    """The cost graph of ``module`` as plain JSON-ready data."""
    graph = module.graph
    index = graph.index()
    cluster = module.cluster
    out_bytes = index.out_bytes().tolist()
    nodes: list[dict[str, Any]] = []
    kinds = [d.kind for d in cluster.devices]
    first_kind = kinds[0] if kinds else None
    makespan: float | None = None
    for u, node in enumerate(index.nodes):
        cost, mem = node.cost, node.mem
        times = None if cost is None else {d.name: cost.time(d.kind) for d in cluster.devices}
        finish = node.finish
        if finish is not None and (makespan is None or finish > makespan):
            makespan = finish
        nodes.append(
            {
                "id": node.name,
                "op": node.op,
                "time": None if cost is None else cost.time(first_kind),
                "times": times,
                "mem": None if mem is None else mem.persistent,
                "out_bytes": out_bytes[u],
                "group": node.group,
                "device": node.device,
                "order": node.order,
            }
        )
    edges: list[dict[str, Any]] = []
    if index.num_edges:
        pair = index.edge_src * max(index.num_nodes, 1) + index.edge_dst
        pairs, inverse = np.unique(pair, return_inverse=True)
        totals = np.bincount(inverse.reshape(-1), weights=index.edge_bytes, minlength=len(pairs)).astype(np.int64)
        data_edges = np.bincount(inverse.reshape(-1), weights=~index.edge_control, minlength=len(pairs))
        names = [node.name for node in index.nodes]
        n = max(index.num_nodes, 1)
        for key, total, data in zip(pairs.tolist(), totals.tolist(), data_edges.tolist(), strict=True):
            edges.append({"src": names[key // n], "dst": names[key % n], "bytes": total, "control": data == 0})
    return {
        "graph": module.name,
        "nodes": nodes,
        "edges": edges,
        "devices": [{"name": d.name, "kind": d.kind, "memory": d.memory} for d in cluster.devices],
        "links": [
            {"src": link.src, "dst": link.dst, "latency": link.latency, "bandwidth": link.bandwidth}
            for link in cluster.links
        ],
        "makespan": makespan,
    }


@register_emitter("json", "neutral JSON cost graph (nodes, edges, devices, links)")
def export_json(module: Module) -> str:
    """The cost graph as compact, deterministic JSON text (one trailing newline)."""
    return json.dumps(cost_graph(module), separators=(",", ":"), allow_nan=False) + "\n"
