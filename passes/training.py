"""Forward/backward pairing of a training graph: which forward op (and layer) every gradient belongs to.

A training step (the zoo's ``*_train`` GraphDefs: forward, ``tf.GradientTape`` backward, one
``ResourceApplyAdam`` per variable) is three graphs in one: the forward pass, its gradient, and the
optimizer's updates. Placers that split the topological order without knowing this put a layer's
forward on one device and its backward on another, and every activation saved for backward crosses
devices (issue 37). TensorFlow answers with ``colocate_gradients_with_ops`` (the gradient of op ``f``
is created in ``f``'s colocation scope); Baechi (Jeon et al., SoCC 2020, §4.4) places the forward ops
and colocates each gradient with its forward op. A GraphDef no longer says which op a gradient was
created for, so :func:`training_structure` recovers it **from the graph's structure**, in O(V+E):

1. **State.** Nodes producing ``resource`` values are variable handles; a node taking a handle is a
   *read* when it has results (``ReadVariableOp``, ``ResourceGather``) and a *write* when it has none
   (``ResourceApplyAdam``, ``AssignVariableOp``).
2. **Forward**: the data ancestors of the graph's outputs (the loss; control edges are ignored, so
   the ``tf.identity(loss)`` that waits on the updates does not pull them in) that depend on data or
   state (a graph input, a placeholder, a read), reads and handles excepted. Constant subgraphs
   (shape arithmetic, masks of constants) are ``OTHER``.
3. **Backward**: nodes that are data descendants of forward nodes and data ancestors of a write,
   not forward themselves: the gradient computation. The graph is a training graph when some write
   consumes a backward value (``None`` otherwise).
4. **Optimizer**: the writes that consume backward values, and the backward nodes that also
   depend on a variable forward never reads (an optimizer slot: Keras' element-wise Adam); the
   other writes (``beta1_power`` updates, a seed generator's state) and the nodes that depend on
   state alone are ``STATE``, with handles, reads and slots.
5. **Anchors.** A forward op is its own anchor. A variable's anchor is the first forward op that
   consumes one of its reads; its handles and reads share it, and so does the write that updates
   it (the first of the write's handles that forward reads) and the write's other handles (slots).
   A backward op that reads a forward value (a saved activation, or a weight) is anchored to a
   forward op touching that value: the one named by the **name hint** when the hint is confirmed by
   the structure (the backward op's name, without its ``gradient_tape/`` or ``gradients/`` scope,
   starts with the forward op's name, and that op produces or consumes a value the backward op
   reads: TensorFlow names gradient ops under their forward op's scope), else the last forward
   consumer of those values (every forward consumer already holds a copy of the value, so any of
   them is a device where reading it costs nothing). A backward or optimizer op that reads no forward
   value takes the largest anchor of its backward successors (the gradient it helps compute), else
   of its predecessors; a write with no forward-read variable takes its predecessors'.
6. **Layers.** Forward ops are grouped by **name scope** (the hint): below the scope most forward
   ops share (``gpt_1`` for a Keras model), each next scope component (``l0_self_mha_1``) is one
   layer, numbered by first appearance in topological order. A forward op's layer is the largest
   of its scope's and its forward predecessors', so layers never decrease along a forward edge (an
   op with no scope of its own, a residual ``Add``, joins its predecessors'; one with neither takes
   its successors' smallest). Every other node takes the layer of its anchor.
7. **Copies.** In a micro-batched or replicated graph (``mb3/x``, ``replica1/x``:
   :func:`graphir.copies.copy_of`) the name hints and scopes are read on the
   original names, so every copy of a layer's ops has that layer's number, and a gradient's hint
   names a forward op of its own copy.

Known limits: an activation read by several layers' gradients without a confirming name (DenseNet's
concatenations in an unnamed graph) anchors to its last forward consumer; gradient ops that only
touch an optimizer slot's arithmetic count as optimizer, the element-wise ops of an update that only
touch the gradient count as backward.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from graphir.copies import original_name
from graphir.ir import Module, Node
from graphir.types import DType

__all__ = [
    "BACKWARD",
    "FORWARD",
    "OPTIMIZER",
    "OTHER",
    "ROLE_NAMES",
    "STATE",
    "TrainingStructure",
    "training_structure",
]

FORWARD, BACKWARD, OPTIMIZER, STATE, OTHER = range(5)
"""Roles of a training graph's nodes (STATE: variable handles, reads, optimizer slots, step counters)."""

