"""The fidelity rig: a placed module run on pinned local TensorFlow workers, with step statistics.

Logical CPU devices of one process share one thread pool, so their "parallel" ops are not. The rig
instead runs TensorFlow's own distributed runtime on this machine:

* **Workers.** One ``tf.distribute.Server`` process per ``/job:worker/task:k`` of the cluster
  (:func:`graphir.backends.tf.distributed.start_local_servers`), on a free localhost port, pinned
  to core ``k mod ncores`` (``sched_setaffinity`` in the child before TensorFlow starts a thread:
  what ``taskset -c k`` does) with intra- and inter-op thread pools of one thread each. Transfers
  between tasks go over TF's gRPC ``RecvTensor``. Leaving :func:`rig` stops the workers (SIGTERM,
  then SIGKILL after a bounded wait); start-up is bounded too.
* **Memory.** The workers allocate tensors through TF's BFC allocator
  (``TF_CPU_ALLOCATOR_USE_BFC=true``, :data:`WORKER_ENVIRONMENT`), as TF does on a GPU: memory is
  taken from the system once and reused from step to step. With TF's default CPU allocator
  (``malloc``), large tensors are mapped afresh every step and their first write page-faults inside
  the kernel that makes them, so a kernel's time depended on how much memory the whole placement
  and order kept live, which no per-node cost can carry: the 6-layer GPT training step of
  the fidelity benchmark, profiled on one worker, summed 0.61 s of kernels with ``malloc`` (its
  embedding gradient's ``UnsortedSegmentSum`` 23 ms, 0.7-5 ms in its split runs) and 0.47 s with BFC.
* **Client.** The caller's process holds the ``tf.compat.v1.Session`` (target: task 0's master).
  During a step it only waits for the master's reply, so it does not compete for the workers'
  cores beyond the per-step RPCs.
* **Inputs.** Each step's inputs are seeded once and are the same every step. An input whose
  placeholder is placed on another task than the session's master (task 0) is held on its own
  task (``SessionRunner(held_inputs=...)``, :func:`~graphir.backends.tf.run.remote_feeds`): fed,
  it would reach its task only when task 0's one compute thread ran out of work, which serialised
  the replicas of the data-parallel pair (``benchmarks/results/fidelity-allreduce-notes.md``); the
  simulator, like one input pipeline per worker, has every input on its device at the step's start.
  Inputs of task 0 are fed, as before, unless the module has fused kernels (``kernel``
  annotations, marked as XLA clusters by the lowering): then every input is held, since a fed
  input enters the master's graph as a ``_Recv`` that XLA's deadness analysis gives its own
  predicate, which splits the clusters downstream of it (``benchmarks/results/xla-fusion-notes.md``).
* **XLA.** The workers start with ``TF_XLA_FLAGS`` set (:data:`graphir.backends.tf.session.XLA_FLAGS`):
  the master clusters the marked ops, and the worker of each cluster's device compiles and runs it.
* **Step time.** ``warmup`` untraced steps, then ``steps`` untraced timed steps: the wall time of
  ``session.run`` in the client, and the median over the timed steps (:attr:`RigRun.median_s`).
  Tracing is off for these steps, so the statistics collection does not slow them.
* **Step statistics.** Then ``trace_steps`` more steps with ``RunOptions(trace_level=FULL_TRACE,
  output_partition_graphs=True)``; from their ``RunMetadata``, per TF op (median over the traced
  steps):

  - its **kernel time**: ``op_end_rel - op_start_rel`` of its ``NodeExecStats`` on the device it ran
    on (the worker's executor gap between kernels is not part of it: that is the cluster's
    per-op overhead, see :func:`graphir.passes.profile.calibrate_comm.calibrate_rig`);
  - for every tensor that crossed tasks, its **transfer time**: from the end of the producing op's
    kernel on the sending task (the moment ``_Send`` hands the tensor to the rendezvous) to the end
    of the receiving task's ``RecvTensor`` RPC (the tensor is in the receiver's memory), both read
    from the same machine's wall clock (``all_start_micros`` of the stats). The bytes are the
    ``RecvTensor`` record's. ``_Send``/``_Recv`` ops themselves report no step statistics in a
    distributed run; the partition graphs (``output_partition_graphs``) name each ``_Send``'s
    producer and its ``tensor_name``, which the ``RecvTensor`` record quotes.

Times are seconds. Device strings are normalised (``/replica:0`` dropped) so they compare with the
cluster's ``tf_device``. TensorFlow is imported inside the functions only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from graphir.cluster import Cluster, TransferService
from graphir.errors import BackendError, GraphIRError
from graphir.hostcpu import available_cores
from graphir.ir import Module

__all__ = [
    "WORKER_ENVIRONMENT",
    "WORKER_SERVICE",
    "OpStat",
    "RigCalibration",
    "RigRun",
    "StepTrace",
    "TransferStat",
    "calibration_runs",
    "graph_gaps",
    "harvest",
    "normalise_device",
    "parse_step_stats",
    "process_cpu_seconds",
    "rig",
    "rig_cores",
    "run_on_rig",
    "transfer_cpu_runs",
]

WORKER_ENVIRONMENT = {"TF_CPU_ALLOCATOR_USE_BFC": "true"}
"""Set in every rig worker's environment: TF's BFC allocator for CPU tensors (see the module docstring)."""

WORKER_SERVICE = TransferService(
    serve_when_idle=True, recv_cpu_preempts=True, control_sends=True, send_when_idle=True, transfer_lanes=True
)
"""How the rig's workers serve transfers (``[runtime]`` of the calibrated cluster file), from how :func:`rig`
starts them, not fitted: each worker's compute pool is one thread on one pinned core, and TF's gRPC
worker service answers a peer's ``RecvTensor`` on that pool, behind the executor's own ready work
(``serve_when_idle``); the gRPC threads that receive a tensor are other threads of the process on
the same core, which the OS time-shares with the running kernel (``recv_cpu_preempts``); a control
dependency between tasks is a ``_Send``/``_Recv`` of a dummy tensor (``control_sends``: the rig's
step statistics count one ``RecvTensor`` per control source and receiving task, e.g. 1,824 against
the 1,406 value transfers of resnet50-train's balanced split, 418 control sources). Measured
on the rig (a one-off script, 02:07 UTC 2026-11-24, see ``benchmarks/results/fidelity-notes.md``):
a 4 KB tensor made on worker 0 before a chain of dependent 512² MatMuls reached worker 1 0.35 ms
after it was made with no chain, 37 ms after with a 30 ms chain and 105 ms after with a 101 ms one.
Under the ``enforced`` order the next node of the device's order runs inline on the thread that
finished its predecessor and the ``_Send`` waits behind it in the pool's queue
(``send_when_idle``): in inception_v1's balanced split traced on the rig (07:02-07:06 UTC 2026-11-24, load 2.7-3.7,
three steps, 41 tensors each after the weights), the sender began sending (the response's
``send_start_micros``, the step statistics' ``RecvTensor`` start) within 0.2 ms of its next idle
moment for 76-88 % of the tensors and within 0.1 ms of the producer's end for 24 %; in dynamic
order 90 % left within 0.1 ms of the producer's end. Of the tensors whose sender kept running more
than 0.5 ms after making them, 89-100 % left at or after its next idle moment and none before, in
inception_v1 balanced, gpt-train balanced and lstm-train fine splits alike (enforced), the newest
first (see ``benchmarks/results/fidelity-notes.md``). A transfer is CPU on both ends and the loopback
is no resource: each worker's sends and receives run on its one core, one after the other
(``transfer_lanes``; :func:`stream_runs` measures streams one way and both ways at once,
``benchmarks/results/ruler-stream.md``)."""

_REPLICA = re.compile(r"/replica:\d+")
_RECV_LABEL = re.compile(r"\]\s+(\S+) from (\S+) to (\S+)")


def normalise_device(device: str) -> str:
    """``/job:worker/replica:0/task:1/device:CPU:0`` -> ``/job:worker/task:1/device:CPU:0``."""
    return _REPLICA.sub("", device)


def rig_cores(count: int) -> list[int]:
    """Cores the ``count`` workers are pinned to: the process's allowed cores, one per task, wrapping."""
    allowed = available_cores()
    return [allowed[k % len(allowed)] for k in range(count)]


@contextlib.contextmanager
def rig(cluster: Cluster, timeout_s: float = 120.0, pin: bool = True) -> Iterator[Any]:
    """Start the cluster's pinned, single-threaded local workers; stop them on exit (see the module docstring).

    Yields:
        The :class:`~graphir.backends.tf.distributed.LocalServers`.

    A one-line error raised inside the block (a run that failed or reached its time limit) is
    completed with the workers that died or stopped answering
    (:meth:`~graphir.backends.tf.distributed.LocalServers.troubled`); every worker is stopped on the
    way out, whatever happened.
    """
    from graphir.backends.tf.distributed import cluster_tasks, start_local_servers
    from graphir.backends.tf.session import with_xla_flags

    cores = rig_cores(len(cluster_tasks(cluster))) if pin else None
    environment = {**WORKER_ENVIRONMENT, "TF_XLA_FLAGS": with_xla_flags(os.environ.get("TF_XLA_FLAGS"))}
    with start_local_servers(cluster, timeout_s=timeout_s, cores=cores, threads=1, environment=environment) as servers:
        try:
            yield servers
        except GraphIRError as exc:
            troubled = servers.troubled()  # before the servers are stopped: which died, which hang
            if troubled:
                exc.message = f"{exc.message}; {troubled} (every worker of the rig was stopped)"
            raise


@dataclasses.dataclass(frozen=True)
class OpStat:
    """One TF op's kernel in one traced step: its device and absolute start/end (seconds, wall clock)."""

    device: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        """Kernel time."""
        return self.end - self.start


@dataclasses.dataclass(frozen=True)
class TransferStat:
    """One tensor sent between tasks in one traced step.

    Attributes:
        producer: TF op name producing the tensor (``""`` when the partition graphs do not say).
        output: its output index.
        src: sending device; dst: receiving device (normalised).
        nbytes: bytes received.
        seconds: producer's kernel end to the receiver's ``RecvTensor`` end (see the module docstring).
    """

    producer: str
    output: int
    src: str
    dst: str
    nbytes: int
    seconds: float


@dataclasses.dataclass(frozen=True)
class StepTrace:
    """The statistics of one traced step: ops by TF name, and transfers."""

    ops: dict[str, OpStat]
    transfers: list[TransferStat]


def _sender_inputs(partition_graphs: Sequence[Any]) -> dict[str, str]:
    """``tensor_name`` of every ``_Send`` between tasks -> the TF tensor it sends (``op:k``)."""
    out = {}
    for graph in partition_graphs:
        for node in graph.node:
            if node.op not in ("_Send", "_HostSend") or not node.input:
                continue
            src = normalise_device(node.attr["send_device"].s.decode())
            dst = normalise_device(node.attr["recv_device"].s.decode())
            if src != dst:
                out[node.attr["tensor_name"].s.decode()] = node.input[0]
    return out


def _resolve_producer(tensor: str, forwards: Mapping[str, str]) -> tuple[str, int]:
    """Follow ``_Recv``/``Identity`` forwards inserted by partitioning back to the op computing ``tensor``."""
    name, _, index = tensor.partition(":")
    seen = set()
    while name in forwards and name not in seen:
        seen.add(name)
        name, _, index = forwards[name].partition(":")
    return name, int(index or 0)


def parse_step_stats(metadata: Any) -> StepTrace:
    """Read ops' kernel times and transfers' times from one traced step's ``RunMetadata``."""
    ops: dict[str, OpStat] = {}
    receives: list[tuple[str, str, str, int, float]] = []
    for device_stats in metadata.step_stats.dev_stats:
        device = normalise_device(device_stats.device)
        for ns in device_stats.node_stats:
            base = ns.all_start_nanos * 1e-9 if ns.all_start_nanos else ns.all_start_micros * 1e-6
            if ns.node_name == "RecvTensor":
                match = _RECV_LABEL.search(ns.timeline_label)
                if match is None:
                    continue
                nbytes = sum(int(o.tensor_description.allocation_description.requested_bytes) for o in ns.output)
                end = ns.all_start_micros * 1e-6 + ns.all_end_rel_micros * 1e-6
                receives.append((match.group(1), normalise_device(match.group(2)), device, nbytes, end))
                continue
            if ns.op_end_rel_nanos or ns.op_start_rel_nanos:
                start, end = base + ns.op_start_rel_nanos * 1e-9, base + ns.op_end_rel_nanos * 1e-9
            else:
                start, end = base + ns.op_start_rel_micros * 1e-6, base + ns.op_end_rel_micros * 1e-6
            previous = ops.get(ns.node_name)
            if previous is not None:  # reported twice (two executors): keep the span
                start, end = min(start, previous.start), max(end, previous.end)
            ops[ns.node_name] = OpStat(device, start, end)
    senders = _sender_inputs(metadata.partition_graphs)
    forwards = {
        node.name: node.input[0]
        for graph in metadata.partition_graphs
        for node in graph.node
        if node.op in ("_Recv", "_HostRecv", "Identity") and node.input
    }
    transfers = []
    for tensor_name, src, dst, nbytes, end in receives:
        producer, output = _resolve_producer(senders.get(tensor_name, ""), forwards)
        stat = ops.get(producer)
        if stat is None:
            continue  # a fed or untraced producer: no send time to measure from
        transfers.append(TransferStat(producer, output, src, dst, nbytes, max(end - stat.end, 0.0)))
    return StepTrace(ops, transfers)


@dataclasses.dataclass
class RigRun:
    """A module measured on the rig.

    Attributes:
        times_s: wall time of every timed (untraced) step.
        median_s: their median.
        warmup: untimed steps run first.
        node_seconds: IR node name -> median kernel seconds (sum over the TF ops lowered from it).
        node_devices: IR node name -> normalised TF device it ran on.
        transfers: ``(IR value name, src device, dst device, bytes, median seconds)`` per tensor sent
            between tasks (the IR value is ``""`` when the producer maps to no IR node).
        traced_steps: traced steps the medians come from.
        ops: TF ops the traced steps report (a node may lower to several).
        op_seconds: sum of every reported TF op's median kernel seconds.
        node_memory: IR node name -> (output bytes, temporary bytes), medians over the traced steps
            summed over its TF ops (read as ``profile{mode=tf}`` reads them,
            :func:`graphir.backends.tf.measure.node_stats`).
        kernel_seconds: ``_XlaScope`` of each fused kernel (``LoweredGraph.kernels``) -> the median
            seconds of its cluster's ``_XlaRun`` plus ``_XlaCompile`` (the per-step cache lookup), the
            run matched to the set by :func:`graphir.backends.tf.xla.cluster_runs`. A kernel's nodes
            have no ``node_seconds``: their ops ran inside the cluster.
        xla_clusters: (kernel sets marked that the outputs depend on, ``_XlaRun`` ops in the last
            traced step).
    """

    times_s: list[float]
    median_s: float
    warmup: int
    node_seconds: dict[str, float]
    node_devices: dict[str, str]
    transfers: list[tuple[str, str, str, int, float]]
    traced_steps: int
    ops: int = 0
    op_seconds: float = 0.0
    node_memory: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    kernel_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    xla_clusters: tuple[int, int] = (0, 0)


def _median_ops(traces: Sequence[StepTrace]) -> dict[str, tuple[str, float]]:
    samples: dict[str, list[float]] = {}
    where: dict[str, str] = {}
    for trace in traces:
        for name, stat in trace.ops.items():
            samples.setdefault(name, []).append(stat.seconds)
            where[name] = stat.device
    return {name: (where[name], float(statistics.median(values))) for name, values in samples.items()}


def _median_transfers(traces: Sequence[StepTrace]) -> dict[tuple[str, int, str, str], tuple[int, float]]:
    samples: dict[tuple[str, int, str, str], list[tuple[int, float]]] = {}
    for trace in traces:
        for t in trace.transfers:
            samples.setdefault((t.producer, t.output, t.src, t.dst), []).append((t.nbytes, t.seconds))
    return {
        key: (max(b for b, _ in rows), float(statistics.median(s for _, s in rows))) for key, rows in samples.items()
    }


def run_on_rig(
    module: Module,
    servers: Any,
    *,
    steps: int = 5,
    warmup: int = 2,
    trace_steps: int = 3,
    seed: int = 0,
    variables: Mapping[str, Any] | None = None,
    enforce_order: bool | None = None,
    timeout_s: float | None = None,
    min_seconds: float = 0.0,
    max_steps: int = 200,
    what: str = "the rig run",
) -> RigRun:
    """Lower ``module`` and measure it on running rig ``servers`` (see the module docstring).

    Args:
        module: a module whose placed nodes name the servers' ``/job:worker/task:k`` devices
            (unplaced nodes run where TensorFlow puts them: task 0).
        servers: from :func:`rig`.
        steps: timed untraced steps (>= 1).
        warmup: untimed steps before them.
        trace_steps: traced steps after the timed ones (0: no statistics).
        seed: seeds inputs and variables not given.
        variables: given variable values (``{shared_name or node name: array}``).
        enforce_order: add the per-device order control dependencies (default: when the placement
            recorded the ``enforced`` order and every placed node has one).
        timeout_s: time limit of the whole measurement (``None``: the run time limit,
            :func:`graphir.runguard.run_timeout`).
        min_seconds: after the ``steps`` timed steps, keep timing steps until they add up to this many
            seconds (at most ``max_steps`` in all): a short step's median then rests on more samples.
        max_steps: bound of the timed steps under ``min_seconds``.
        what: the run, named in errors.
    """
    from graphir.backends.tf.lowering import lower
    from graphir.backends.tf.session import SessionRunner, random_inputs, random_variables, remote_feeds
    from graphir.backends.tf.tf_graphdef import variable_values

    if steps < 1:
        raise BackendError(f"the rig needs at least one timed step, got {steps}")
    if enforce_order is None:
        from graphir.backends.tf.lowering import enforces_order

        enforce_order = enforces_order(module)
    lowered = lower(module, enforce_order=enforce_order)
    given = {node.name: array for node, array in variable_values(module, variables or {}).items()}
    values = {**random_variables(module, seed, skip=set(given)), **given}
    drawn = dict(zip(lowered.feeds, random_inputs(module, lowered.input_names, seed), strict=True))
    # Fused kernels: every input held, since a fed one splits the XLA clusters downstream of it.
    holding = list(lowered.feeds) if lowered.kernels else remote_feeds(lowered, servers.master_task)
    held = {feed: drawn.pop(feed) for feed in holding}
    inputs = list(drawn.values())
    with SessionRunner(
        module, lowered, servers.target, variables=values, timeout_s=timeout_s, what=what, held_inputs=held
    ) as runner:
        for _ in range(warmup):
            runner.run(inputs)
        times: list[float] = []
        while len(times) < steps or (sum(times) < min_seconds and len(times) < max_steps):
            begin = time.perf_counter()
            runner.run(inputs)
            times.append(time.perf_counter() - begin)
        metadata = [runner.run_metadata(inputs) for _ in range(trace_steps)]
    return harvest(module, lowered, metadata, times, warmup)


def harvest(module: Module, lowered: Any, metadata: Sequence[Any], times: Sequence[float], warmup: int) -> RigRun:
    """A :class:`RigRun` from a lowered module's traced steps: per-node medians, transfers, memory.

    Args:
        module: the module ``lowered`` came from (IR value names of the transfers).
        lowered: its lowering (``node_ops``: IR node -> TF ops).
        metadata: the ``RunMetadata`` of each traced step (``FULL_TRACE``, partition graphs).
        times: wall seconds of the timed steps (their median is :attr:`RigRun.median_s`).
        warmup: untimed steps run before them (recorded).
    """
    from graphir.backends.tf.measure import node_stats

    traces = [parse_step_stats(m) for m in metadata]
    memory: dict[str, list[tuple[int, int]]] = {}
    for step in metadata:
        for op, (_, out, temp) in node_stats(step).items():
            memory.setdefault(op, []).append((out, temp))
    ops = _median_ops(traces)
    node_seconds: dict[str, float] = {}
    node_devices: dict[str, str] = {}
    node_memory: dict[str, tuple[int, int]] = {}
    op_node: dict[str, str] = {}
    for node_name, op_names in lowered.node_ops.items():
        measured = [ops[op] for op in op_names if op in ops]
        for op in op_names:
            op_node[op] = node_name
        if measured:
            node_seconds[node_name] = float(sum(seconds for _, seconds in measured))
            node_devices[node_name] = measured[-1][0]
        rows = [memory[op] for op in op_names if op in memory]
        if rows:
            node_memory[node_name] = (
                sum(int(np.median([r[0] for r in row])) for row in rows),
                sum(int(np.median([r[1] for r in row])) for row in rows),
            )
    transfers = []
    for (producer, output, src, dst), (nbytes, seconds) in sorted(_median_transfers(traces).items()):
        value = ""
        node = module.graph.get_node(op_node[producer]) if producer in op_node else None
        if node is not None and node.outputs:
            value = node.outputs[min(output, len(node.outputs) - 1)].name
        transfers.append((value, src, dst, nbytes, seconds))
    op_seconds = float(sum(seconds for _, seconds in ops.values()))
    kernel_seconds, clusters = _kernel_seconds(lowered, metadata, ops)
    return RigRun(
        list(times),
        float(np.median(times)),
        warmup,
        node_seconds,
        node_devices,
        transfers,
        len(traces),
        len(ops),
        op_seconds,
        node_memory,
        kernel_seconds,
        clusters,
    )


def _kernel_seconds(
    lowered: Any, metadata: Sequence[Any], ops: Mapping[str, tuple[str, float]]
) -> tuple[dict[str, float], tuple[int, int]]:
    """Each fused kernel's cluster seconds (``_XlaRun`` + ``_XlaCompile``) and (sets, runs) of the last step."""
    from graphir.backends.tf.xla import XLA_RUN_OP, cluster_runs, live_sets

    sets = list(getattr(lowered, "kernels", {}).values())
    if not sets or not metadata:
        return {}, (len(sets), 0)
    graph_def = lowered.graph_def(embed_weights=False)
    sets = live_sets(graph_def, sets, lowered.fetches)
    partitions = list(metadata[-1].partition_graphs)
    runs = sum(1 for part in partitions for node in part.node if node.op == XLA_RUN_OP)

    def same_device(actual: str, expected: str) -> bool:
        return normalise_device(actual).endswith(normalise_device(expected))

    matched = cluster_runs(graph_def, sets, partitions, same_device)
    seconds = {}
    for scope, run in matched.items():
        pair = (run, run.rsplit("/", 1)[0] + "/xla_compile")
        seconds[scope] = float(sum(ops[name][1] for name in pair if name in ops))
    return seconds, (len(sets), runs)


# --------------------------------------------------------------------------- calibration runs


@dataclasses.dataclass
class RigCalibration:
    """Raw measurements of the rig's micro-benchmarks (fitted by ``calibrate-comm{rig=true}``).

    Attributes:
        transfers: ``(src, dst) -> [(bytes, median seconds)]``, one per size, measured as in the
            module docstring (producer end to ``RecvTensor`` end).
        chains: ``device -> [(ops, median untraced step seconds)]`` for chains of tiny ops.
        chain_kernel_s: ``device -> median kernel seconds of one tiny op`` (traced).
        matmul: ``device -> (flops, median kernel seconds)`` of a square float32 MatMul.
        stream: ``device -> (bytes read + written, median kernel seconds)`` of a large AddV2.
        graphs: ``(TF ops, median untraced step s, traced kernel sum s)`` of whole calibration
            models run on the first device (:func:`graph_gaps`).
        transfer_cpu: ``(bytes, count, sender CPU s, receiver CPU s)`` per step, beyond the same
            tensors kept on the sender (:func:`transfer_cpu_runs`).
        streams: ``(way, bytes, K, extra step s)``: ``K`` transfers in flight at once, one way or
            both ways (:func:`stream_runs`).
    """

    transfers: dict[tuple[str, str], list[tuple[int, float]]]
    chains: dict[str, list[tuple[int, float]]]
    chain_kernel_s: dict[str, float]
    matmul: dict[str, tuple[float, float]]
    stream: dict[str, tuple[float, float]]
    graphs: list[tuple[int, float, float]] = dataclasses.field(default_factory=list)
    transfer_cpu: list[tuple[int, int, float, float]] = dataclasses.field(default_factory=list)
    streams: list[tuple[str, int, int, float]] = dataclasses.field(default_factory=list)


def calibration_runs(
    cluster: Cluster,
    servers: Any,
    sizes: Sequence[int],
    repeats: int = 5,
    chain_lengths: Sequence[int] = (50, 200, 800),
    matmul_n: int = 1024,
    stream_elements: int = 4 << 20,
) -> RigCalibration:
    """Run the rig's micro-benchmarks on running ``servers`` (one TF graph, one session).

    * transfers: for each ordered device pair and size, a ``Fill`` of that many bytes on the
      source consumed by an ``Identity`` on the destination (the transfer happens every step);
    * executor overhead: chains of ``chain_lengths`` dependent scalar ``AddV2`` ops on one device,
      timed untraced (the slope of step time over chain length is one op's kernel plus the
      executor's gap between kernels; the traced kernel time is subtracted by the caller);
    * a ``matmul_n``-square MatMul and an ``AddV2`` of ``stream_elements`` floats per device: one
      core's roofline (FLOP/s and bytes/s, from traced kernel times).

    Every number is a median over ``repeats`` steps after two warm-up steps.
    """
    from graphir.backends.tf.session import session_config
    from graphir.importers.tf import load_tensorflow

    tf = load_tensorflow("calibrating the rig")
    graph = tf.Graph()
    devices = {device.tf_device: device.name for device in cluster.devices}
    transfer_targets: dict[tuple[str, str, int], Any] = {}
    chain_targets: dict[tuple[str, int], Any] = {}
    roof_targets: dict[str, tuple[Any, Any]] = {}
    with graph.as_default():
        for src in cluster.devices:
            for dst in cluster.devices:
                if src.name == dst.name:
                    continue
                for size in sizes:
                    with tf.device(src.tf_device):
                        sent = tf.fill([max(size // 4, 1)], 1.0, name=f"send_{src.name}_{dst.name}_{size}")
                    with tf.device(dst.tf_device):
                        transfer_targets[(src.name, dst.name, size)] = tf.identity(sent).op
        for device in cluster.devices:
            with tf.device(device.tf_device):
                for length in chain_lengths:
                    value = tf.constant(0.0)
                    for _ in range(length):
                        value = value + 1.0
                    chain_targets[(device.name, length)] = value.op
                a = tf.random.stateless_normal([matmul_n, matmul_n], seed=[1, 2])
                matmul = tf.matmul(a, a, name=f"roof_matmul_{device.name}")
                x = tf.random.stateless_normal([stream_elements], seed=[3, 4])
                stream = tf.add(x, x, name=f"roof_stream_{device.name}")
                roof_targets[device.name] = (tf.reduce_sum(matmul).op, tf.reduce_sum(stream).op)
    config = session_config(tf)
    trace = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE, output_partition_graphs=True)

    def traced(session: Any, target: Any) -> list[StepTrace]:
        for _ in range(2):
            session.run(target)
        out = []
        for _ in range(repeats):
            metadata = tf.compat.v1.RunMetadata()
            session.run(target, options=trace, run_metadata=metadata)
            out.append(parse_step_stats(metadata))
        return out

    result = RigCalibration({}, {}, {}, {}, {})
    with tf.compat.v1.Session(servers.target, graph=graph, config=config) as session:
        for (src, dst, size), target in transfer_targets.items():
            seconds = [t.seconds for trace in traced(session, target) for t in trace.transfers]
            if seconds:
                result.transfers.setdefault((src, dst), []).append((size, float(statistics.median(seconds))))
        for (name, length), target in chain_targets.items():
            result.chains.setdefault(name, []).append((length, _median_wall(session, target, repeats)))
            if length == max(chain_lengths):
                kernels = [
                    stat.seconds
                    for trace in traced(session, target)
                    for op, stat in trace.ops.items()
                    if op.startswith("add") and devices.get(stat.device) == name
                ]
                result.chain_kernel_s[name] = float(statistics.median(kernels)) if kernels else 0.0
        for name, (matmul_op, stream_op) in roof_targets.items():
            matmul_s = _op_median(traced(session, matmul_op), f"roof_matmul_{name}")
            stream_s = _op_median(traced(session, stream_op), f"roof_stream_{name}")
            result.matmul[name] = (2.0 * matmul_n**3, matmul_s)
            result.stream[name] = (3.0 * 4 * stream_elements, stream_s)
    return result


def _median_wall(session: Any, target: Any, steps: int, warmup: int = 2) -> float:
    """The median wall time of ``steps`` untraced ``session.run(target)`` after ``warmup`` untimed ones."""
    from graphir.backends.tf.session import timed_calls

    return float(statistics.median(timed_calls(lambda: session.run(target), steps, warmup)))


def _op_median(traces: Sequence[StepTrace], name: str) -> float:
    values = [trace.ops[name].seconds for trace in traces if name in trace.ops]
    if not values:
        raise BackendError(f"rig calibration: op '{name}' reported no step statistics")
    return float(statistics.median(values))


def graph_gaps(
    modules: Sequence[Module], servers: Any, device: str, steps: int = 5, trace_steps: int = 3
) -> list[tuple[int, float, float]]:
    """Run whole models on one device: ``(TF ops, median untraced step s, traced kernel sum s)`` each.

    Every node is put on ``device`` (a cluster device name) for the run and left unplaced again. The
    step minus the kernel sum is what the executor spends between kernels plus the step's fixed
    cost; over several models, its slope in the TF op count is the per-op overhead real graphs see
    (their kernels go through the executor's thread pool; a chain of scalar ops runs inline).
    """
    out = []
    for module in modules:
        nodes = list(module.graph.nodes)
        for node in nodes:
            node.device = device
        try:
            run = run_on_rig(module, servers, steps=steps, warmup=2, trace_steps=trace_steps)
        finally:
            for node in nodes:
                node.device = None
        out.append((run.ops, run.median_s, run.op_seconds))
    return out


# --------------------------------------------------------------------------- a transfer's CPU cost

_TASK = re.compile(r"/job:([^/]+)/task:(\d+)")


def process_cpu_seconds(pid: int) -> float:
    """On-CPU seconds of every thread of process ``pid`` so far (``/proc/PID/task/*/schedstat``, ns resolution)."""
    total = 0
    folder = f"/proc/{pid}/task"
    for thread in os.listdir(folder):
        with contextlib.suppress(OSError):  # a thread that exited between listdir and open
            with open(f"{folder}/{thread}/schedstat") as stat:
                total += int(stat.read().split()[0])
    return total / 1e9


TRANSFER_CPU_COUNTS = (16, 64)
"""The ``K`` of :func:`transfer_cpu_runs`: tensors in flight at once, as in a model's step (TF issues every
``RecvTensor`` of a step at its start: up to 344-647 in flight in lstm-train's topo split). Measured
in one rig session (18:23 UTC 2026-11-24, load 3.0-3.4, ``benchmarks/results/ruler-stream.md``), the
fixed CPU per transfer fitted from ``K`` = 1 and 8 was 71 µs (sender) and 46 µs (receiver), from
``K`` = 16 and 64 25 and 26 µs, per byte 0.23/0.44 and 0.27/0.44 ns: a lone transfer wakes the
runtime's threads, one of many does not; 200 tensors of 4 KiB in flight took 34 µs each."""


def transfer_cpu_runs(
    cluster: Cluster,
    servers: Any,
    sizes: Sequence[int] = (4 << 10, 1 << 20, 4 << 20),
    counts: Sequence[int] = TRANSFER_CPU_COUNTS,
    steps: int = 20,
) -> list[tuple[int, int, float, float]]:
    """The CPU time transfers cost the sending and the receiving worker: ``(bytes, count, sender s, receiver s)``.

    For every ordered device pair, size and count ``K``, two graphs run ``steps`` untraced steps
    each: ``K`` tensors of that many bytes made on the sender and consumed on the receiver, and the
    same ``K`` tensors consumed on the sender (no transfer). Each worker's on-CPU time (every thread
    of its process, :func:`process_cpu_seconds`) per step in the first minus the second is what the
    ``K`` transfers cost it, plus a per-step term for involving a second worker, which the caller
    separates by fitting ``a + K·(c0 + c1·bytes)``. CPU time, unlike wall time, is what the worker's
    own core spent, so other jobs on the machine barely move it.
    """
    from graphir.backends.tf.session import session_config
    from graphir.importers.tf import load_tensorflow

    tf = load_tensorflow("measuring transfer CPU on the rig")
    pids: dict[str, int] = {}
    for device in cluster.devices:
        match = _TASK.search(device.tf_device)
        if match is None or (match[1], int(match[2])) not in servers.processes:
            raise BackendError(f"rig: device '{device.name}' ({device.tf_device}) is not one of the rig's tasks")
        pids[device.name] = servers.processes[(match[1], int(match[2]))].pid
    graph = tf.Graph()
    targets: list[tuple[str, str, int, int, Any, Any]] = []
    with graph.as_default():
        for src in cluster.devices:
            for dst in cluster.devices:
                if src.name == dst.name:
                    continue
                for size in sizes:
                    for count in counts:
                        with tf.device(src.tf_device):
                            made = [tf.fill([max(size // 4, 1)], float(k + 1)) for k in range(count)]
                            local = tf.group(*[tf.identity(t) for t in made])
                        with tf.device(dst.tf_device):
                            sent = tf.group(*[tf.identity(t) for t in made])
                        targets.append((src.name, dst.name, size, count, sent, local))
    out = []
    with tf.compat.v1.Session(servers.target, graph=graph, config=session_config(tf)) as session:

        def cpu_per_step(target: Any, src: str, dst: str) -> tuple[float, float]:
            for _ in range(3):
                session.run(target)
            before = (process_cpu_seconds(pids[src]), process_cpu_seconds(pids[dst]))
            for _ in range(steps):
                session.run(target)
            after = (process_cpu_seconds(pids[src]), process_cpu_seconds(pids[dst]))
            return (after[0] - before[0]) / steps, (after[1] - before[1]) / steps

        for src, dst, size, count, sent, local in targets:
            moved = cpu_per_step(sent, src, dst)
            kept = cpu_per_step(local, src, dst)
            out.append((size, count, moved[0] - kept[0], moved[1] - kept[1]))
    return out


STREAM_CASES = ((4 << 10, 200), (4 << 20, 50))
"""``(bytes, K)`` of :func:`stream_runs`: many small tensors (the per-transfer cost) and many large ones
(the per-byte cost), ``K`` of them in flight at once."""


def stream_runs(
    cluster: Cluster, servers: Any, cases: Sequence[tuple[int, int]] = STREAM_CASES, steps: int = 9
) -> list[tuple[str, int, int, float]]:
    """Wall time of many transfers in flight at once: ``(way, bytes, K, extra seconds per step)``.

    ``way`` is ``"a->b"`` (``K`` tensors made on ``a``, consumed on ``b``) for each ordered pair of the
    first two devices, or ``"both"`` (``K`` each way in the same step). Each case runs untraced: the
    median step of ``steps`` with the transfers minus the median step of the same graph with every
    tensor consumed where it is made (twice, interleaved, the median of the two differences), so
    the number is what the stream adds to a step. Unlike :func:`calibration_runs`' lone transfer,
    the ``K`` transfers overlap: what the link does under :class:`~graphir.cluster_model.TransferService`'s
    ``transfer_lanes`` (each worker's core runs its sends and receives one after the other; the
    slower end sets a one-way stream's rate, and traffic both ways pays each core's send plus
    receive).
    """
    from graphir.backends.tf.session import session_config
    from graphir.importers.tf import load_tensorflow

    tf = load_tensorflow("measuring transfer streams on the rig")
    if len(cluster.devices) < 2:
        raise BackendError("rig: a transfer stream needs two devices")
    a, b = cluster.devices[0], cluster.devices[1]
    ways = {f"{a.name}->{b.name}": ((a, b),), f"{b.name}->{a.name}": ((b, a),), "both": ((a, b), (b, a))}
    graph = tf.Graph()
    targets: list[tuple[str, int, int, Any, Any]] = []
    with graph.as_default():
        for way, directions in ways.items():
            for size, count in cases:
                moved, kept = [], []
                for src, dst in directions:
                    with tf.device(src.tf_device):
                        made = [tf.fill([max(size // 4, 1)], float(k + 1)) for k in range(count)]
                        kept += [tf.reduce_sum(t[:1]) for t in made]
                    with tf.device(dst.tf_device):
                        moved += [tf.reduce_sum(t[:1]) for t in made]
                targets.append((way, size, count, tf.group(*moved), tf.group(*kept)))
    out = []
    with tf.compat.v1.Session(servers.target, graph=graph, config=session_config(tf)) as session:
        for way, size, count, moved, kept in targets:
            extra = [_median_wall(session, moved, steps) - _median_wall(session, kept, steps) for _ in range(2)]
            out.append((way, size, count, float(statistics.median(extra))))
    return out
