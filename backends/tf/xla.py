"""Fused kernels as XLA clusters: the ``kernel`` annotation marked on the lowered ``GraphDef``.

A pass (``fuse-kernels``) names sets of nodes that run as one compiled kernel: every node of one
``kernel`` name on one device. The lowering (:func:`graphir.backends.tf.lowering.lower`) turns each
set into one XLA cluster by giving every TF op lowered from its nodes (``LoweredGraph.node_ops``) the
attributes ``tf.xla.experimental.jit_scope`` sets (:data:`KERNEL_ATTRS`): ``_XlaCompile = true``,
``_XlaScope = "<kernel>@<TF device>"`` (one scope per set: TensorFlow never merges two scopes, and a
name a pass reuses on another device is another set) and ``_XlaSeparateCompiledGradients = false``.
TensorFlow's mark-for-compilation pass (a graph optimisation pass of the session, which Grappler's
switch does not turn off) then compiles each set as one ``_XlaCompile``/``_XlaRun`` pair, and only
the marked sets: without ``--tf_xla_auto_jit`` nothing else is clustered on the CPU
(``benchmarks/results/xla-fusion-notes.md`` section 1 measured both).

Rules the marking enforces so that what graphir models is what runs:

* **Placed, one device.** Every node of a set is placed; the set is the nodes of one name on one
  device (:func:`kernel_sets`).
* **Convex, jointly.** TensorFlow's clustering contracts each cluster and refuses a merge that
  would close a cycle, silently leaving the set in pieces. So the graph with every set contracted
  to one vertex must be acyclic, over the data and control edges of the lowered ``GraphDef``,
  which include the control dependencies ``enforce_order`` adds along each device's order
  (:func:`check_convex`; a set is then convex, and no two sets wait on each other). Under the
  enforced order, a set is convex only if its nodes are consecutive in their device's order: a
  node ordered between two members is reached from the first and reaches the second.
* **No marked input from another device.** TensorFlow does not merge two parts of a cluster when
  one has a marked predecessor on another device (a heuristic against delaying one device's work
  for another's): a backward kernel reading a forward kernel's result across devices ran as two
  clusters (the tiny GPT step placed by m-topo: 18 clusters for 16 sets). Such an edge is routed
  through an unmarked ``Identity`` on the consumer's device (:func:`bridge_cross_device_inputs`).
* **Constants inside, when only the set reads them.** A ``Const`` op of the lowered graph that is
  no node's op (a graph constant of the IR) and that only one set reads joins that set when it is
  at most :data:`ABSORBED_CONSTANT_BYTES`, so XLA compiles with its value (the spike's
  ``pow(y, 3)`` became ``y*y*y``) rather than taking it as a runtime argument. A marked ``Const``
  that an op of another device reads too reaches it through an unmarked ``Identity`` on the
  constant's device (:func:`hold_marked_constants`): TensorFlow would otherwise replicate the
  constant, marks included, to that device, where it runs as a one-op cluster.

The flags XLA needs (:data:`graphir.backends.tf.session.XLA_FLAGS`: lazy compilation off, so a
cluster is exactly two ops and a failure to compile is an error rather than a silent fallback; the
TF-graph constant folding of XLA off, which fails with "Multiple CPU devices" inside a
``tf.distribute.Server``) are set by :func:`graphir.backends.tf.session.configure_logical_cpus` and
by the rig's workers. In a remote session a fed input reaches the graph as a ``_Recv`` that XLA's
deadness analysis gives its own predicate, which splits clusters downstream of it; the rig holds
every input of a marked graph on its device instead (:func:`fed_kernel_inputs` finds the feeds that
would do it).

What TensorFlow then ran is read back from the partition graphs of a traced step
(:func:`cluster_report`): one ``_XlaRun`` per set the fetches depend on (:func:`live_sets`; the
session prunes the others), on the set's device, and no marked op left to run as a TensorFlow op
of its own; :func:`cluster_runs` matches each set to its run (for its time on the rig).
"""

from __future__ import annotations

import dataclasses
import heapq
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from graphir.errors import BackendError, Location
from graphir.ir import Module, Node