ROLE_NAMES = ("forward", "backward", "optimizer", "state", "other")
"""The name of each role, by role number."""

GRADIENT_SCOPES = ("gradient_tape", "gradients")
"""First name-scope components under which TensorFlow creates gradient ops (the name hint)."""

_CONSTANT_OPS = frozenset({"Const", "Constant", "HostConst"})
"""Ops (without dialect) whose result is fixed: the sources of constant subgraphs."""


@dataclasses.dataclass(frozen=True)
class TrainingStructure:
    """The forward/backward/optimizer structure of a training graph.

    Attributes:
        nodes: ``module.graph.index().nodes`` (topological); the arrays below are per node of it.
        role: int8 role per node (:data:`FORWARD` ... :data:`OTHER`).
        anchor: int64 index of the forward node each node belongs to (itself for forward), -1 none.
        layer: int64 layer number ``0..num_layers-1`` (forward topological order); every node with
            an anchor has one; -1 only where nothing ties the node to a layer.
        num_layers: number of layers.
    """

    nodes: list[Node]
    role: np.ndarray
    anchor: np.ndarray
    layer: np.ndarray
    num_layers: int

    def counts(self) -> dict[str, int]:
        """Nodes per role name."""
        tally = np.bincount(self.role.astype(np.int64), minlength=len(ROLE_NAMES))
        return {name: int(tally[k]) for k, name in enumerate(ROLE_NAMES)}


def _copy_prefix(name: str) -> tuple[str, str]:
    """``(copy prefix, original name)`` of a node of a micro-batched or replicated graph (``("", name)`` otherwise).

    The copies of one op (``mb3/x``, ``replica1/mb0/x``: :func:`graphir.copies.copy_of`; a
    replica's mirror ``mirror1/x``) are one op of the model: the name hints and the layers read the
    original name.
    """
    original = original_name(name)
    return name[: len(name) - len(original)], original


def _gradient_hint(name: str) -> str | None:
    """The name a gradient op's forward op would have as a prefix, without the gradient scope; None otherwise."""
    head, _, rest = name.partition("/")
    if not rest:
        return None
    if head in GRADIENT_SCOPES or head.startswith("gradients_"):
        return rest
    return None


def _layer_keys(names: list[str]) -> list[tuple[str, ...] | None]:
    """Per forward op name, its layer's scope key (see the module docstring, step 6); None: no scope of its own."""
    scopes = [tuple(name.split("/")[:-1]) for name in names]
    prefix: tuple[str, ...] = ()
    total = len(scopes)
    while True:
        depth = len(prefix)
        tally: dict[str, int] = {}
        for scope in scopes:
            if len(scope) > depth and scope[:depth] == prefix:
                tally[scope[depth]] = tally.get(scope[depth], 0) + 1
        if not tally:
            break
        component, count = max(tally.items(), key=lambda item: item[1])
        if 2 * count <= total:
            break
        prefix = (*prefix, component)
    keys: list[tuple[str, ...] | None] = []
    for scope in scopes:
        common = 0
        while common < len(prefix) and common < len(scope) and scope[common] == prefix[common]:
            common += 1
        keys.append(scope[: common + 1] if len(scope) > common else None)
    return keys


