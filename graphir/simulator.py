"""The simulator: the one ruler for every placer, benchmark and report.

Semantics (Pesto's, DESIGN.md "The simulator is the judge"):

* Each device runs its nodes one at a time. Execution order (``order=``):

  The default is the order the placement recorded (:data:`ORDER_METADATA`: ``place`` and
  ``schedule`` write it, the TF lowering follows it), ``enforced`` when none is recorded.

  - ``enforced`` (the TF lowering's control dependencies): a node starts when its
    device has finished the previous node in its ``order`` and every input has arrived on its device.
    A node whose inputs arrive late stalls its device even if a later node could run.
  - ``dynamic`` (TensorFlow's executor without control dependencies, as Baechi and Celeritas run):
    a free device runs one of its ready nodes (every input arrived), in the executor's order, which
    depends on the device's kind (TF's ``executor.cc`` ``ExecutorState::ScheduleReady``/``Process``
    and ``OpKernel``'s ``expensive_``, which is false exactly for kernels on a GPU):

    * A GPU (its ``tf_device`` names ``device:GPU``): FIFO by readiness. TF counts every GPU kernel
      as cheap, so the executor runs each ready op inline, first ready first (its ``inline_ready``
      deque), enqueueing the kernel on the device's compute stream, which runs kernels in the order
      they were enqueued. Ties (nodes ready at the same instant) go by the ``order`` annotation,
      then the graph index.
    * Any other device (a CPU, as on the rig): **newest first**. A CPU kernel is expensive; when a
      node finishes, the executor runs the last of its newly ready successors next on the same
      thread and pushes the others on the front of the pool thread's queue (Eigen's ``RunQueue``:
      the owner pushes and pops at the front), so the device runs the node made ready most recently
      by one of its own nodes, a stack. A node made ready by a value from another device (the
      thread that received it schedules it) goes to the back of the queue and runs when the stack
      is empty, first arrived first; so do the step's initial nodes. Ties: a finished node's newly
      ready successors are pushed in the graph index's successor order (the last one runs first,
      as TF runs the last one inline); arrivals at the same instant and the initial nodes go by
      ``order``, then the graph index. Traced on the rig (``devtools/trace_order.py``; 30 placements,
      ``benchmarks/results/fidelity-notes.md``), the workers chose this way in 99.1 % of the 84,905
      choices where it and first-ready-first differ (first-ready-first: 0.1 %), and ran local work
      before an arrived tensor's consumer in 99.9 % of 17,885.

    Events at one instant are all processed before any device picks its next node, so the choice
    does not depend on the order in which simultaneous events are popped.

* A node's duration is its ``cost`` for the kind of the device it is placed on (heterogeneous
  clusters get per-kind times) plus the device's ``op_overhead`` (the executor's per-op dispatch,
  0 unless the cluster gives it).
* A value consumed on another device is sent once per (value, destination device), when its
  producer finishes, over its route in the link model (:class:`graphir.links.LinkModel`). A
  transfer occupies every shared resource of its route (which resources depends on the congestion
  rule, ``congestion=pair|port|task|topology``: see :mod:`graphir.links`) and starts when all of
  them are free: transfers queue behind each other in the order they were requested (producer
  finish time; ties in the order the producers started, then by destination node). Under the
  papers' rules the whole ``latency + bytes / bandwidth`` holds the route; under ``topology`` only
  ``bytes / bandwidth`` does, and the latency is a delay in flight
  (:meth:`graphir.links.LinkModel.book`). Communication overlaps computation, except under
  ``task`` (Celeritas §6.1), where a transfer also occupies the compute of both devices, and under
  ``topology`` on a cluster with a measured ``transfer_cpu`` (the rig), where a transfer charges its
  serialisation to the sender's and the receiver's compute: a node then starts no earlier than its
  device's compute resource is free, and books it until it finishes, in the same FIFO. Bookings
  are made when the transfer or node is queued, possibly for a later time (a node that becomes
  startable meanwhile waits behind them).
* How the runtime serves transfers (:class:`graphir.cluster_model.TransferService`, ``topology``
  only; off by default and on every paper preset, on for the rig; ``control_sends`` is under the
  control edges below):

  - ``serve_when_idle``: a device answers a peer's requests only at an *idle moment* (it has no
    node it could start: ``enforced``, its next node waits for an input or it has none left;
    ``dynamic``, nothing is ready), as a TF worker's one compute thread does. A device makes its
    requests for all its inputs at its first idle moment of the step (TF runs the ``_Recv`` ops,
    roots queued behind the executor's own ready work, then); they reach each peer one latency
    later, and the peer answers them at that instant if it is idle then (or running nothing yet
    before a node booked later), else at its next idle moment: every tensor for that device made
    so far leaves then, in the order made, and later ones leave when made.
  - ``send_when_idle`` (``enforced`` only): a tensor made on a device leaves at the device's next
    idle moment (its next node in ``order`` cannot start when its predecessor ends, or it has none
    left), not when it is made: TF runs the next node of the order inline and queues the ``_Send``
    behind it, at the front of its pool's queue, so at the idle moment the waiting tensors leave
    newest first. With ``serve_when_idle`` too, the peer's request must have been heard by then.
  - ``recv_cpu_preempts``: the receive CPU of a transfer is not booked on the receiver's compute;
    the node running on the receiver when the bytes arrive (``start + latency``) takes that much
    longer (its finish event is pushed back when it comes up), a receive that overlaps a node's
    start by part of its time adds that part, and one in an idle gap costs nothing.
  - ``transfer_lanes``: each device's sends and receives share one serial lane (its core's
    transfer CPU) and the route holds nothing (:mod:`graphir.links`, "Transfer lanes"); a
    receive's CPU runs when the receiver's lane is free, and that is when ``recv_cpu_preempts``
    charges it to the node running there.
* A control edge (a dependency without data) delays its consumer until the producer finished,
  plus the link latency when the two are on different devices; it occupies no channel. Under
  ``topology`` on a cluster whose runtime says ``control_sends`` (TF: a ``_Send``/``_Recv`` of a
  dummy tensor), it is instead a transfer of 0 bytes, once per (source, receiving device), booked
  like any other (route, fixed overhead, transfer CPU, ``serve_when_idle``).
* Memory per device = persistent bytes of its nodes (``mem.persistent``) for the whole run, plus
  live activations: a result occupies its producer's device from the producer's start until its
  last local consumer finished and every transfer of it completed (graph outputs stay to the end);
  a received copy occupies the destination from the transfer's start until its last consumer
  there finished; ``mem.temporary`` is held while the node runs. At equal times frees come before
  allocations. A device whose peak exceeds its memory is reported as out of memory (OOM). The
  accounting is :mod:`graphir.memory`'s (``liveness``), the one the memory-aware placers use.

The event loop is O((V + E) log V) over the graph's array view.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq

import numpy as np

from graphir.errors import PassError
from graphir.index import GraphIndex
from graphir.ir import Module
from graphir.links import CONGESTION_RULES, LinkModel
from graphir.memory import output_mask, peak_memory

ORDERS = ("enforced", "dynamic")
"""Execution-order semantics of :func:`simulate` (see the module docstring)."""

ORDER_METADATA = "execution_order"
"""The module attribute recording which order a placement runs under (absent: ``enforced``).