__all__ = [
    "ABSORBED_CONSTANT_BYTES",
    "BRIDGE_SUFFIX",
    "HOLD_SUFFIX",
    "KERNEL_ATTRS",
    "KernelSet",
    "absorb_constants",
    "bridge_cross_device_inputs",
    "check_convex",
    "cluster_report",
    "cluster_runs",
    "fed_kernel_inputs",
    "hold_marked_constants",
    "kernel_sets",
    "live_sets",
    "mark_kernels",
]

KERNEL_ATTRS = ("_XlaCompile", "_XlaScope", "_XlaSeparateCompiledGradients")
"""The ``NodeDef`` attributes of a marked op (those ``tf.xla.experimental.jit_scope`` sets)."""

ABSORBED_CONSTANT_BYTES = 1 << 20
"""A graph ``Const`` read only by one set joins it up to this size (its ``value`` proto's bytes)."""

XLA_RUN_OP = "_XlaRun"
"""The op that runs a compiled cluster, one per cluster in a step's partition graphs (lazy compilation off)."""


@dataclasses.dataclass(frozen=True)
class KernelSet:
    """The TF ops of one fused kernel: the nodes of one ``kernel`` name on one device.

    Attributes:
        kernel: the ``kernel`` annotation.
        device: the nodes' ``device`` annotation (a device name of the cluster).
        tf_device: its TF device string.
        scope: the ``_XlaScope`` of the set's ops, ``<kernel>@<tf_device>``.
        nodes: the IR nodes' names, in lowering order.
        ops: the marked TF op names: the nodes' ops, then the absorbed constants.
    """

    kernel: str
    device: str
    tf_device: str
    scope: str
    nodes: tuple[str, ...]
    ops: tuple[str, ...]


def kernel_sets(
    module: Module, sequence: Sequence[Node], node_ops: Mapping[str, Sequence[str]], devices: Mapping[Node, str]
) -> list[KernelSet]:
    """The fused-kernel sets of a lowered module, without absorbed constants (empty when no node has ``kernel``).

    Args:
        module: the module (for error locations only).
        sequence: its nodes in lowering order (sets and their nodes are listed in this order).
        node_ops: IR node name -> its TF ops (``LoweredGraph.node_ops``).
        devices: placed node -> its TF device string.

    Raises:
        BackendError: a node with ``kernel`` that is not placed.
    """
    del module
    members: dict[tuple[str, str], list[Node]] = {}
    for node in sequence:
        kernel = node.kernel
        if kernel is None:
            continue
        if node.device is None or node not in devices:
            raise BackendError(
                f"kernel '{kernel}' has an unplaced node: a fused kernel runs on one device (place the module first)",
                Location(node=node.name),
            )
        members.setdefault((kernel, node.device), []).append(node)
    sets = []
    for (kernel, device), nodes in members.items():
        tf_device = devices[nodes[0]]
        ops = tuple(op for node in nodes for op in node_ops.get(node.name, ()))
        sets.append(KernelSet(kernel, device, tf_device, f"{kernel}@{tf_device}", tuple(n.name for n in nodes), ops))
    return sets


def _base(ref: str) -> str:
    """The op name of a ``GraphDef`` input reference (``^op``, ``op:1``, ``op``)."""
    return ref.lstrip("^").split(":")[0]


def _consumers(graph_def: Any) -> dict[str, list[str]]:
    users: dict[str, list[str]] = defaultdict(list)
    for node in graph_def.node:
        for ref in node.input:
            users[_base(ref)].append(node.name)
    return users


def live_sets(graph_def: Any, sets: Sequence[KernelSet], roots: Iterable[str]) -> list[KernelSet]:
    """The sets with an op that some tensor or op of ``roots`` depends on (the others are pruned by the session)."""
    inputs = {node.name: [_base(ref) for ref in node.input] for node in graph_def.node}
    live: set[str] = set()
    pending = [_base(root) for root in roots]
    while pending:
        name = pending.pop()
        if name in live or name not in inputs:
            continue
        live.add(name)
        pending.extend(inputs[name])
    return [kernel for kernel in sets if any(op in live for op in kernel.ops)]


