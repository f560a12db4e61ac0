"""Guards of every path that runs a model: ops that reach outside the process, memory, time.

graphir executes a model when it measures or proves one (``profile{mode=tf|regression|tf-run|
standard-eval|onnxruntime}``, ``graphir-opt --run-tf``, ``graphir-tune``, the lowering check).
TensorFlow's security guidance is plain about what that means:
"TensorFlow models are programs ... When executing the computation graph, TensorFlow may read and
write files, send and receive data over the network, and even spawn additional processes"
(`SECURITY.md <https://github.com/tensorflow/tensorflow/blob/master/SECURITY.md>`_, "TensorFlow
models are programs" and "Running untrusted models"). A placement tool that profiles by running must
therefore not run a downloaded graph silently. Before any run, every path calls:

* :func:`check_runnable`: the graph (its nodes, and the bodies of the functions and subgraphs it
  carries: TensorFlow's function library, ONNX's local functions and ``If``/``Loop``/``Scan``
  bodies) against :data:`IO_FAMILIES`, the one list of ops that reach outside the process, and
  against TensorFlow's op registry (an op this TensorFlow does not register is code graphir cannot
  vet); an ONNX op of a domain outside :data:`ONNX_BUILTIN_DOMAINS` (a custom op library's) is
  refused the same way. The refusal is one line naming the op, the node and the flag
  ``--allow-io-ops`` (:data:`ALLOW_IO_OPS`) that runs it anyway. Importing, placing, simulating
  and lowering such a graph stay allowed: they run nothing.
* :func:`check_run_memory`: the memory the run needs, known before it starts from the liveness
  accounting of :mod:`graphir.memory` (the simulator's own peak per device for a placed, costed and
  ordered module; else the same accounting over the graph run in topological order on its
  devices), against what this machine can give (``MemAvailable``, and the cgroup's limit); a run
  that would not fit is refused before TensorFlow allocates, naming the device, the bytes needed
  and the bytes available.
* :func:`run_timeout`: the time limit of a run (``graphir-opt --run-timeout``, :data:`RUN_TIMEOUT`),
  which the runners turn into TensorFlow's per-call deadlines (a hung rig worker makes the client's
  call fail instead of blocking forever) and onnxruntime's ``terminate`` flag.

The op families, each with its source in TensorFlow's op registry (``tensorflow/core/ops/``):

* ``files``: ``io_ops.cc`` (``ReadFile``, ``WriteFile``, ``MatchingFiles``, ``Save``/``SaveV2``/
  ``SaveSlices``, ``Restore``/``RestoreV2``/``RestoreSlice``, ``MergeV2Checkpoints``, the
  ``*Reader`` ops), ``state_ops.cc``/``array_ops.cc`` (``ImmutableConst``: maps a file),
  ``dataset_ops.cc`` and ``experimental_dataset_ops.cc`` (the file-backed datasets, caches,
  snapshots, ``SaveDataset``/``LoadDataset``), ``lookup_ops.cc`` (tables initialised from a text
  file), ``checkpoint_ops.cc`` (``GenerateVocabRemapping``, ``LoadAndRemapMatrix``),
  ``summary_ops.cc`` (summary writers), ``logging_ops.cc`` (``PrintV2`` whose ``output_stream`` is
  ``file://...``), ``debug_ops.cc`` (``DebugIdentityV2`` dumps), ``encode_proto_ops.cc``/
  ``decode_proto_ops.cc`` (a ``descriptor_source`` that is a file path), ``filesystem_ops.cc``;
* ``network``: ``rpc_ops.cc`` (``Rpc*``), ``functional_ops.cc`` (``RemoteCall``), the tf.data
  service (``DataServiceDataset*``, ``RegisterDataset*``, ``DistributedSave``), the rendezvous and
  collective ops that exchange tensors with other tasks (``Send``/``Recv``, ``_Send``/``_Recv``,
  ``Collective*``, ``_Nccl*``), debug ops with ``debug_urls`` (``file://`` or ``grpc://``);
* ``python``: ``script_ops.cc`` (``PyFunc``, ``PyFuncStateless``, ``EagerPyFunc``; ``NumpyFunction``
  named too): arbitrary Python code of whoever built the graph;
* ``unregistered``: any TensorFlow op this TensorFlow does not register (a custom kernel library).

Imports nothing heavy: TensorFlow and onnx are reached through :mod:`graphir.importers` only when a
module holds such ops.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from graphir.attributes import Opaque
from graphir.budget import human_bytes
from graphir.errors import GraphIRError, Location
from graphir.ir import Module, Node

__all__ = [
    "ALLOW_IO_OPS",
    "DEFAULT_RUN_TIMEOUT_S",
    "IO_FAMILIES",
    "IO_FLAG",
    "ONNX_BUILTIN_DOMAINS",
    "RUN_MEMORY_LIMIT",
    "RUN_TIMEOUT",
    "Deadline",
    "IoFamily",
    "RunMemoryError",
    "RunRefusedError",
    "RunTimeoutError",
    "allowing_io_ops",
    "available_memory",
    "check_run_memory",
    "check_runnable",
    "io_family",
    "refusals",
    "run_memory",
    "run_timeout",
]

IO_FLAG = "--allow-io-ops"
"""The command-line flag that lets a run go ahead with ops of :data:`IO_FAMILIES`."""

ALLOW_IO_OPS: contextvars.ContextVar[bool] = contextvars.ContextVar("graphir_allow_io_ops", default=False)
"""Set by ``--allow-io-ops`` (``graphir-opt``, ``graphir-tune``, ``tools/run_tf.py``, the check tool):
:func:`check_runnable` then lets every op run."""

DEFAULT_RUN_TIMEOUT_S = 600.0
"""Default time limit of one run (a profile measurement, ``--run-tf``, a ``graphir-tune`` round)."""

RUN_MEMORY_LIMIT: contextvars.ContextVar[int | None] = contextvars.ContextVar("graphir_run_memory_limit", default=None)
"""Set by ``graphir-opt --run-memory-mb=N``: a run may use at most this many bytes (:func:`available_memory`)."""

RUN_TIMEOUT: contextvars.ContextVar[float] = contextvars.ContextVar(
    "graphir_run_timeout", default=DEFAULT_RUN_TIMEOUT_S
)
"""Set by ``graphir-opt --run-timeout=SECONDS``: the time limit of each run (:func:`run_timeout`)."""


class RunRefusedError(GraphIRError):
    """A model holds an op that reaches outside the process; it is not run (``--allow-io-ops`` runs it)."""


class RunMemoryError(GraphIRError):
    """A run would need more memory than this machine can give; it is not started."""


class RunTimeoutError(GraphIRError):
    """A run did not finish within its time limit; it was ended."""


@dataclasses.dataclass(frozen=True)
class IoFamily:
    """One family of ops that reach outside the process.

    Attributes:
        name: ``files``, ``network``, ``python``.
        what: what its ops do, for the refusal line.
        ops: bare TensorFlow op types (always refused).
        when: op types refused only for some params: ``op -> predicate(params)``.
    """

    name: str
    what: str
    ops: frozenset[str]
    when: Mapping[str, Callable[[Mapping[str, Any]], bool]] = dataclasses.field(default_factory=dict)


def _url_param(key: str, prefixes: tuple[str, ...]) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate: param ``key`` (a string or a list of them) starts with one of ``prefixes``."""

    def check(params: Mapping[str, Any]) -> bool:
        value = params.get(key)
        items = value if isinstance(value, tuple) else (value,)
        return any(isinstance(item, str) and item.strip().lower().startswith(prefixes) for item in items)

    return check