def training_structure(module: Module) -> TrainingStructure | None:
    """The forward/backward pairing of ``module``'s training graph (O(V+E); module docstring).

    Returns:
        The structure, or ``None`` when the graph is not a training graph (no write consumes a
        gradient: no backward part found).
    """
    graph = module.graph
    index = graph.index()
    nodes = index.nodes
    n = len(nodes)
    if n == 0:
        return None
    num_values = len(index.values)
    value_resource = np.fromiter(
        (getattr(value.type, "dtype", None) is DType.RESOURCE for value in index.values), dtype=bool, count=num_values
    )
    # Resource values without a producer (captured variables as graph inputs) join the handles' numbering.
    extra_resource: dict[int, int] = {}
    node_resources: list[list[int]] = [[] for _ in range(n)]  # resource "variables" each node takes
    input_fed = np.zeros(n, dtype=bool)  # consumes a graph input
    graph_inputs = {id(value) for value in graph.inputs}
    for u, node in enumerate(nodes):
        for value in node.inputs:
            if value.producer is None:
                if getattr(value.type, "dtype", None) is DType.RESOURCE:
                    key = extra_resource.setdefault(id(value), num_values + len(extra_resource))
                    node_resources[u].append(key)
                elif id(value) in graph_inputs:
                    input_fed[u] = True
    data = ~index.edge_control
    src = index.edge_src[data]
    dst = index.edge_dst[data]
    val = index.edge_value[data]
    res_edge = value_resource[val] if len(val) else np.zeros(0, dtype=bool)
    for s, d, x in zip(src[res_edge].tolist(), dst[res_edge].tolist(), val[res_edge].tolist(), strict=True):
        del s
        node_resources[d].append(x)
    num_outputs = np.bincount(index.value_producer, minlength=n)
    handle = np.zeros(n, dtype=bool)
    if value_resource.any():
        handle[index.value_producer[value_resource]] = True
    takes_resource = np.fromiter((bool(r) for r in node_resources), dtype=bool, count=n)
    read = takes_resource & ~handle & (num_outputs > 0)
    write = takes_resource & ~handle & (num_outputs == 0)
    if not write.any():
        return None

    src_l, dst_l = src.tolist(), dst.tolist()
    pred_lists: list[list[int]] = [[] for _ in range(n)]
    succ_lists: list[list[int]] = [[] for _ in range(n)]
    for s, d in zip(src_l, dst_l, strict=True):
        pred_lists[d].append(s)
        succ_lists[s].append(d)
    state_node = (handle | read | write).tolist()

    # Live: depends on data or state (a graph input, a placeholder-like source, a read).
    constant_source = [node.op.rsplit(".", 1)[-1] in _CONSTANT_OPS for node in nodes]
    live = [False] * n
    read_l = read.tolist()
    handle_l = handle.tolist()
    fed = input_fed.tolist()
    for u in range(n):
        if handle_l[u]:
            continue
        preds = pred_lists[u]
        if read_l[u] or fed[u] or (not preds and not constant_source[u] and not nodes[u].inputs):
            live[u] = True
            continue
        for p in preds:
            if live[p]:
                live[u] = True
                break

    # Forward: data ancestors of the graph outputs.
    to_output = [False] * n
    for value in graph.outputs:
        if value.producer is not None:
            to_output[value.producer._index_pos] = True
    for u in range(n - 1, -1, -1):
        if to_output[u]:
            continue
        for s in succ_lists[u]:
            if to_output[s]:
                to_output[u] = True
                break
    forward = [to_output[u] and live[u] and not state_node[u] for u in range(n)]
    if not any(forward):
        return None

    # Backward: descendants of forward, ancestors of a write.
    to_write = write.tolist()
    for u in range(n - 1, -1, -1):
        if to_write[u]:
            continue
        for s in succ_lists[u]:
            if to_write[s]:
                to_write[u] = True
                break
    # Variables forward reads, and its first forward reader (the variable's anchor).
    var_anchor: dict[int, int] = {}
    for u in range(n):
        if not read_l[u]:
            continue
        first = min((s for s in succ_lists[u] if forward[s]), default=-1)
        if first < 0:
            continue
        for r in node_resources[u]:
            known = var_anchor.get(r, -1)
            if known < 0 or first < known:
                var_anchor[r] = first
    # Slot-derived: depends on a variable forward never reads (an optimizer slot, a step counter).
    slot_derived = [False] * n
    for u in range(n):
        if read_l[u]:
            slot_derived[u] = any(r not in var_anchor for r in node_resources[u])
        elif live[u] and not forward[u] and not state_node[u]:
            slot_derived[u] = any(slot_derived[p] for p in pred_lists[u])
    after_forward = [False] * n
    for u in range(n):
        for p in pred_lists[u]:
            if forward[p] or after_forward[p]:
                after_forward[u] = True
                break
    candidate = [live[u] and to_write[u] and not forward[u] and not state_node[u] for u in range(n)]
    backward = [candidate[u] and after_forward[u] for u in range(n)]
    # A gradient op that reads only weights and constants (dX = dY_seed . W^T next to the loss)
    # joins the backward op it feeds, unless it depends on optimizer state.
    for u in range(n - 1, -1, -1):
        if candidate[u] and not backward[u] and not slot_derived[u]:
            backward[u] = any(backward[s] for s in succ_lists[u])
    write_l = write.tolist()
    if not any(write_l[d] and backward[s] for s, d in zip(src_l, dst_l, strict=True)):
        return None

    role = np.full(n, OTHER, dtype=np.int8)
    for u in range(n):
        if forward[u]:
            role[u] = FORWARD
        elif state_node[u]:
            role[u] = STATE
        elif backward[u]:
            role[u] = OPTIMIZER if slot_derived[u] else BACKWARD
        elif live[u] and to_write[u]:
            role[u] = STATE  # step counters: state arithmetic feeding a write
    role_l = role.tolist()
    for u in range(n):
        if write_l[u] and any(role_l[p] in (BACKWARD, OPTIMIZER) for p in pred_lists[u]):
            role[u] = OPTIMIZER
    role_l = role.tolist()

    anchor = [-1] * n
    for u in range(n):
        if forward[u]:
            anchor[u] = u
    for u in range(n):
        if write_l[u] and role_l[u] == OPTIMIZER:
            for r in node_resources[u]:
                if r in var_anchor:
                    anchor[u] = var_anchor[r]
                    break

    # Backward ops reading forward values: the name hint when the structure confirms it, else the
    # last forward consumer of the values read.
    last_consumer = np.full(num_values, -1, dtype=np.int64)
    forward_arr = np.asarray(forward, dtype=bool)
    into_forward = forward_arr[dst]
    if into_forward.any():
        np.maximum.at(last_consumer, val[into_forward], dst[into_forward])
    producer_is_forward = forward_arr[index.value_producer] if num_values else np.zeros(0, dtype=bool)
    last_consumer = np.where((last_consumer < 0) & producer_is_forward, index.value_producer, last_consumer).tolist()
    forward_inputs = {(d, x) for d, x in zip(dst[into_forward].tolist(), val[into_forward].tolist(), strict=True)}
    forward_by_name = {nodes[u].name: u for u in range(n) if forward[u]}
    value_producer = index.value_producer.tolist()
    in_val: list[list[int]] = [[] for _ in range(n)]
    for d, x in zip(dst_l, val.tolist(), strict=True):
        in_val[d].append(x)
    for u in range(n):
        if role_l[u] not in (BACKWARD, OPTIMIZER) or anchor[u] >= 0:
            continue
        touched = [
            x for x in in_val[u] if last_consumer[x] >= 0 and (forward[value_producer[x]] or read_l[value_producer[x]])
        ]
        if not touched:
            continue
        prefix, original = _copy_prefix(nodes[u].name)
        hint = _gradient_hint(original)
        chosen = -1
        if hint is not None:
            parts = hint.split("/")
            for cut in range(len(parts), 0, -1):
                f = forward_by_name.get(prefix + "/".join(parts[:cut]))
                if f is not None and any(value_producer[x] == f or (f, x) in forward_inputs for x in touched):
                    chosen = f
                    break
        anchor[u] = chosen if chosen >= 0 else max(last_consumer[x] for x in touched)

    # The rest of backward and optimizer: successors' anchors, then predecessors'.
    flows = [role_l[u] in (BACKWARD, OPTIMIZER) for u in range(n)]
    for u in range(n - 1, -1, -1):
        if flows[u] and anchor[u] < 0:
            anchor[u] = max((anchor[s] for s in succ_lists[u] if flows[s]), default=-1)
    for u in range(n):
        if flows[u] and anchor[u] < 0:
            anchor[u] = max((anchor[p] for p in pred_lists[u] if flows[p]), default=-1)
    # State writes (a seed generator's update) follow their variable; the state arithmetic feeding
    # them follows the write.
    for u in range(n):
        if write_l[u] and anchor[u] < 0:
            anchor[u] = next((var_anchor[r] for r in node_resources[u] if r in var_anchor), -1)
    for u in range(n - 1, -1, -1):
        if role_l[u] == STATE and not state_node[u] and anchor[u] < 0:
            anchor[u] = max((anchor[s] for s in succ_lists[u] if role_l[s] == STATE), default=-1)
    # Slots (variables forward never reads) follow the first anchored write that takes them.
    for u in range(n):
        if write_l[u] and anchor[u] >= 0:
            for r in node_resources[u]:
                var_anchor.setdefault(r, anchor[u])
    for u in range(n):
        if handle_l[u] or read_l[u]:
            keys = node_resources[u] if read_l[u] else []
            if handle_l[u]:
                first_value = int(np.searchsorted(index.value_producer, u))
                keys = [first_value + k for k in range(int(num_outputs[u])) if value_resource[first_value + k]]
            for r in keys:
                if r in var_anchor:
                    anchor[u] = var_anchor[r]
                    break

    # A read of shared state (beta1_power) taken by one update follows it.
    for u in range(n):
        if read_l[u] and anchor[u] < 0:
            anchor[u] = max((anchor[s] for s in succ_lists[u] if role_l[s] == OPTIMIZER), default=-1)

    layer = _layers(nodes, forward, pred_lists, succ_lists)
    anchor_arr = np.asarray(anchor, dtype=np.int64)
    layer_arr = np.full(n, -1, dtype=np.int64)
    has = anchor_arr >= 0
    layer_arr[has] = np.asarray(layer, dtype=np.int64)[anchor_arr[has]]
    num_layers = int(layer_arr.max()) + 1 if has.any() else 0
    return TrainingStructure(nodes=nodes, role=role, anchor=anchor_arr, layer=layer_arr, num_layers=num_layers)


def _layers(nodes: list[Node], forward: list[bool], preds: list[list[int]], succs: list[list[int]]) -> list[int]:
    """Layer per node (forward nodes only; -1 elsewhere): name-scope keys made monotone along forward edges."""
    n = len(nodes)
    positions = [u for u in range(n) if forward[u]]
    keys = _layer_keys([_copy_prefix(nodes[u].name)[1] for u in positions])  # copies share their layers
    key_of = dict(zip(positions, keys, strict=True))
    numbers: dict[tuple[str, ...], int] = {}
    layer = [-1] * n
    for u in positions:
        key = key_of[u]
        own = -1
        if key is not None:
            own = numbers.setdefault(key, len(numbers))
        layer[u] = max([own, *(layer[p] for p in preds[u] if forward[p])])
    for u in reversed(positions):
        if layer[u] < 0:
            layer[u] = min((layer[s] for s in succs[u] if forward[s] and layer[s] >= 0), default=-1)
    # Renumber densely in order (a key can lose all its ops to the monotone rule).
    used = sorted({layer[u] for u in positions if layer[u] >= 0})
    dense = {old: k for k, old in enumerate(used)}
    for u in positions:
        layer[u] = dense.get(layer[u], 0)
    return layer