def absorb_constants(
    graph_def: Any, sets: Sequence[KernelSet], node_ops: Mapping[str, Sequence[str]]
) -> list[KernelSet]:
    """``sets`` with each graph ``Const`` read only by one set added to it (module docstring)."""
    owner = {op: k for k, kernel in enumerate(sets) for op in kernel.ops}
    lowered_ops = {op for ops in node_ops.values() for op in ops}
    users = _consumers(graph_def)
    extra: dict[int, list[str]] = defaultdict(list)
    for node in graph_def.node:
        if node.op != "Const" or node.name in lowered_ops or node.name in owner:
            continue
        if any(ref.startswith("^") for ref in node.input):
            continue  # ordered after another op: keep that edge outside the cluster
        readers = {owner.get(user, -1) for user in users.get(node.name, ())}
        if len(readers) != 1 or -1 in readers:
            continue
        if node.attr["value"].ByteSize() > ABSORBED_CONSTANT_BYTES:
            continue
        extra[readers.pop()].append(node.name)
    return [
        dataclasses.replace(kernel, ops=kernel.ops + tuple(extra[k])) if extra[k] else kernel
        for k, kernel in enumerate(sets)
    ]


def check_convex(
    graph_def: Any, sets: Sequence[KernelSet], node_ops: Mapping[str, Sequence[str]], enforce_order: bool
) -> None:
    """Raise a one-line :class:`BackendError` unless contracting every set leaves ``graph_def`` acyclic.

    Kahn's algorithm on the quotient graph (each set one vertex, every other op its own), O(V+E)
    over the ``GraphDef``'s data and control edges. On a cycle the error names a set on it, the
    member op's IR node where the path leaves the set and the first op (IR node, or other set) the
    path goes through outside it.
    """
    if not sets:
        return
    names = [node.name for node in graph_def.node]
    index = {name: k for k, name in enumerate(names)}
    count = len(names)
    unit = list(range(count))
    for k, kernel in enumerate(sets):
        for op in kernel.ops:
            position = index.get(op)
            if position is not None:
                unit[position] = count + k
    units = count + len(sets)
    successors: list[list[int]] = [[] for _ in range(units)]
    predecessors: list[list[int]] = [[] for _ in range(units)]
    indegree = [0] * units
    for k, node in enumerate(graph_def.node):
        target = unit[k]
        for ref in node.input:
            source_op = index.get(_base(ref))
            if source_op is None:
                continue
            source = unit[source_op]
            if source == target:
                continue
            successors[source].append(target)
            predecessors[target].append(source)
            indegree[target] += 1
    used = set(unit)
    ready = [u for u in used if indegree[u] == 0]
    heapq.heapify(ready)
    done = 0
    while ready:
        current = heapq.heappop(ready)
        done += 1
        for succ in successors[current]:
            indegree[succ] -= 1
            if indegree[succ] == 0:
                heapq.heappush(ready, succ)
    if done == len(used):
        return
    # Every unit left has a predecessor left: walk back from a set until a unit repeats (a cycle).
    left = {u for u in used if indegree[u] > 0}
    start = min((u for u in left if u >= count), default=min(left))
    path, seen = [start], {start: 0}
    while True:
        back = min(p for p in predecessors[path[-1]] if p in left)
        if back in seen:
            cycle = path[seen[back] :]
            break
        seen[back] = len(path)
        path.append(back)
    cycle.reverse()  # now in edge direction: cycle[i] -> cycle[i + 1]
    at = next(i for i, u in enumerate(cycle) if u >= count)
    kernel_unit, outside = cycle[at], cycle[(at + 1) % len(cycle)]
    kernel = sets[kernel_unit - count]
    op_node = {op: node for node, ops in node_ops.items() for op in ops}
    users = _consumers(graph_def)
    member = next(
        (op for op in kernel.ops if any(unit[index[user]] == outside for user in users.get(op, ()))), kernel.ops[0]
    )
    order = " (the device orders' control dependencies included)" if enforce_order else ""
    if outside >= count:
        other = sets[outside - count]
        message = (
            f"kernels '{kernel.kernel}' on '{kernel.device}' and '{other.kernel}' on '{other.device}' wait on each "
            f"other in the lowered graph{order}: a path leaves '{kernel.kernel}' through '{other.kernel}' and comes "
            "back, so TensorFlow would split one of their XLA clusters"
        )
    else:
        through = op_node.get(names[outside], names[outside])
        message = (
            f"kernel '{kernel.kernel}' on '{kernel.device}' is not convex in the lowered graph{order}: a path leaves "
            f"it through '{through}' and comes back, so TensorFlow would split its XLA cluster"
        )
    raise BackendError(message, Location(node=op_node.get(member, member)))