def _file_descriptor_source(params: Mapping[str, Any]) -> bool:
    """``descriptor_source`` names a file (anything but the default ``local://`` and the empty string)."""
    value = params.get("descriptor_source", "local://")
    return isinstance(value, str) and value not in ("", "local://")


_DEBUG_URL_OPS = ("DebugIdentity", "DebugIdentityV3", "DebugNanCount", "DebugNumericSummary")

IO_FAMILIES: tuple[IoFamily, ...] = (
    IoFamily(
        "files",
        "reads or writes files",
        frozenset(
            {
                # io_ops.cc: whole files, checkpoints, readers
                "ReadFile",
                "WriteFile",
                "MatchingFiles",
                "Save",
                "SaveV2",
                "SaveSlices",
                "Restore",
                "RestoreV2",
                "RestoreSlice",
                "DTensorRestoreV2",
                "MergeV2Checkpoints",
                "TFRecordReader",
                "TFRecordReaderV2",
                "TextLineReader",
                "TextLineReaderV2",
                "FixedLengthRecordReader",
                "FixedLengthRecordReaderV2",
                "WholeFileReader",
                "WholeFileReaderV2",
                "LMDBReader",
                "RecordInput",
                "CalibrationStatisticsSaver",
                "FileSystemSetConfiguration",
                # array_ops.cc: a constant memory-mapped from a file
                "ImmutableConst",
                # dataset_ops.cc, experimental_dataset_ops.cc: file-backed datasets, caches, snapshots
                "TFRecordDataset",
                "TFRecordDatasetV2",
                "TextLineDataset",
                "FixedLengthRecordDataset",
                "FixedLengthRecordDatasetV2",
                "CSVDataset",
                "CSVDatasetV2",
                "ExperimentalCSVDataset",
                "LMDBDataset",
                "ExperimentalLMDBDataset",
                "SqlDataset",
                "ExperimentalSqlDataset",
                "MatchingFilesDataset",
                "ExperimentalMatchingFilesDataset",
                "CacheDataset",
                "CacheDatasetV2",
                "SnapshotDataset",
                "SnapshotDatasetV2",
                "SnapshotChunkDataset",
                "SnapshotDatasetReader",
                "SnapshotNestedDatasetReader",
                "ListSnapshotChunksDataset",
                "SaveDataset",
                "SaveDatasetV2",
                "ExperimentalSaveDataset",
                "LoadDataset",
                "DatasetToTFRecord",
                "ExperimentalDatasetToTFRecord",
                # lookup_ops.cc, checkpoint_ops.cc: tables and remappings read from files
                "InitializeTableFromTextFile",
                "InitializeTableFromTextFileV2",
                "GenerateVocabRemapping",
                "LoadAndRemapMatrix",
                # summary_ops.cc: summary writers (event files, databases)
                "CreateSummaryFileWriter",
                "CreateSummaryDbWriter",
                "SummaryWriter",
                "WriteSummary",
                "WriteScalarSummary",
                "WriteHistogramSummary",
                "WriteImageSummary",
                "WriteAudioSummary",
                "WriteGraphSummary",
                "WriteRawProtoSummary",
                "FlushSummaryWriter",
                "CloseSummaryWriter",
                "ImportEvent",
                "StatsAggregatorSetSummaryWriter",
                # debug_ops.cc: tfdbg v2 dumps into a directory
                "DebugIdentityV2",
            }
        ),  # fmt: skip
        {
            "PrintV2": _url_param("output_stream", ("file://",)),  # logging_ops.cc: print into a file
            "DecodeProtoV2": _file_descriptor_source,  # a descriptor set read from a file
            "EncodeProto": _file_descriptor_source,
            **{op: _url_param("debug_urls", ("file://",)) for op in _DEBUG_URL_OPS},
        },
    ),
    IoFamily(
        "network",
        "talks to the network or to other processes",
        frozenset(
            {
                # rpc_ops.cc
                "RpcClient",
                "RpcServer",
                "RpcServerStart",
                "RpcServerRegister",
                "RpcCall",
                "RpcCheckStatus",
                "RpcGetValue",
                "DeleteRpcFutureResource",
                # functional_ops.cc: a function run on another task
                "RemoteCall",
                # the tf.data service
                "DataServiceDataset",
                "DataServiceDatasetV2",
                "DataServiceDatasetV3",
                "DataServiceDatasetV4",
                "RegisterDataset",
                "RegisterDatasetV2",
                "DistributedSave",
                # rendezvous and collectives: tensors exchanged with other tasks and devices
                "Send",
                "Recv",
                "_Send",
                "_Recv",
                "_HostSend",
                "_HostRecv",
                "CollectiveReduce",
                "CollectiveReduceV2",
                "CollectiveReduceV3",
                "CollectiveGather",
                "CollectiveGatherV2",
                "CollectiveBcastSend",
                "CollectiveBcastSendV2",
                "CollectiveBcastRecv",
                "CollectiveBcastRecvV2",
                "CollectiveAllToAllV2",
                "CollectiveAllToAllV3",
                "CollectiveReduceScatterV2",
                "CollectivePermute",
                "CollectiveInitializeCommunicator",
                "CollectiveAssignGroupV2",
                "NcclAllReduce",
                "NcclReduce",
                "NcclBroadcast",
                "_NcclBroadcastRecv",
                "_NcclBroadcastSend",
                "_NcclReduceRecv",
                "_NcclReduceSend",
            }
        ),  # fmt: skip
        {op: _url_param("debug_urls", ("grpc://",)) for op in _DEBUG_URL_OPS},
    ),
    IoFamily(
        "python",
        "calls back into Python code of whoever built the graph",
        frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc", "NumpyFunction"}),
    ),
)
"""The one list of ops that reach outside the process (see the module docstring for the sources)."""

