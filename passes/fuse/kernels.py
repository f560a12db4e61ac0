"""``fuse-kernels``: mark convex sets of a placed graph's ops as compiled kernel clusters, and cost them.

A training step on GPUs is partly launch-bound: every TensorFlow op costs its launch (about 5 us
on a V100, :data:`graphir.cluster_model.GPU_LAUNCH_OVERHEAD`) and writes its result to memory for the
next op to read back. A BERT-large replica of ``fastt``'s 8-GPU data-parallel step launches 10,181
ops, and launches alone set a floor of 1.44x the work bound
(benchmarks/results/parallelize-notes.md). Compilers fuse such ops: XLA (which TensorFlow runs on
marked op sets), TVM, TorchInductor. This pass chooses the sets on a placed module, marks them with
the ``kernel`` annotation (the TF lowering compiles each as one XLA cluster) and replaces their
members' costs by the fused-kernel cost rule below, so the simulator judges the fused step.

**Sets.** Ops that XLA can hold (:func:`graphir.ops.xla.xla_role`) on one device, grown in the
graph's topological order: an op joins the set of one of its producers on its device (the largest
such set that qualifies) when the set stays *convex*: no path leaves the set and comes back
(TensorFlow splits a marked set that is not, benchmarks/results/xla-fusion-notes.md section 1). The
test is exact: no producer of the op outside the set may be reachable from the set, checked by a
backward search bounded below by the set's lowest topological rank (a node reachable from the set
ranks after its first member); a search longer than :data:`MAX_VISITS` nodes counts as reachable
(the set is not grown: safe).

* Under the ``enforced`` order, whose per-device sequences the TF lowering enforces by control
  dependencies, those sequences are edges too (the searches walk them and rank by them), and a
  set must be contiguous in its device's sequence (an op between two members would be a path out
  and back): an op joins only the set that ends right before it, and only when it reads a member.
* Under TensorFlow's executor order (``dynamic``) sets need not be contiguous, and a constant or a
  variable read (``ReadVariableOp``) that one set alone reads joins it (an update's control edge
  from the read must not lead back into the set). ``fuse-kernels{order=dynamic}`` records the
  dynamic order first: for a step TensorFlow's executor may order freely (one device, data
  parallelism with the ring).
* In a training step a set stays within one part of it: one copy (replica, micro-batch) and one
  phase (forward, backward; the update apart) of :func:`graphir.passes.place.pipeline.training_layout`.
  A cluster's outputs are ready only when all of it has run, so a set spanning micro-batches would
  serialise what a pipeline schedule interleaves. Within a phase, sets may span layers. Measured on
  ``bert_large_train``'s 8-replica ring step on ``fastt`` (``python -m devtools.replica_breakdown
  --kernels``): sets cut at every layer as well, 147.9 ms; per copy and phase, 139.1 ms; no parts,
  136.8 ms (a replica's gradients wait for its backward cluster to end, but most of the ring runs
  after the backward pass anyway).

**Cost rule** (per set, per device kind; what the spike measured TensorFlow 2.21's XLA to do):

* XLA ends a kernel at each reduction and runs each matrix product as its own kernel, so a set is
  cut into *pieces*: an op's piece number is the largest over its producers in the set of the
  producer's number, plus one after a reduction or a product, and a product starts a piece of its
  own; a piece is a connected part of one number (``ln_gelu``: 29 ops, 6 XLA kernels);
* a piece costs the roofline (:func:`graphir.passes.profile.roofline.roofline`, the one per-op
  rule) of its FLOPs and of the bytes it reads from outside the piece and writes for readers outside
  it, plus one launch: the tensors that stay inside a piece never reach memory. A variable read is
  an argument of the kernel (its bytes are read by the ops that use it). A piece of identity-like
  ops only (reshapes) has no kernel and costs nothing;
* the set costs one more launch: TensorFlow's ``_XlaCompile`` op, a cache lookup per step, beside
  the ``_XlaRun`` op that launches the pieces.

A set is kept only when its fused cost is below the sum of its members' costs (one op alone never
is). **A cluster runs as one op**: it starts when all its inputs are ready and its outputs are ready
when it ends. So the whole set's cost is written on its *head* (its first member that is not a
constant or a read), the other members cost 0, and the head waits for every producer of the set's
inputs (control edges from those producers, which TensorFlow's cluster op has anyway; they close no
cycle since the set is convex). Under the dynamic order the devices' ``order`` annotations are then
renumbered to agree with the new edges. Member costs become analytical: measured costs
(``profile{mode=tf}``) of fused members are replaced, since the fused kernel was not measured.

**Memory** is left as it is: a tensor that stays inside a piece is still counted by the liveness
rule (:mod:`graphir.memory`) as if it were written. This over-counts a fused step's memory (a safe
error: a placement judged to fit does fit).

**Where the rule was checked.** On one pinned single-thread CPU worker (the rig), the fused
``ln_gelu`` block ran 1.3-1.7 ms where its pieces' rooflines at the measured bandwidth give
1.0-2.2 ms; the per-launch figure cannot be fitted on a CPU core (xla-fusion-notes.md): the GPU's
5 us is the papers' figure, as for unfused ops.

Statistics: ``sets``, ``ops`` (marked), ``pieces`` (kernels the sets run), ``launches-saved``,
``saved-ms`` (the sum over devices of the modelled compute time removed), ``dropped`` (sets whose
fused cost was not lower), ``control-edges`` (added for the heads).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from graphir.annotations import Cost
from graphir.errors import PassError
from graphir.index import GraphIndex
from graphir.ir import Module, Node, Value
from graphir.memory import output_mask
from graphir.ops import estimate_node
from graphir.ops.xla import xla_role
from graphir.pass_infra import Pass, PassContext, PassResult, Stat, register_pass
from graphir.passes.place.pipeline import training_layout
from graphir.passes.profile.roofline import roofline
from graphir.simulator import record_order, recorded_order
from graphir.topo import stable_topological_order
from graphir.unionfind import DisjointSets

__all__ = ["KERNEL_ORDERS", "MAX_VISITS", "CandidateSet", "FuseKernels", "candidate_sets", "fuse_kernels"]

KERNEL_ORDERS = ("recorded", "dynamic")
"""``order=``: the placement's recorded execution order, or TensorFlow's executor order (recorded first)."""

MAX_VISITS = 512
"""Nodes a convexity search may visit before it gives up (and the set is not grown)."""

_CUTS_AFTER = ("reduction", "dot")
_JOIN_READERS = ("constant", "read")
"""Roles that join the one set that reads them, after the sets are grown (dynamic order only)."""


@dataclasses.dataclass
class CandidateSet:
    """A set being grown: its members (graph index numbers), device, training part, lowest and highest search rank."""

    device: int
    unit: tuple[int, int, int]
    members: list[int]
    floor: int
    ceiling: int

    def add(self, v: int, rank: int) -> None:
        """Add node ``v`` of search rank ``rank``."""
        self.members.append(v)
        self.floor = min(self.floor, rank)
        self.ceiling = max(self.ceiling, rank)

    def __len__(self) -> int:
        return len(self.members)


def _meets(search: _Search, start: int, set_of: list[int], s: int, limit: int, forward: bool) -> bool:
    """Whether a search from node ``start`` meets a member of set ``s`` (members have ``set_of == s``).

    Backward (``forward`` False): over the producers and, under the enforced order, the device-order
    predecessor, never below rank ``limit`` (the set's lowest rank: whatever the set reaches ranks
    after it). Forward: over the consumers and the device-order successor, never above ``limit`` (the
    set's highest rank). True also when the search visits more than :data:`MAX_VISITS` nodes.
    """
    rank = search.rank
    if (rank[start] > limit) if forward else (rank[start] < limit):
        return False
    if set_of[start] == s:
        return True
    if forward:
        offsets, edges, order = search.succ_offsets, search.succ, search.after
    else:
        offsets, edges, order = search.pred_offsets, search.pred, search.before
    stack = [start]
    seen = {start}
    while stack:
        u = stack.pop()
        for w in [*edges[offsets[u] : offsets[u + 1]], order[u]]:
            if w < 0 or w in seen or ((rank[w] > limit) if forward else (rank[w] < limit)):
                continue
            if set_of[w] == s:
                return True
            seen.add(w)
            if len(seen) > MAX_VISITS:
                return True
            stack.append(w)
    return False


@dataclasses.dataclass
class _Search:
    """The graph the convexity searches walk: data and control edges, plus the device orders when enforced.

    ``rank`` numbers the nodes topologically in that graph (a node reachable from another ranks
    after it), which bounds the searches.
    """

    pred_offsets: list[int]
    pred: list[int]
    succ_offsets: list[int]
    succ: list[int]
    before: list[int]
    after: list[int]
    rank: list[int]

    @classmethod
    def of(cls, index: GraphIndex, before: list[int]) -> _Search:
        """The search graph of ``index`` with the device-order predecessors ``before`` (-1: none)."""
        n = index.num_nodes
        pred_offsets, pred = index.pred_offsets.tolist(), index.pred.tolist()
        succ_offsets, succ = index.succ_offsets.tolist(), index.succ.tolist()
        after = [-1] * n
        for v, u in enumerate(before):
            if u >= 0:
                after[u] = v
        # topological ranks over data, control and order edges (graphir.topo: smallest number first)
        ordered = np.flatnonzero(np.asarray(before) >= 0)
        src = np.concatenate([index.edge_src, np.asarray(before, dtype=np.int64)[ordered]])
        dst = np.concatenate([index.edge_dst, ordered])
        sequence = stable_topological_order(n, src, dst)
        if sequence is None:
            raise PassError("fuse-kernels: the device orders deadlock against the data dependencies")
        rank = np.empty(n, dtype=np.int64)
        rank[sequence] = np.arange(n)
        return cls(pred_offsets, pred, succ_offsets, succ, before, after, rank.tolist())


def _units(module: Module, n: int) -> list[tuple[int, int, int]]:
    """Per node, the part of a training step it belongs to: ``(copy, 0, phase)``; all equal otherwise.

    A set stays within one part (module docstring, "Sets"): a cluster's outputs are ready when all of
    it has run, so a set spanning micro-batches would serialise them.
    """
    try:
        layout = training_layout(module)
    except PassError:
        return [(0, 0, 0)] * n
    return [(c, 0, p) for c, p in zip(layout.copy.tolist(), layout.phase.tolist(), strict=True)]


def candidate_sets(module: Module) -> tuple[list[CandidateSet], list[int], list[str | None]]:
    """The candidate sets of a placed module (module docstring, "Sets"), before costing.

    Returns:
        the sets of two or more ops, the set number per node (-1: none), and each node's role.
    """
    index = module.graph.index()
    n = index.num_nodes
    names = {name: k for k, name in enumerate(module.cluster.device_names)}
    placed = index.annotation_list("device")
    if any(name is None for name in placed):
        raise PassError("fuse-kernels needs a placed module: run place or parallelize first")
    device = [names[str(name)] for name in placed]
    enforced = recorded_order(module) == "enforced"
    position = index.annotation_list("order")
    if enforced and any(p is None for p in position):
        raise PassError("fuse-kernels: the placement runs under the enforced order, but a node has no 'order'")
    nodes = index.nodes
    role = [xla_role(node.op) for node in nodes]
    unit = _units(module, n)
    set_of = [-1] * n
    sets: list[CandidateSet] = []
    offsets, pred = index.pred_offsets.tolist(), index.pred.tolist()
    # under the enforced order: the node that comes right before each node in its device's sequence
    before: list[int] = [-1] * n
    if enforced:
        sequence = sorted(range(n), key=lambda v: (device[v], position[v], v))
        for a, b in zip(sequence, sequence[1:], strict=False):
            if device[a] == device[b]:
                before[b] = a
    search = _Search.of(index, before)
    rank = search.rank
    for v in range(n):
        if role[v] is None or role[v] in _JOIN_READERS:
            continue
        preds = pred[offsets[v] : offsets[v + 1]]
        choices: list[int] = []
        if enforced:
            p = before[v]
            if (
                p >= 0
                and set_of[p] >= 0
                and sets[set_of[p]].unit == unit[v]
                and any(set_of[q] == set_of[p] for q in preds)
            ):
                choices.append(set_of[p])
        else:
            for p in preds:
                s = set_of[p]
                if s >= 0 and sets[s].device == device[v] and sets[s].unit == unit[v] and s not in choices:
                    choices.append(s)
            choices.sort(key=lambda s: (-len(sets[s]), s))  # the largest set first
        joined = -1
        for s in choices:
            floor = sets[s].floor
            if all(set_of[p] == s or not _meets(search, p, set_of, s, floor, forward=False) for p in preds):
                joined = s
                break
        if joined < 0:
            joined = len(sets)
            sets.append(CandidateSet(device[v], unit[v], [], rank[v], rank[v]))
        set_of[v] = joined
        sets[joined].add(v, rank[v])
    if not enforced:  # constants and variable reads that one set alone reads join it
        succ_offsets, succ = index.succ_offsets.tolist(), index.succ.tolist()
        control = index.edge_control[index.succ_edge].tolist()
        for v in range(n):
            if role[v] not in _JOIN_READERS:
                continue
            span = range(succ_offsets[v], succ_offsets[v + 1])
            readers = {set_of[succ[k]] for k in span if not control[k]}
            if len(readers) != 1:
                continue
            s = readers.pop()
            if s < 0 or sets[s].device != device[v]:
                continue
            # a control successor (an update that waits for the read) must not lead back into the set,
            # nor may the set reach the node's own producers
            if any(control[k] and _meets(search, succ[k], set_of, s, sets[s].ceiling, forward=True) for k in span):
                continue
            if any(
                _meets(search, p, set_of, s, sets[s].floor, forward=False) for p in pred[offsets[v] : offsets[v + 1]]
            ):
                continue
            set_of[v] = s
            sets[s].add(v, rank[v])
    keep = [s for s in sets if len(s) > 1]
    renumber = {id(s): k for k, s in enumerate(keep)}
    numbers = [renumber.get(id(sets[s]), -1) if s >= 0 else -1 for s in set_of]
    for s in keep:
        s.members.sort()
    return keep, numbers, role


def _pieces(
    offsets: list[int], pred: list[int], members: Sequence[int], numbers: list[int], s: int, role: list[str | None]
) -> list[int]:
    """Piece label per member (module docstring, "Cost rule"): connected parts of equal piece number.

    ``offsets`` and ``pred`` are the graph index's predecessor lists (CSR).
    """
    local = {v: k for k, v in enumerate(members)}
    number = [0] * len(members)
    join: DisjointSets[int] = DisjointSets()
    for k, v in enumerate(members):
        inside = [local[p] for p in pred[offsets[v] : offsets[v + 1]] if numbers[p] == s]
        cut_self = role[v] == "dot"
        best = 0
        for j in inside:
            step = 1 if (role[members[j]] in _CUTS_AFTER or cut_self) else 0
            best = max(best, number[j] + step)
        number[k] = best
        for j in inside:
            if number[j] == best and not cut_self and role[members[j]] not in _CUTS_AFTER:
                join.union(j, k)
    return [join.find(k) for k in range(len(members))]


def _value_bytes(value: Value) -> int:
    return int(value.type.nbytes_or(0))


def _renumber_orders(module: Module) -> None:
    """Give every device's ``order`` a sequence the new control edges agree with (dynamic order only).

    Under TensorFlow's executor order the ``order`` annotations only rank ready nodes; they must still
    be a topological order per device (the verifier checks it): the graph's topological order that
    keeps the old positions (then the numbering) wherever the edges allow.
    """
    index = module.graph.index()
    n = index.num_nodes
    old = [p if p is not None else -1 for p in index.annotation_list("order")]
    devices = index.annotation_list("device")
    # graphir.topo's smallest-first order, on nodes renumbered by (old position, number)
    by_old = np.asarray(sorted(range(n), key=lambda v: (old[v], v)), dtype=np.int64)
    renamed = np.empty(n, dtype=np.int64)
    renamed[by_old] = np.arange(n)
    sequence = stable_topological_order(n, renamed[index.edge_src], renamed[index.edge_dst])
    assert sequence is not None, "the graph is acyclic (it has an index)"
    next_position: dict[object, int] = {}
    positions = [0] * n
    for u in by_old[sequence].tolist():
        positions[u] = next_position.get(devices[u], 0)
        next_position[devices[u]] = positions[u] + 1
    module.graph.annotate("order", index.nodes, positions)


def fuse_kernels(module: Module, order: str = "recorded") -> dict[str, Stat]:
    """Choose, cost and mark the fused-kernel sets of a placed module (module docstring). Returns the statistics.

    Args:
        module: a placed, profiled module (changed in place).
        order: ``recorded`` (the placement's) or ``dynamic`` (recorded first: TensorFlow's executor order).
    """
    if order not in KERNEL_ORDERS:
        raise PassError(f"fuse-kernels: order must be one of {', '.join(KERNEL_ORDERS)}, got '{order}'")
    if any(node.kernel is not None for node in module.graph.nodes):
        raise PassError("fuse-kernels: the module already has 'kernel' sets (run it once, after the placement)")
    if order == "dynamic":
        record_order(module, "dynamic")
    sets, numbers, role = candidate_sets(module)
    index = module.graph.index()
    nodes = index.nodes
    offsets, pred = index.pred_offsets.tolist(), index.pred.tolist()
    cluster = module.cluster
    outputs = output_mask(module.graph, index)
    value_number = {id(value): x for x, value in enumerate(index.values)}
    kinds = sorted(cluster.kinds)
    devices = {kind: cluster.kind_device(kind) for kind in kinds}
    device_kind = [d.kind for d in cluster.devices]
    marked = pieces_total = launches_saved = dropped = 0
    saved = 0.0
    new_costs: dict[Node, Cost] = {}
    waits: dict[Node, list[Node]] = {}
    kernel_names: dict[Node, str] = {}
    for s, kernel in enumerate(sets):
        members = kernel.members
        kind = device_kind[kernel.device]
        label = _pieces(offsets, pred, members, numbers, s, role)
        groups: dict[int, list[int]] = {}
        for k, lab in enumerate(label):
            groups.setdefault(lab, []).append(k)
        flops = np.zeros(len(groups))
        nbytes = np.zeros(len(groups))
        has_work = np.zeros(len(groups), dtype=bool)
        for g, part in enumerate(groups.values()):
            # a variable read is an argument of the kernel: its value is read by its readers
            inside = {id(nodes[members[k]]) for k in part if role[members[k]] != "read"}
            seen_in: set[int] = set()
            for k in part:
                node = nodes[members[k]]
                if role[members[k]] == "read":
                    continue
                f, b, _, _, _ = estimate_node(node)
                flops[g] += f
                has_work[g] |= (f > 0 or b > 0) and role[members[k]] != "constant"
                for value in node.inputs:
                    producer = value.producer
                    if (producer is None or id(producer) not in inside) and id(value) not in seen_in:
                        seen_in.add(id(value))
                        nbytes[g] += _value_bytes(value)
                for value in node.outputs:
                    read_outside = any(id(user) not in inside for user, _ in value.uses)
                    x = value_number.get(id(value))
                    if read_outside or (x is not None and outputs[x]):
                        nbytes[g] += _value_bytes(value)
        per_kind: dict[str, np.ndarray] = {}
        for kd in kinds:
            d = devices[kd]
            times = roofline(flops, nbytes, d.peak_flops, d.mem_bandwidth, d.launch_overhead, d.kernel_dispatch)
            per_kind[kd] = np.where(has_work, times, 0.0)
        fused = float(per_kind[kind].sum()) + devices[kind].launch_overhead
        unfused = 0.0
        for v in members:
            cost = nodes[v].cost
            seconds = None if cost is None else cost.time(kind)
            if seconds is None:
                raise PassError(f"fuse-kernels: node '{nodes[v].name}' has no cost for '{kind}': run profile first")
            unfused += seconds
        if fused >= unfused:
            dropped += 1
            continue
        name = f"k{s}"
        head = next(v for v in members if role[v] not in _JOIN_READERS)
        total = {kd: float(per_kind[kd].sum()) + devices[kd].launch_overhead for kd in kinds}
        for v in members:
            seconds = total if v == head else {kd: 0.0 for kd in kinds}
            new_costs[nodes[v]] = Cost({kd: float(f"{t:.12g}") for kd, t in seconds.items()})
            kernel_names[nodes[v]] = name
        # the cluster starts when all its inputs are ready: its head waits for every producer outside it
        inside_set = set(members)
        producers = sorted({p for v in members for p in pred[offsets[v] : offsets[v + 1]]} - inside_set)
        waits[nodes[head]] = [nodes[p] for p in producers]
        marked += len(members)
        working = int(has_work.sum())
        pieces_total += working
        launches_saved += len(members) - working - 1
        saved += unfused - fused
    for node, cost in new_costs.items():
        node.cost = cost
        node.kernel = kernel_names[node]
    edges = 0
    for head, producers in waits.items():
        present = {*head.control_inputs, *(x.producer for x in head.inputs)}
        missing = [p for p in producers if p not in present]
        head.add_control_inputs(missing)
        edges += len(missing)
    if edges and recorded_order(module) == "dynamic":
        _renumber_orders(module)
    return {
        "sets": len(sets) - dropped,
        "ops": marked,
        "pieces": pieces_total,
        "launches-saved": launches_saved,
        "saved-ms": round(saved * 1e3, 3),
        "dropped": dropped,
        "control-edges": edges,
    }


@register_pass
@dataclasses.dataclass(frozen=True)
class FuseKernels(Pass):
    """Mark convex sets of a placed graph's ops as compiled kernels (XLA clusters) and cost them fused.

    Runs after the placement (``place``, ``parallelize``): the sets are per device. See the
    module docstring for the sets, the cost rule and what the TF lowering does with them.

    Options:
        order: ``recorded`` (the placement's execution order) or ``dynamic`` (record TensorFlow's
            executor order first: sets need not be contiguous in a device's sequence).
    """

    name: ClassVar[str] = "fuse-kernels"
    requires: ClassVar[tuple[str, ...]] = ("cost", "device", "order")
    provides: ClassVar[tuple[str, ...]] = ("kernel",)
    order: str = "recorded"

    def __post_init__(self) -> None:
        """Reject a bad option when the pipeline is parsed."""
        if self.order not in KERNEL_ORDERS:
            raise ValueError(f"order must be one of {', '.join(KERNEL_ORDERS)}, got '{self.order}'")

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Choose, cost and mark the sets."""
        stats = fuse_kernels(module, self.order)
        ctx.log(
            f"fuse-kernels: {stats['sets']} sets of {stats['ops']} ops, "
            f"{stats['launches-saved']} launches and {stats['saved-ms']} ms of compute saved"
        )
        return PassResult(bool(stats["sets"]), stats)