def mark_kernels(graph_def: Any, sets: Sequence[KernelSet]) -> Any:
    """Give every op of every set :data:`KERNEL_ATTRS` (its set's scope) in ``graph_def``; returns it.

    Then bridges each edge from a marked op into a set on another device (:func:`bridge_cross_device_inputs`).
    """
    scope = {op: kernel.scope.encode() for kernel in sets for op in kernel.ops}
    if not scope:
        return graph_def
    for node in graph_def.node:
        name = scope.get(node.name)
        if name is None:
            continue
        node.attr["_XlaCompile"].b = True
        node.attr["_XlaScope"].s = name
        node.attr["_XlaSeparateCompiledGradients"].b = False
    hold_marked_constants(graph_def, sets)
    bridge_cross_device_inputs(graph_def, sets)
    return graph_def


HOLD_SUFFIX = "graphir_xla_hold"
"""Name part of the ops :func:`hold_marked_constants` adds (``<const>/graphir_xla_hold_<k>``)."""


def hold_marked_constants(graph_def: Any, sets: Sequence[KernelSet]) -> int:
    """Route every read of a marked ``Const`` from another device through an ``Identity`` on the constant's; how many.

    TensorFlow's constant replication (a graph pass of the session) gives each other device that
    reads a small constant its own copy, ``<const>/replicate/_k``, with the constant's attributes:
    a marked constant then runs as a one-op XLA cluster on each of those devices (an 8-layer GPT step
    with 419 regions of up to 22 ops marked ran 499 clusters, 89 of them such copies). Read through an unmarked
    ``Identity`` on its own device, the constant has readers on one device only and stays in its
    set, and the value crosses devices as any other tensor does.
    """
    marked = {op: kernel.tf_device for kernel in sets for op in kernel.ops}
    consts = {node.name: node for node in graph_def.node if node.op == "Const" and node.name in marked}
    if not consts:
        return 0
    holds: dict[str, str] = {}
    taken = {node.name for node in graph_def.node}
    for node in list(graph_def.node):
        for position, ref in enumerate(node.input):
            if ref.startswith("^") or _base(ref) not in consts:
                continue
            const = consts[_base(ref)]
            if node.device == const.device or node.name in holds.values():
                continue
            hold = holds.get(const.name)
            if hold is None:
                k = 0
                while f"{const.name}/{HOLD_SUFFIX}_{k}" in taken:
                    k += 1
                hold = holds[const.name] = f"{const.name}/{HOLD_SUFFIX}_{k}"
                taken.add(hold)
                identity = graph_def.node.add(name=hold, op="Identity", input=[const.name], device=const.device)
                identity.attr["T"].type = const.attr["dtype"].type
            node.input[position] = hold
    return len(holds)


BRIDGE_SUFFIX = "graphir_xla_bridge"
"""Name part of the ops :func:`bridge_cross_device_inputs` adds (``<producer>/graphir_xla_bridge_<k>``)."""