ONNX_BUILTIN_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training", "com.microsoft"})
"""ONNX domains whose kernels onnxruntime and graphir's ONNX -> TF table ship (``com.microsoft``: onnxruntime's
own contrib ops); an op of any other domain needs a custom op library, code graphir does not vet."""


def io_family(op: str, params: Mapping[str, Any] | None = None) -> IoFamily | None:
    """The family of a bare TensorFlow op type with ``params``, ``None`` when it stays inside the process."""
    for family in IO_FAMILIES:
        if op in family.ops:
            return family
        rule = family.when.get(op)
        if rule is not None and rule(params or {}):
            return family
    return None


@contextlib.contextmanager
def allowing_io_ops(allow: bool = True) -> Iterator[None]:
    """Within the block, :func:`check_runnable` lets every op run (the Python form of ``--allow-io-ops``)."""
    token = ALLOW_IO_OPS.set(allow)
    try:
        yield
    finally:
        ALLOW_IO_OPS.reset(token)


@dataclasses.dataclass(frozen=True)
class Refusal:
    """One op that keeps a module from running: where it is, what it is and why."""

    node: str
    op: str
    reason: str
    where: str = ""

    def message(self, what: str) -> str:
        """The one-line refusal (the node is the error's location)."""
        inside = f" (in {self.where})" if self.where else ""
        return (
            f"{what} refused: op '{self.op}'{inside} {self.reason}; graphir runs no model that reaches outside "
            f"its process unless told to ({IO_FLAG} runs it anyway)"
        )


