"""Which ready node a rig worker runs next: TensorFlow's executor order read from traced steps.

Each saved module (``bench_fidelity --save-modules``: placed, ordered, profiled) is run on the
rig without the per-device control dependencies (TF's own order, ``order=dynamic``), a few steps
are traced in full, and every worker's kernels are read from the step statistics with the
partition graphs (the ``_Send``/``_Recv`` pairs TF inserted). A TF op is *ready* when its last
input (data or control, in its partition graph) ended; it was made ready *remotely* when that
input is a ``_Recv`` (the gRPC thread that received the tensor scheduled it), else *locally*. TF
traces no ``_Recv`` kernel: a ``_Recv`` ends when its tensor's ``RecvTensor`` record ends on the
receiving worker.

A *decision* is a kernel B a worker started while two or more expensive ops were ready and not
started on it (ready at or before B's start). Two rules predict B:

- ``fifo``: the op that became ready first (the simulator's ``dynamic`` order until 2026-11-24).
- ``lifo``: the op made ready locally most recently; when none was, the remote one that arrived
  first (``executor.cc`` ScheduleReady: the last expensive successor runs inline, the others are
  pushed on the front of the pool thread's queue, which the thread pops from the front; a
  closure scheduled from the gRPC thread goes to the back).

Ops sharing the predicted ready time all count as the prediction (siblings made ready by one
producer: which of them the executor takes depends on its edge order). Decisions where the two
rules predict the same op are counted apart; the others are the evidence. Cheap ops (types whose
kernel says it is not expensive: constants, identities, shapes, sends and receives, ...) run
inline and are left out of the candidates and of the decisions.

Command line (hold ``/work/rig.lock`` when measuring)::

    python -m devtools.trace_order --cluster RIG.toml --steps 3 DIR/*-dynamic.gir --out trace.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CHEAP_OPS = frozenset(
    {
        "Const",
        "HostConst",
        "Identity",
        "IdentityN",
        "StopGradient",
        "Snapshot",
        "NoOp",
        "_Send",
        "_Recv",
        "_HostSend",
        "_HostRecv",
        "_Arg",
        "_Retval",
        "Placeholder",
        "Shape",
        "ShapeN",
        "Size",
        "Rank",
        "Reshape",
        "VarHandleOp",
        "VariableV2",
    }
)
"""Op types whose kernel is not expensive in TF (``IsExpensive()`` false): run inline, not decisions."""


def _input_name(name: str) -> str:
    return name.lstrip("^").split(":")[0]


def decisions(metadata: Any, cheap: frozenset[str] = CHEAP_OPS) -> list[dict[str, Any]]:
    """Every decision of one traced step (see the module docstring), per worker.

    Returns:
        One row per decision: ``device``, ``chosen``, ``candidates`` (how many were ready),
        ``fifo`` and ``lifo`` (whether the chosen op is in each rule's prediction), ``same``
        (whether the two predictions are the same set).
    """
    from graphir.backends.tf.rig import _RECV_LABEL, normalise_device

    spans: dict[str, tuple[float, float]] = {}
    arrived: dict[str, float] = {}  # tensor_name of a _Send/_Recv pair -> when its bytes reached the receiver
    for device_stats in metadata.step_stats.dev_stats:
        for ns in device_stats.node_stats:
            if ns.node_name == "RecvTensor":
                match = _RECV_LABEL.search(ns.timeline_label)
                if match is not None:
                    arrived[match.group(1)] = ns.all_start_micros * 1e-6 + ns.all_end_rel_micros * 1e-6
                continue
            base = ns.all_start_micros * 1e-6
            start, end = base + ns.op_start_rel_micros * 1e-6, base + ns.op_end_rel_micros * 1e-6
            if ns.op_end_rel_nanos or ns.op_start_rel_nanos:
                base = ns.all_start_nanos * 1e-9 if ns.all_start_nanos else base
                start, end = base + ns.op_start_rel_nanos * 1e-9, base + ns.op_end_rel_nanos * 1e-9
            old = spans.get(ns.node_name)
            spans[ns.node_name] = (start, end) if old is None else (min(start, old[0]), max(end, old[1]))
    rows: list[dict[str, Any]] = []
    for graph in metadata.partition_graphs:
        nodes = {node.name: node for node in graph.node}
        if not nodes:
            continue
        device = normalise_device(next(iter(nodes.values())).device)
        for name, node in nodes.items():  # TF traces no _Recv kernel: its end is the tensor's arrival
            if node.op in ("_Recv", "_HostRecv") and name not in spans:
                when = arrived.get(node.attr["tensor_name"].s.decode())
                if when is not None:
                    spans[name] = (when, when)
        ready: dict[str, tuple[float, bool]] = {}  # expensive op -> (ready time, made ready remotely)
        for name, node in nodes.items():
            if node.op in cheap or name not in spans:
                continue
            when, remote, known = 0.0, False, True
            for raw in node.input:
                src = _input_name(raw)
                if src not in nodes:
                    continue
                if src not in spans:
                    known = False
                    break
                end = spans[src][1]
                if end > when:
                    when, remote = end, nodes[src].op in ("_Recv", "_HostRecv")
            if known:
                ready[name] = (when, remote)
        run = sorted(ready, key=lambda name: spans[name][0])
        for i, chosen in enumerate(run):
            t = spans[chosen][0]
            previous_end = spans[run[i - 1]][1] if i else 0.0
            waiting = [name for name in run[i:] if ready[name][0] <= t]
            if len(waiting) < 2:
                continue
            first = min(ready[name][0] for name in waiting)
            fifo = {name for name in waiting if ready[name][0] == first}
            local = [name for name in waiting if not ready[name][1]]
            if local:
                newest = max(ready[name][0] for name in local)
                lifo = {name for name in local if ready[name][0] == newest}
            else:
                lifo = fifo
            rows.append(
                {
                    "device": device,
                    "chosen": chosen,
                    "candidates": len(waiting),
                    "fifo": chosen in fifo,
                    "lifo": chosen in lifo,
                    "same": fifo == lifo,
                    "popped": ready[chosen][0] < previous_end,
                    "mixed": 0 < len(local) < len(waiting),
                    "remote": ready[chosen][1],
                }
            )
    return rows


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counts of a list of decisions: all, where the rules differ, and how often each rule was right there."""
    differ = [row for row in rows if not row["same"]]
    popped = [row for row in differ if row["popped"]]
    mixed = [row for row in rows if row["mixed"]]
    return {
        "decisions": len(rows),
        "differ": len(differ),
        "fifo": sum(row["fifo"] for row in differ),
        "lifo": sum(row["lifo"] for row in differ),
        "agree_both": sum(row["fifo"] and row["lifo"] for row in rows if row["same"]),
        "popped_differ": len(popped),
        "popped_fifo": sum(row["fifo"] for row in popped),
        "popped_lifo": sum(row["lifo"] for row in popped),
        "mixed": len(mixed),
        "mixed_local_first": sum(not row["remote"] for row in mixed),
    }


def trace_module(path: Path, cluster: Any, steps: int, warmup: int, seed: int) -> list[list[dict[str, Any]]]:
    """Run the module at ``path`` on the rig in TF's own order; the decisions of each traced step."""
    from devtools.bench_fidelity import MODELS, _load
    from graphir.backends.tf import lower
    from graphir.backends.tf.rig import rig
    from graphir.backends.tf.run import SessionRunner, random_inputs, random_variables
    from graphir.parser import parse_module

    saved = parse_module(path.read_text(), str(path))
    model = next((name for name in MODELS if path.stem.startswith(f"{name}-")), None)
    if model is None:
        raise SystemExit(f"trace_order: '{path.name}' names none of the benchmark's models")
    module = _load(MODELS[model], 1, path.parent)  # the saved module prints its weights as 'external'
    module.set_cluster(cluster)
    placed = {node.name: (node.device, node.order) for node in saved.graph.nodes}
    for node in module.graph.nodes:
        node.device, node.order = placed[node.name]
    lowered = lower(module, enforce_order=False)
    inputs = random_inputs(module, lowered.input_names, seed)
    with rig(cluster) as servers:
        with SessionRunner(module, lowered, servers.target, variables=random_variables(module, seed)) as runner:
            for _ in range(warmup):
                runner.run(inputs)
            return [decisions(runner.run_metadata(inputs)) for _ in range(steps)]


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    from graphir.cluster import ClusterError
    from graphir.driver.clusters import resolve_cluster

    parser = argparse.ArgumentParser(prog="trace_order", description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="+", type=Path, help="saved modules (bench_fidelity --save-modules)")
    parser.add_argument("--cluster", required=True, help="the rig's cluster file")
    parser.add_argument("--steps", type=int, default=3, help="traced steps per module")
    parser.add_argument("--warmup", type=int, default=3, help="untraced steps first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="JSON: per module and step, the summary")
    args = parser.parse_args(argv)
    try:
        cluster = resolve_cluster(args.cluster)
    except ClusterError as err:
        print(f"trace_order: {err}", file=sys.stderr)
        return 1
    out: dict[str, Any] = {}
    for path in args.modules:
        if not path.is_file():
            print(f"trace_order: no module '{path}'", file=sys.stderr)
            return 1
        steps = trace_module(path, cluster, args.steps, args.warmup, args.seed)
        out[path.stem] = [summarise(rows) for rows in steps]
        total = summarise([row for rows in steps for row in rows])
        print(
            f"{path.stem}: {total['decisions']} decisions, rules differ in {total['differ']}: "
            f"fifo right {total['fifo']}, lifo right {total['lifo']}; where the chain ended "
            f"(the op run was not made ready by the previous one): {total['popped_differ']} differ, "
            f"fifo {total['popped_fifo']}, lifo {total['popped_lifo']}; local and remote ready: "
            f"{total['mixed']}, local run first {total['mixed_local_first']}",
            file=sys.stderr,
        )
        args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