def bridge_cross_device_inputs(graph_def: Any, sets: Sequence[KernelSet]) -> int:
    """Route every edge from a marked op of one device into a set of another through an unmarked op; how many.

    TensorFlow's clustering refuses to merge two parts of a cluster when the receiving part has a
    predecessor that is itself a compilation candidate (a marked op) on another device ("the new
    cluster will introduce a cross device dependency", ``ClusteringWillIntroduceInterDeviceDependency``
    in ``mark_for_compilation_pass.cc``: a heuristic so that work on one device is not delayed by
    work on another). So a backward kernel reading a forward kernel's result from another device
    would run as several clusters. graphir models a set as one unit that starts when all its
    inputs have arrived, so such an input is received by an ``Identity`` (data) or a ``NoOp``
    (control) on the consumer's device, unmarked: the set's predecessor is then no candidate. One
    bridge per producer tensor and device; it runs where the ``_Recv`` of the transfer runs anyway.
    """
    device_of = {op: kernel.tf_device for kernel in sets for op in kernel.ops}
    if not device_of:
        return 0
    nodes = {node.name: node for node in graph_def.node}
    bridges: dict[tuple[str, str], str] = {}
    taken = set(nodes)
    added = []
    for node in list(graph_def.node):
        device = device_of.get(node.name)
        if device is None:
            continue
        for position, ref in enumerate(node.input):
            producer = _base(ref)
            source = device_of.get(producer)
            if source is None or source == device:
                continue
            key = (ref if ref.startswith("^") or ":" in ref else ref + ":0", device)
            bridge = bridges.get(key)
            if bridge is None:
                made = _bridge_node(graph_def, nodes[producer], ref, device, taken)
                if made is None:
                    continue  # an output type the registry cannot tell: left as is (the cluster report shows a split)
                bridge = bridges[key] = made
                added.append(made)
            node.input[position] = "^" + bridge if ref.startswith("^") else bridge
    return len(added)


def _bridge_node(graph_def: Any, producer: Any, ref: str, device: str, taken: set[str]) -> str | None:
    """Add the ``Identity`` (or ``NoOp`` for a control ``ref``) on ``device`` reading ``ref``; its name."""
    k = 0
    while f"{producer.name}/{BRIDGE_SUFFIX}_{k}" in taken:
        k += 1
    name = f"{producer.name}/{BRIDGE_SUFFIX}_{k}"
    if ref.startswith("^"):
        taken.add(name)
        graph_def.node.add(name=name, op="NoOp", input=[ref], device=device)
        return name
    index = int(ref.split(":")[1]) if ":" in ref else 0
    dtype = _output_type(producer, index)
    if dtype is None:
        return None
    taken.add(name)
    bridge = graph_def.node.add(name=name, op="Identity", input=[ref], device=device)
    bridge.attr["T"].type = dtype
    return name


def _output_type(node: Any, index: int) -> int | None:
    """The ``DataType`` of output ``index`` of ``node`` from its op's registered ``OpDef`` (``None``: unknown)."""
    import importlib

    registry = importlib.import_module("tensorflow.python.framework.op_def_registry")
    op_def = registry.get(node.op)
    if op_def is None:
        return None
    defaults = {attr.name: attr.default_value for attr in op_def.attr}

    def attr(name: str) -> Any:
        return node.attr[name] if name in node.attr else defaults.get(name)

    types: list[int] = []
    for arg in op_def.output_arg:
        if arg.type_list_attr:
            value = attr(arg.type_list_attr)
            types.extend(value.list.type if value is not None else ())
            continue
        count = 1
        if arg.number_attr:
            value = attr(arg.number_attr)
            count = int(value.i) if value is not None else 0
        if arg.type_attr:
            value = attr(arg.type_attr)
            if value is None:
                return None
            types.extend([value.type] * count)
        else:
            types.extend([arg.type] * count)
    return types[index] if index < len(types) else None


def fed_kernel_inputs(graph_def: Any, sets: Sequence[KernelSet], feeds: Iterable[str]) -> list[str]:
    """The ``feeds`` (tensor names) some marked op depends on, directly or through other ops.

    In a remote session each is a ``_Recv`` from the client that XLA's deadness analysis gives its
    own predicate; ops of one set that depend on different ones are not clustered together.
    """
    marked = {op for kernel in sets for op in kernel.ops}
    inputs = {node.name: [_base(ref) for ref in node.input] for node in graph_def.node}
    upstream: set[str] = set()
    pending = list(marked)
    while pending:
        name = pending.pop()
        if name in upstream:
            continue
        upstream.add(name)
        pending.extend(inputs.get(name, ()))
    return [feed for feed in feeds if feed.rsplit(":", 1)[0] in upstream]