def _tf_reason(op: str, params: Mapping[str, Any]) -> str | None:
    family = io_family(op, params)
    if family is not None:
        return family.what
    from graphir.importers.tf_attrs import tf_op_registered

    if not tf_op_registered(op):
        return "is not registered in this TensorFlow (a custom kernel library's op)"
    return None


def _onnx_reason(domain: str, op: str, functions: set[tuple[str, str]]) -> str | None:
    if domain in ONNX_BUILTIN_DOMAINS or (domain, op) in functions:
        return None
    return f"is in the custom ONNX domain '{domain}' (a custom op library's op)"


def refusals(module: Module, limit: int = 1) -> list[Refusal]:
    """Up to ``limit`` ops of ``module`` that reach outside the process, nodes in topological order first.

    TensorFlow nodes (``tf.<Op>``) are checked against :data:`IO_FAMILIES` and TensorFlow's registry,
    with the function library the module carries (``tf_library``); ONNX nodes (``onnx.[domain.]Op``)
    against :data:`ONNX_BUILTIN_DOMAINS`, with their subgraph bodies and the model's local functions.
    Other dialects (``graphir.*``) are graphir's own ops.
    """
    found: list[Refusal] = []
    onnx_functions, onnx_bodies = _onnx_functions(module)
    for node, where in _nodes_and_regions(module.graph.index().nodes, None):  # region nodes too
        reason = _node_reason(node, onnx_functions)
        if reason is not None:
            found.append(Refusal(node.name, node.op, reason, where or ""))
        if node.op.startswith("onnx."):
            for value in node.params.values():
                for item in value if isinstance(value, tuple) else (value,):
                    if isinstance(item, Opaque) and item.kind == "onnx.GraphProto":
                        found += _onnx_nested(item, f"the subgraph of '{node.name}'", onnx_functions)
        if len(found) >= limit:
            return found[:limit]
    library = module.metadata.get("tf_library")
    if isinstance(library, Opaque) and library.kind == "tf.FunctionDefLibrary":
        from graphir.importers.tf_attrs import library_nodes

        for function, name, op, params in library_nodes(library.data):
            reason = _tf_reason(op, params)
            if reason is not None:
                found.append(Refusal(name, f"tf.{op}", reason, f"function '{function}'"))
                if len(found) >= limit:
                    return found[:limit]
    for body in onnx_bodies:
        found += _onnx_nested(body, "a local function", onnx_functions)
    return found[:limit]