``place`` writes it from the placer (:attr:`graphir.passes.place.Placer.execution_order`),
``schedule{order=...}`` from its option; the TF lowering adds the per-device control dependencies
exactly when it says ``enforced``, and :func:`simulate` defaults to it, so the two agree."""


def recorded_order(module: Module) -> str:
    """The execution order ``module``'s placement runs under (:data:`ORDER_METADATA`; ``enforced`` when absent).

    Raises:
        PassError: the attribute holds something other than one of :data:`ORDERS`.
    """
    recorded = module.metadata.get(ORDER_METADATA, "enforced")
    if recorded not in ORDERS:
        raise PassError(f"module attribute {ORDER_METADATA} = {recorded!r}: expected one of {', '.join(ORDERS)}")
    return str(recorded)


def record_order(module: Module, order: str) -> None:
    """Record that ``module``'s placement runs under ``order`` (``enforced`` is the attribute's absence)."""
    if order is None:
        order = recorded_order(module)
    if order not in ORDERS:
        raise PassError(f"unknown execution order '{order}': expected one of {', '.join(ORDERS)}")
    if order == "enforced":
        module.metadata.pop(ORDER_METADATA, None)
    else:
        module.metadata[ORDER_METADATA] = order


@dataclasses.dataclass
class SimResult:
    """What a simulation measured (times in seconds, sizes in bytes).

    Attributes:
        makespan: finish time of the last node (0 for an empty graph).
        start, finish: per node, in the graph index's topological numbering.
        device_names: devices of the cluster, in cluster order.
        busy: compute seconds per device.
        peak_memory: peak bytes per device (persistent + activations + temporaries).
        persistent: persistent bytes per device.
        memory_limit: capacity per device.
        link_bytes: bytes moved per ordered pair ``(src, dst)`` (only pairs that moved data).
        link_busy: seconds each used channel spent transferring.
        transfers: number of tensor transfers.
        transfer_log: every transfer as ``(value, src device, dst device, start, end)`` (value in
            the graph index's value numbering, devices by cluster position), in the order the
            transfers were queued (built on first use from ``arrival``).
        arrival: per ``(value, dst device)``, the transfer's ``(start, end)``, in queueing order.
        value_device: the producing device of every value (cluster position).
    """

    makespan: float
    start: np.ndarray
    finish: np.ndarray
    device_names: tuple[str, ...]
    busy: np.ndarray
    peak_memory: np.ndarray
    persistent: np.ndarray
    memory_limit: np.ndarray
    link_bytes: dict[tuple[str, str], int]
    link_busy: dict[tuple[str, str], float]
    transfers: int
    arrival: dict[tuple[int, int], tuple[float, float]] = dataclasses.field(default_factory=dict, repr=False)
    value_device: list[int] = dataclasses.field(default_factory=list, repr=False)

    @functools.cached_property
    def transfer_log(self) -> list[tuple[int, int, int, float, float]]:
        """Every transfer as ``(value, src device, dst device, start, end)`` (see the class docstring)."""
        source = self.value_device
        return [(x, source[x], dst, begin, end) for (x, dst), (begin, end) in self.arrival.items()]

    @property
    def oom_devices(self) -> list[str]:
        """Devices whose peak memory exceeds their capacity."""
        limits = zip(self.device_names, self.peak_memory, self.memory_limit, strict=True)
        return [name for name, peak, capacity in limits if peak > capacity]


def newest_first_device(tf_device: str) -> bool:
    """Whether ``dynamic`` runs a device's newest ready node first (any device but a GPU; see the module docstring)."""
    return "DEVICE:GPU" not in tf_device.upper()


def _check_placed(index: GraphIndex, device_of_name: dict[str, int]) -> None:
    """Raise the :class:`PassError` for the first node without ``device`` or ``order``, or on an unknown device."""
    for node in index.nodes:
        if node.device is None or node.order is None:
            missing = "device" if node.device is None else "order"
            raise PassError(f"node '{node.name}' has no '{missing}': place and schedule the graph first")
        if node.device not in device_of_name:
            raise PassError(f"node '{node.name}' is placed on unknown device '{node.device}'")
    raise AssertionError("_check_placed found no fault")


def _check_rules(congestion: str, order: str) -> None:
    """Reject an unknown congestion rule or execution order."""
    if congestion not in CONGESTION_RULES:
        raise PassError(f"unknown congestion rule '{congestion}': expected one of {', '.join(CONGESTION_RULES)}")
    if order not in ORDERS:
        raise PassError(f"unknown execution order '{order}': expected one of {', '.join(ORDERS)}")


def simulate(module: Module, congestion: str = "topology", order: str | None = None) -> SimResult:
    """Simulate the placed and ordered graph of ``module``.

    Args:
        module: a module whose nodes carry ``device``, ``order`` and ``cost``.
        congestion: the congestion rule of the link model (:data:`graphir.links.CONGESTION_RULES`).
        order: ``enforced`` (per-device ``order``) or ``dynamic`` (TensorFlow's executor); None or
            ``recorded``: the one the placement recorded (:func:`recorded_order`).

    Raises:
        PassError: a node lacks ``device``, ``order`` or a cost for its device kind, or the
            per-device orders deadlock against the data dependencies.
    """
    if order is None or order == "recorded":
        order = recorded_order(module)
    index = module.graph.index()
    n = index.num_nodes
    device_of_name = {name: k for k, name in enumerate(module.cluster.device_names)}
    placed = index.annotation_list("device")
    ordered = index.annotation_list("order")
    try:
        dev = [device_of_name[name] for name in placed]
    except KeyError:  # None or an unknown device: name the first node at fault
        dev = []
    if len(dev) != n or None in ordered:
        _check_placed(index, device_of_name)
    device = np.asarray(dev, dtype=np.int64) if n else np.empty(0, dtype=np.int64)
    position = np.asarray(ordered, dtype=np.int64) if n else np.empty(0, dtype=np.int64)
    return simulate_placement(module, device, position, congestion, order)


def simulate_placement(
    module: Module, device: np.ndarray, position: np.ndarray, congestion: str = "topology", order: str = "enforced"
) -> SimResult:
    """Simulate ``module`` placed by arrays instead of its ``device`` and ``order`` annotations.

    The same simulation as :func:`simulate` (which reads the annotations and calls this); the
    module is only read, so a placer can judge many candidate placements without copying it.

    Args:
        module: a module whose nodes carry ``cost`` (placement annotations are ignored).
        device: device number (cluster order) per node, in the graph index's numbering.
        position: per node, its place in its device's execution order (``order``).
        congestion: the congestion rule, as :func:`simulate`.
        order: the execution-order semantics, as :func:`simulate`.
    """
    _check_rules(congestion, order)
    dynamic = order == "dynamic"
    graph = module.graph
    index = graph.index()
    cluster = module.cluster
    n = index.num_nodes
    names = cluster.device_names
    num_devices = len(names)
    device = np.asarray(device, dtype=np.int64)
    position = np.asarray(position, dtype=np.int64)
    dev = device.tolist()

    # Durations on each node's own device kind.
    duration = np.zeros(n)
    kinds = [d.kind for d in cluster.devices]
    for kind in sorted(set(kinds)):
        times = index.times(kind)
        on_kind = np.isin(device, [k for k, name in enumerate(kinds) if name == kind])
        missing = on_kind & np.isnan(times)
        if missing.any():
            node = index.nodes[int(np.flatnonzero(missing)[0])]
            raise PassError(f"node '{node.name}' has no cost for device kind '{kind}': run 'profile' first")
        duration[on_kind] = times[on_kind]
        overhead = cluster.kind_device(kind).op_overhead
        if overhead:  # the executor's per-op dispatch beyond the measured cost (0: unchanged times)
            duration[on_kind] += overhead

    # Per-device sequences.
    sequence_order = np.lexsort((position, device))
    bounds = np.searchsorted(device[sequence_order], np.arange(num_devices + 1))
    sequences = [sequence_order[bounds[d] : bounds[d + 1]].tolist() for d in range(num_devices)]

    links = LinkModel.from_cluster(cluster, congestion)
    compute_resource = links.compute_resource
    blocking = compute_resource[0] >= 0 if num_devices else False  # transfers and nodes share each device's compute
    book = links.book
    latency_between = links.latency_between
    preempts = links.recv_cpu_preempts  # the receive CPU stretches what runs on the receiver's core
    recv_seconds = links.transfer_cpu.recv_seconds if preempts and links.transfer_cpu is not None else None

    succ_offsets = index.succ_offsets.tolist()
    succ_dst = index.edge_dst[index.succ_edge].tolist()  # per successor entry: its node and value
    succ_value = index.edge_value[index.succ_edge].tolist()
    value_bytes = index.value_bytes.tolist()
    dur = duration.tolist()
    pos = position.tolist()
    heappush, heappop = heapq.heappush, heapq.heappop

    pending = np.bincount(index.edge_dst, minlength=n).tolist() if index.num_edges else [0] * n
    ready = [0.0] * n
    start = [0.0] * n
    finish = [0.0] * n
    head = [0] * num_devices
    runs = [[*sequence, -1] for sequence in sequences]  # enforced: the order, then a sentinel
    busy_flag = [False] * num_devices
    resource_free = [0.0] * links.num_resources  # when each shared resource (channel, port, ...) is free
    arrival: dict[tuple[int, int], tuple[float, float]] = {}  # (value, dst device) -> (start, end)
    moved = [0] * (num_devices * num_devices)  # bytes per ordered pair, row-major
    held_s = [0.0] * (num_devices * num_devices)  # seconds each pair's transfers held their routes
    events: list[tuple[float, int, int]] = []  # (time, sequence number, node finishing or ~node ready)
    seq = 0
    done = 0
    # ``dynamic``: per device, the nodes whose inputs have all arrived, keyed (ready time, order, node):
    # every one on a GPU; on another device (newest first) those made ready by an arrival, the initial
    # ones, and a stack of those made ready by the device's own nodes, which runs first (top last).
    queues: list[list[tuple[float, int, int]]] = [[] for _ in range(num_devices)]
    stacks: list[list[int]] = [[] for _ in range(num_devices)]
    newest_first = [newest_first_device(d.tf_device) for d in cluster.devices]
    # ``serve_when_idle`` (pairs p -> d at p * D + d): whether p sends d's tensors when made (it
    # answered d's requests), the successor entries whose transfer waits for that, whether d's
    # requests have reached p; per device, whether it has made its requests, and whether its next
    # idle moment has anything to do (make its requests or answer requests it heard).
    service = links.serve_when_idle
    send_idle = links.send_when_idle and not dynamic  # every tensor waits for its device's next idle moment
    pairs = num_devices * num_devices
    served = [not (service or send_idle) or p % (num_devices + 1) == 0 for p in range(pairs)]
    deferred: list[list[tuple[int, int]]] = [[] for _ in range(pairs)] if service or send_idle else []
    heard = [not service] * pairs
    asked = [not service] * num_devices
    alert = [service] * num_devices
    request_event = n  # an event u >= n: (u - n) = d * D + p, device d's requests reach device p
    # ``recv_cpu_preempts``: per device, the receive CPU due on its core, as (bytes arrive, seconds).
    charges: list[list[tuple[float, float]]] = [[] for _ in range(num_devices)]
    control_sends = links.control_sends  # a control edge between devices is an empty tensor's transfer
    signalled: dict[tuple[int, int], float] = {}  # (control source, device) -> when the empty tensor arrived

    def send(x: int, du: int, dv: int, now: float) -> tuple[float, float]:
        """Queue value ``x``'s transfer ``du -> dv`` requested at ``now``; return its ``(start, end)``."""
        begin, end, held = book(resource_free, now, value_bytes[x], du, dv)  # FIFO on every resource (links.book)
        sent = (begin, end)
        arrival[(x, dv)] = sent
        moved[du * num_devices + dv] += value_bytes[x]
        held_s[du * num_devices + dv] += held
        if recv_seconds is not None:
            heappush(charges[dv], (links.receive_start, recv_seconds(value_bytes[x])))
        return sent

    def signal(u: int, du: int, dv: int, now: float) -> float:
        """When device ``dv`` learns that ``u`` (on ``du``) finished at ``now`` (a control edge)."""
        if not control_sends:  # a signal: the latency only
            return now + latency_between(du, dv)
        when = signalled.get((u, dv))
        if when is None:  # one empty tensor per (source, device), booked like a transfer of 0 bytes
            _, when, held = book(resource_free, now, 0, du, dv)
            held_s[du * num_devices + dv] += held
            if recv_seconds is not None:
                heappush(charges[dv], (links.receive_start, recv_seconds(0)))
            signalled[(u, dv)] = when
        return when

    def serve(p: int, d: int, now: float) -> list[int]:
        """Device ``p`` answers device ``d``'s requests at ``now``: send what was made; return the startable nodes."""
        if not send_idle:  # from now on p's tensors for d leave when made
            served[p * num_devices + d] = True
        startable = []
        waiting = deferred[p * num_devices + d]
        for k, u in reversed(waiting) if send_idle else waiting:  # queued _Sends: newest first
            v = succ_dst[k]
            x = succ_value[k]
            if x < 0:  # control edge
                when = signal(u, p, d, now)
            else:
                sent = arrival.get((x, d))
                when = (sent if sent is not None else send(x, p, d, now))[1]
            if when > ready[v]:
                ready[v] = when
            pending[v] -= 1
            if pending[v] == 0:
                startable.append(v)
        deferred[p * num_devices + d] = []
        return startable

    def on_idle(d: int, now: float) -> list[int]:
        """Device ``d`` has no ready work at ``now``: it makes its requests (once) and answers those it heard."""
        nonlocal seq
        alert[d] = False
        if not asked[d]:
            asked[d] = True
            for p in range(num_devices):
                if p != d:
                    heappush(events, (now + latency_between(d, p), seq, request_event + d * num_devices + p))
                    seq += 1
        startable = []
        for q in range(num_devices):
            if heard[d * num_devices + q] and not served[d * num_devices + q]:
                startable += serve(d, q, now)
        return startable

    def launch(d: int, v: int, begin: float) -> None:
        """Start node ``v`` on device ``d`` at ``begin`` (later if the device's compute resource is booked then)."""
        nonlocal seq
        if blocking:
            r = compute_resource[d]
            if resource_free[r] > begin:
                begin = resource_free[r]
            resource_free[r] = begin + dur[v]
        start[v] = begin
        busy_flag[d] = True
        heappush(events, (begin + dur[v], seq, v))
        seq += 1

    def offer(d: int, now: float) -> None:
        """``enforced``: start device ``d``'s next node if it is free and the node can start."""
        v = runs[d][head[d]]
        if busy_flag[d] or v < 0 or pending[v]:
            return
        launch(d, v, ready[v] if ready[v] > now else now)

    def stretched(u: int, now: float) -> bool:
        """Stretch ``u`` (finishing at ``now``) by the receive CPU due on its core while it ran; whether it was."""
        nonlocal seq
        d = dev[u]
        due = charges[d]
        began = start[u]
        extra = 0.0
        while due and due[0][0] < now:
            at, seconds = heappop(due)
            if at >= began:
                extra += seconds
            elif at + seconds > began:  # begun in the idle gap before u, overlapping u's start
                extra += at + seconds - began
        if extra <= 0.0:
            return False
        heappush(events, (now + extra, seq, u))
        seq += 1
        if blocking and resource_free[compute_resource[d]] < now + extra:
            resource_free[compute_resource[d]] = now + extra
        return True

    # Starting a node (``launch``; ``offer`` under ``enforced``): ``enforced`` starts device d's next
    # node in ``order`` once its inputs are in, at max(now, ready); ``dynamic`` pops d's next node
    # at now (the top of its stack, else its first-ready queued node). Under a compute resource
    # (``task``, or a transfer CPU charge) the node also waits for it and books it until it finishes
    # (Celeritas §6.1: the device's compute is one resource with its transfers). Then the device is
    # busy and the node's finish is an event.
    if dynamic:
        for v in range(n):
            if pending[v] == 0:
                queues[dev[v]].append((0.0, pos[v], v))
        for queue in queues:
            heapq.heapify(queue)
        initial = [d for d in range(num_devices) if queues[d]]
    else:
        initial = [d for d in range(num_devices) if runs[d][0] >= 0 and not pending[runs[d][0]]]
    for d in initial:
        v = heappop(queues[d])[2] if dynamic else runs[d][0]
        launch(d, v, ready[v])
    if service:  # a device with nothing to run at 0 makes its requests then
        for d in range(num_devices):
            if not busy_flag[d]:
                on_idle(d, 0.0)
    dirty: list[int] = []  # dynamic: devices to offer a node once every event of this instant is in
    while events:
        now, _, u = heappop(events)
        if u < 0:  # dynamic: the last input of ~u arrived
            v = ~u
            heappush(queues[dev[v]], (ready[v], pos[v], v))
            dirty.append(dev[v])
        elif u >= request_event:  # device d's requests reach device p: answered now if p is idle
            d, p = divmod(u - request_event, num_devices)
            heard[p * num_devices + d] = True
            waiting = runs[p][head[p]] if not dynamic else -1
            if busy_flag[p] and not (waiting >= 0 and start[waiting] > now):  # p busy: at its next idle moment
                alert[p] = True
            else:
                for w in serve(p, d, now):
                    if dynamic:
                        heappush(events, (ready[w], seq, ~w))
                        seq += 1
                    else:
                        offer(dev[w], now)
        elif preempts and charges[dev[u]] and charges[dev[u]][0][0] < now and stretched(u, now):
            pass  # u runs on: its finish is an event again
        else:
            finish[u] = now
            done += 1
            du = dev[u]
            busy_flag[du] = False
            head[du] += 1
            touched: list[int] = []
            for k in range(succ_offsets[u], succ_offsets[u + 1]):
                v = succ_dst[k]
                dv = dev[v]
                if dv == du:
                    when = now
                elif not served[du * num_devices + dv]:  # dv's request (or the send) waits for du's next idle moment
                    deferred[du * num_devices + dv].append((k, u))
                    if send_idle:
                        alert[du] = True
                    continue
                else:
                    x = succ_value[k]
                    if x < 0:  # control edge: a zero-byte signal, no channel (or an empty tensor's transfer)
                        when = signal(u, du, dv, now) if control_sends else now + latency_between(du, dv)
                    else:
                        sent = arrival.get((x, dv))
                        if sent is None:
                            sent = send(x, du, dv, now)
                        when = sent[1]
                if when > ready[v]:
                    ready[v] = when
                pending[v] -= 1
                if pending[v] == 0:
                    touched.append(v)
            if not dynamic:
                candidates = [du, *[dev[v] for v in touched]] if touched else [du]
                for d in candidates:  # (grows while iterated when a device serves its peers)
                    if busy_flag[d]:
                        continue
                    v = runs[d][head[d]]
                    if alert[d] and (v < 0 or pending[v] or ready[v] > now):  # idle from now
                        candidates.extend(dev[w] for w in on_idle(d, now))
                    offer(d, now)
                continue
            dirty.append(du)
            for v in touched:
                if ready[v] > now:
                    heappush(events, (ready[v], seq, ~v))
                    seq += 1
                else:
                    dv = dev[v]
                    if dv == du and newest_first[dv]:  # made ready by du's own node: on top of its stack
                        stacks[dv].append(v)
                    else:
                        heappush(queues[dv], (ready[v], pos[v], v))
                    dirty.append(dv)
        if dirty and (not events or events[0][0] > now):
            for d in sorted(set(dirty)) if len(dirty) > 1 else dirty:
                if busy_flag[d]:
                    continue
                if stacks[d]:
                    launch(d, stacks[d].pop(), now)
                    continue
                if not queues[d]:
                    if alert[d]:  # idle from now: requests made and answered
                        for w in on_idle(d, now):
                            heappush(events, (ready[w], seq, ~w))
                            seq += 1
                    continue
                launch(d, heappop(queues[d])[2], now)
            dirty.clear()
    if done != n:
        stuck = [index.nodes[sequences[d][head[d]]].name for d in range(num_devices) if head[d] < len(sequences[d])]
        raise PassError(f"the per-device orders deadlock: nothing can run next among {', '.join(stuck)}")

    start_arr = np.asarray(start)
    finish_arr = np.asarray(finish)
    makespan = float(finish_arr.max()) if n else 0.0
    busy = np.bincount(device, weights=duration, minlength=num_devices) if n else np.zeros(num_devices)
    persistent = np.bincount(device, weights=index.persistent_bytes(), minlength=num_devices).astype(np.int64)
    outputs = output_mask(graph, index)
    peak = peak_memory(index, outputs, device, start_arr, finish_arr, arrival, makespan, num_devices) + persistent
    value_device = device[index.value_producer].tolist()
    link_bytes = np.asarray(moved, dtype=np.int64).reshape(num_devices, num_devices)
    link_busy = np.asarray(held_s, dtype=np.float64).reshape(num_devices, num_devices)
    pairs = {(names[a], names[b]) for a, b in zip(*np.nonzero(link_bytes), strict=True)}
    return SimResult(
        makespan=makespan,
        start=start_arr,
        finish=finish_arr,
        device_names=names,
        busy=busy,
        peak_memory=peak,
        persistent=persistent,
        memory_limit=np.asarray([d.memory for d in cluster.devices], dtype=np.int64),
        link_bytes={p: int(link_bytes[names.index(p[0]), names.index(p[1])]) for p in sorted(pairs)},
        link_busy={p: float(link_busy[names.index(p[0]), names.index(p[1])]) for p in sorted(pairs)},
        transfers=len(arrival),
        arrival=arrival,
        value_device=value_device,
    )