def cluster_report(
    sets: Sequence[KernelSet], partition_graphs: Sequence[Any], same_device: Any
) -> tuple[int, int, list[str]]:
    """(sets marked, ``_XlaRun`` ops run, problems) of one traced step's partition graphs.

    A problem line is a device whose count of clusters run differs from its count of sets, or a
    marked op that ran as a TensorFlow op of its own (outside any cluster). ``same_device(actual,
    expected)`` compares a full TF device name with a set's (possibly partial) device string.
    """
    runs: list[str] = []
    ran: dict[str, str] = {}
    for partition in partition_graphs:
        for node in partition.node:
            if node.op == XLA_RUN_OP:
                runs.append(node.device)
            else:
                ran[node.name] = node.device
    problems: list[str] = []
    by_device: dict[str, list[KernelSet]] = defaultdict(list)
    for kernel in sets:
        by_device[kernel.tf_device].append(kernel)
    matched: set[int] = set()
    for device, kernels in sorted(by_device.items()):
        here = [k for k, actual in enumerate(runs) if k not in matched and same_device(actual, device)]
        matched.update(here)
        if len(here) != len(kernels):
            problems.append(f"{device}: {len(kernels)} kernel set(s) marked, {len(here)} XLA cluster(s) ran")
    problems.extend(f"{runs[k]}: an XLA cluster no kernel set asked for" for k in range(len(runs)) if k not in matched)
    for kernel in sets:
        loose = [op for op in kernel.ops if op in ran]
        if loose:
            problems.append(f"kernel '{kernel.kernel}' on '{kernel.device}': op '{loose[0]}' ran outside its cluster")
    return len(sets), len(runs), problems


_TRANSFER_SUFFIX = re.compile(r"(/_\d+)+$")


def _origin(name: str) -> str:
    """The op a partition graph's ``_Send``/``_Recv`` (``<op>/_<k>``) or its reference stands for."""
    return _TRANSFER_SUFFIX.sub("", _base(name))


def cluster_runs(
    graph_def: Any, sets: Sequence[KernelSet], partition_graphs: Sequence[Any], same_device: Any
) -> dict[str, str]:
    """Each set's ``_XlaRun`` op in a traced step: ``{scope: run op name}`` (sets not found are left out).

    TensorFlow names clusters ``cluster_<n>`` without a trace of the scope, and the partition graphs
    hold no cluster bodies, so a run is matched to a set by its neighbours: the ops feeding its
    ``_XlaRun``/``_XlaCompile`` pair and the ops reading its results (through ``_Send``/``_Recv``
    pairs, named after the op they carry) against the set's producers and consumers outside it in
    the marked ``graph_def``. On each device, the pairs sharing the most neighbours are matched first.
    """
    runs: dict[str, tuple[str, set[str]]] = {}
    inputs_of: dict[str, list[str]] = {}
    for partition in partition_graphs:
        for node in partition.node:
            inputs_of[node.name] = list(node.input)
            if node.op == XLA_RUN_OP:
                runs[node.name] = (node.device, set())
    if not runs:
        return {}
    for name, (_, neighbours) in runs.items():
        compile_op = name.rsplit("/", 1)[0] + "/xla_compile"
        for ref in inputs_of.get(name, []) + inputs_of.get(compile_op, []):
            neighbours.add(_origin(ref))
    for name, refs in inputs_of.items():
        for ref in refs:
            run = _origin(ref)
            if run in runs and _origin(name) != run:
                runs[run][1].add(_origin(name))
    members = {op: k for k, kernel in enumerate(sets) for op in kernel.ops}
    outside: list[set[str]] = [set() for _ in sets]
    for node in graph_def.node:
        reader = members.get(node.name)
        for ref in node.input:
            producer = members.get(_base(ref))
            if reader is not None and producer != reader:
                outside[reader].add(_base(ref))
            if producer is not None and reader != producer:
                outside[producer].add(node.name)
    scored = sorted(
        (
            (-len(neighbours & outside[k]), kernel.scope, run)
            for k, kernel in enumerate(sets)
            for run, (device, neighbours) in runs.items()
            if same_device(device, kernel.tf_device) and neighbours & outside[k]
        ),
    )
    matched: dict[str, str] = {}
    used: set[str] = set()
    for _, scope, run in scored:
        if scope not in matched and run not in used:
            matched[scope] = run
            used.add(run)
    return matched