def _nodes_and_regions(nodes: Iterable[Node], where: str | None) -> Iterator[tuple[Node, str | None]]:
    """Each node with where it is (``None``: the module's graph), the nodes of its regions after it."""
    from graphir.regions import node_regions

    for node in nodes:
        yield node, where
        for name, region in node_regions(node):
            yield from _nodes_and_regions(region.graph.index().nodes, f"region '{name}' of '{node.name}'")


def _node_reason(node: Node, onnx_functions: set[tuple[str, str]]) -> str | None:
    if node.op.startswith("tf."):
        return _tf_reason(node.op[3:], node.params)
    if node.op.startswith("onnx."):
        domain, _, op = node.op[5:].rpartition(".")
        return _onnx_reason(domain, op, onnx_functions)
    return None


def _onnx_functions(module: Module) -> tuple[set[tuple[str, str]], list[Opaque]]:
    functions = module.metadata.get("functions")
    bodies = [f for f in functions if isinstance(f, Opaque)] if isinstance(functions, tuple) else []
    if not bodies:
        return set(), []
    from graphir.importers.onnx import function_names

    return {name for body in bodies for name in function_names(body)}, bodies


def _onnx_nested(body: Opaque, where: str, functions: set[tuple[str, str]]) -> list[Refusal]:
    from graphir.importers.onnx import nested_nodes

    out = []
    for name, domain, op in nested_nodes(body):
        reason = _onnx_reason(domain, op, functions)
        if reason is not None:
            out.append(Refusal(name, f"onnx.{domain + '.' if domain else ''}{op}", reason, where))
    return out


def check_runnable(module: Module, what: str, allow: bool | None = None) -> None:
    """Refuse to run ``module`` when it holds an op that reaches outside the process (see the module docstring).

    Args:
        module: the module about to run.
        what: the run, named in the error (``profile{mode=tf}``, ``--run-tf``...).
        allow: run anyway; ``None`` reads :data:`ALLOW_IO_OPS` (``--allow-io-ops``).

    Raises:
        RunRefusedError: one line naming the op, the node and ``--allow-io-ops``.
    """
    if ALLOW_IO_OPS.get() if allow is None else allow:
        return
    found = refusals(module)
    if found:
        first = found[0]
        raise RunRefusedError(first.message(what), Location(node=first.node))


