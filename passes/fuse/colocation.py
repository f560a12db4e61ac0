"""Colocation fusion: every ``colocate`` class becomes one group (TF semantics, Celeritas §6.1).

All coarse nodes holding a member of one class are merged (a coarse node holding members of
two classes joins them). Merging a class can create a loop when a path leaves the class and
comes back (``a -> x -> b`` with ``a, b`` colocated and ``x`` not). The finest acyclic grouping that
keeps each class together merges every strongly connected component of the merged graph, so the
pass condenses those components (Tarjan, O(V+E)): a node on such a path joins the class's group.
The statistics count these ``absorbed`` nodes.
"""

from __future__ import annotations

import numpy as np

from graphir.passes.fuse.common import CoarseGraph
from graphir.unionfind import DisjointSets


def strongly_connected(num_nodes: int, succ_offsets: np.ndarray, succ: np.ndarray) -> np.ndarray:
    """Component id per node (iterative Tarjan, O(V+E)); ids are in reverse topological order."""
    offsets = succ_offsets.tolist()
    targets = succ.tolist()
    index = [-1] * num_nodes
    low = [0] * num_nodes
    on_stack = [False] * num_nodes
    component = [-1] * num_nodes
    stack: list[int] = []
    counter = 0
    components = 0
    for root in range(num_nodes):
        if index[root] >= 0:
            continue
        work = [(root, offsets[root])]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            u, k = work[-1]
            if k < offsets[u + 1]:
                work[-1] = (u, k + 1)
                v = targets[k]
                if index[v] < 0:
                    index[v] = low[v] = counter
                    counter += 1
                    stack.append(v)
                    on_stack[v] = True
                    work.append((v, offsets[v]))
                elif on_stack[v] and index[v] < low[u]:
                    low[u] = index[v]
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                if low[u] < low[parent]:
                    low[parent] = low[u]
            if low[u] == index[u]:
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    component[w] = components
                    if w == u:
                        break
                components += 1
    return np.asarray(component, dtype=np.int64)


def fuse_colocation(graph: CoarseGraph, classes: list[list[int]]) -> tuple[np.ndarray, dict[str, int | float | str]]:
    """Merge the coarse nodes of each class, then condense cycles.

    Args:
        graph: the coarse graph.
        classes: per colocation class, the coarse nodes holding its members.

    Returns:
        A label per coarse node and statistics (classes, absorbed nodes).
    """
    sets: DisjointSets[int] = DisjointSets()
    in_class = np.zeros(graph.num_nodes, dtype=bool)
    for members in classes:
        in_class[members] = True
        for m in members[1:]:
            sets.union(int(members[0]), int(m))
    merged = np.asarray([sets.find(x) if x in sets else x for x in range(graph.num_nodes)], dtype=np.int64)
    _, dense = np.unique(merged, return_inverse=True)
    dense = dense.reshape(-1)
    contracted = graph.contract(dense)
    component = strongly_connected(contracted.num_nodes, contracted.succ_offsets, contracted.succ)
    labels = component[dense]
    sizes = np.bincount(labels, minlength=int(labels.max()) + 1 if len(labels) else 0)
    absorbed = int(np.sum((sizes[labels] > 1) & ~in_class))
    return labels, {"classes": len(classes), "absorbed": absorbed}