# --------------------------------------------------------------------------- memory


def available_memory() -> int:
    """Bytes this machine can give a run now.

    ``MemAvailable``, capped by the cgroup's remaining limit and by :data:`RUN_MEMORY_LIMIT`
    (``--run-memory-mb``).
    """
    available = _meminfo_available()
    for limit in (_cgroup_remaining(), RUN_MEMORY_LIMIT.get()):
        if limit is not None:
            available = min(available, limit) if available else limit
    return max(available, 0)


def _capped() -> str:
    limit = RUN_MEMORY_LIMIT.get()
    return " (capped by --run-memory-mb)" if limit is not None and limit <= _meminfo_available() else ""


def _meminfo_available() -> int:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:  # not Linux: the physical memory
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (OSError, ValueError):
        return 0


def _cgroup_remaining() -> int | None:
    """``memory.max - memory.current`` of this process's cgroup (v2), ``None`` without a limit."""
    try:
        with open("/proc/self/cgroup") as cgroup:
            path = next((line.strip().split(":", 2)[2] for line in cgroup if line.startswith("0::")), None)
        if path is None:
            return None
        folder = f"/sys/fs/cgroup{path}"
        with open(f"{folder}/memory.max") as limit_file:
            text = limit_file.read().strip()
        if text == "max":
            return None
        with open(f"{folder}/memory.current") as current_file:
            return int(text) - int(current_file.read().strip())
    except (OSError, ValueError, StopIteration):
        return None


def run_memory(module: Module) -> dict[str, int]:
    """Peak bytes per device a run of ``module`` needs, by the liveness accounting of :mod:`graphir.memory`.

    A module whose every node is placed, ordered and costed: the simulator's peaks (persistent bytes
    included). Otherwise the same accounting over the graph run node after node in the index's
    topological order, each node on its device (unplaced nodes on the first device, where a run
    puts them), transfers arriving when their producer finishes; persistent bytes from ``mem``, else
    a variable's own size; graph inputs and constants on the first device. Fed values (graph inputs,
    placeholders) count with their unknown dims as 1, as the runners feed them; other values of
    unknown size count 0: the bound is what is known beforehand.
    """
    from graphir.memory import output_mask, peak_memory
    from graphir.ops import is_variable, variable_bytes

    graph = module.graph
    index = graph.index()
    nodes = index.nodes
    names = [device.name for device in module.cluster.devices] or ["host"]
    number = {name: k for k, name in enumerate(names)}
    device = np.array([number.get(node.device or "", 0) for node in nodes], dtype=np.int64)
    fed = [0] * len(names)  # what the runners feed beyond what the graph's types size
    fed[0] += sum(_fed_bytes(value.type) for value in graph.inputs)
    for k, node in enumerate(nodes):  # a placeholder of unknown dims is fed with those dims 1
        if node.op == "tf.Placeholder" and node.outputs and node.outputs[0].type.nbytes is None:
            fed[device[k]] += _fed_bytes(node.outputs[0].type)
    if nodes and all(n.device is not None and n.order is not None and n.cost is not None for n in nodes):
        from graphir.simulator import simulate

        with contextlib.suppress(GraphIRError):
            result = simulate(module)
            peaks = {name: int(peak) for name, peak in zip(result.device_names, result.peak_memory, strict=True)}
            return {name: peaks[name] + fed[number[name]] for name in names}
    start = np.arange(len(nodes), dtype=np.float64)
    finish = start + 1.0
    arrival: dict[tuple[int, int], tuple[float, float]] = {}
    data = ~index.edge_control
    for src, dst, value in zip(index.edge_src[data], index.edge_dst[data], index.edge_value[data], strict=True):
        if device[src] != device[dst]:
            arrival.setdefault((int(value), int(device[dst])), (float(finish[src]), float(finish[src])))
    makespan = float(len(nodes))
    peaks = peak_memory(index, output_mask(graph, index), device, start, finish, arrival, makespan, len(names))
    peaks = peaks.astype(object)  # exact integers: a hostile shape must not wrap around
    for k, node in enumerate(nodes):
        mem = node.mem
        own = mem.persistent if mem is not None else (variable_bytes(node) if is_variable(node.op) else 0)
        peaks[device[k]] += int(own)
    peaks[0] += sum(value.type.nbytes_or(0) for value in graph.constants)
    return {name: int(peak) + fed[k] for k, (name, peak) in enumerate(zip(names, peaks, strict=True))}


def _fed_bytes(vtype: Any) -> int:
    """Bytes of a fed value, its unknown dims 1 (the runners feed them so); 0 without a known rank."""
    if vtype.shape is None:
        return 0
    count = 1
    for dim in vtype.shape:
        count *= dim if isinstance(dim, int) and dim >= 0 else 1
    return count * vtype.dtype.itemsize


def check_run_memory(module: Module, what: str, available: int | None = None) -> None:
    """Refuse a run whose known memory exceeds what this machine can give (see the module docstring).

    Every device of a local run (logical CPUs, rig workers) draws on this machine's memory, so
    each device's peak, then their sum, is compared with :func:`available_memory`.

    Raises:
        RunMemoryError: one line naming the device, the bytes needed and the bytes available.
    """
    free = available_memory() if available is None else available
    if free <= 0:
        return  # nothing known about this machine: no refusal on a guess
    needs = run_memory(module)
    for device, need in needs.items():
        if need > free:
            raise RunMemoryError(
                f"{what} refused: device '{device}' needs {human_bytes(need)} for this run (liveness peak of "
                f"the placed graph), more than this machine can give: {human_bytes(free)} available{_capped()}"
            )
    total = sum(needs.values())
    if len(needs) > 1 and total > free:
        raise RunMemoryError(
            f"{what} refused: devices {', '.join(repr(d) for d in needs)} together need {human_bytes(total)} for "
            f"this run (liveness peaks of the placed graph), more than this machine can give: "
            f"{human_bytes(free)} available{_capped()}"
        )


# --------------------------------------------------------------------------- time


def run_timeout() -> float:
    """The time limit of one run in seconds (:data:`RUN_TIMEOUT`, ``--run-timeout``)."""
    return RUN_TIMEOUT.get()


class Deadline:
    """The end of a run's time limit: what is left of it, and the one-line error once it has passed.

    Args:
        seconds: the limit (``None``: :func:`run_timeout`).
        what: the run, named in the error.
        flag: the option that sets the limit, named in the error.
    """

    def __init__(self, seconds: float | None, what: str, flag: str = "--run-timeout"):
        self.seconds = run_timeout() if seconds is None else float(seconds)
        self.what = what
        self.flag = flag
        self.end = time.monotonic() + self.seconds

    def remaining(self) -> float:
        """Seconds left (at least 0)."""
        return max(self.end - time.monotonic(), 0.0)

    def remaining_ms(self) -> int:
        """Milliseconds left, at least 1 (TensorFlow reads 0 as "no limit")."""
        return max(int(self.remaining() * 1000), 1)

    def error(self, detail: str = "") -> RunTimeoutError:
        """The error of a run that reached the limit."""
        extra = f": {detail}" if detail else ""
        return RunTimeoutError(
            f"{self.what} did not finish within its time limit of {self.seconds:g} s ({self.flag}) and was ended{extra}"
        )

    def check(self) -> None:
        """Raise :meth:`error` once the limit has passed."""
        if time.monotonic() >= self.end:
            raise self.error()
