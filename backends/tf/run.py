"""``--run-tf=STEPS``: lower a placed module and time its steps on the cluster's devices, next to the simulated step.

:func:`run_module` runs the module in process on logical CPU devices, or, when the cluster's
devices name jobs, on the local TensorFlow workers of :mod:`graphir.backends.tf.rig`; either way in
a :class:`~graphir.backends.tf.session.SessionRunner` (:mod:`graphir.backends.tf.session`: the
session without Grappler or soft placement, seeded inputs and variables, logical devices, timed
steps; its names are re-exported here). :class:`RunReport` is the measured steps beside the
simulated makespan, printed in one line. Importing this module does not load TensorFlow.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Mapping
from typing import Any

from graphir.backends.tf.session import (
    TASK,
    SessionRunner,
    configure_cpus,
    feed_devices,
    random_inputs,
    random_variables,
    remote_feeds,
    tf_run_error,
    time_steps,
)
from graphir.errors import BackendError
from graphir.ir import Module
from graphir.runguard import Deadline, check_run_memory, check_runnable

__all__ = [
    "RUN_TF_LINE",
    "RunReport",
    "SessionRunner",
    "configure_cpus",
    "feed_devices",
    "is_multihost",
    "local_cpu_count",
    "random_inputs",
    "random_variables",
    "remote_feeds",
    "run_module",
    "simulated_makespan",
    "tasks_used",
    "tf_run_error",
]

RUN_TF_LINE = re.compile(r"^run-tf: measured median (?P<measured>\S+) s, simulated (?:(?P<simulated>\S+) s|n/a)")
"""Reads the measured and simulated seconds back from a :meth:`RunReport.line`."""

_CPU_INDEX = re.compile(r"/device:CPU:(\d+)$", re.IGNORECASE)


def is_multihost(module: Module) -> bool:
    """Whether any device of the module's cluster names a job (``/job:worker/task:1/...``)."""
    return any("/job:" in device.tf_device for device in module.cluster.devices)


def local_cpu_count(module: Module) -> int:
    """Logical CPU devices a local run needs: the highest ``/device:CPU:k`` index of the cluster, plus one."""
    indices = [int(m.group(1)) for d in module.cluster.devices if (m := _CPU_INDEX.search(d.tf_device))]
    return max(indices, default=0) + 1


def tasks_used(placed: Mapping[str, str]) -> set[str]:
    """``/job:J/task:K`` of every device in a ``{op: device}`` map (``RunMetadata`` partition graphs)."""
    return {f"/job:{m.group(1)}/task:{m.group(2)}" for d in placed.values() if (m := TASK.search(d))}


@dataclasses.dataclass
class RunReport:
    """Measured steps of a lowered module.

    Attributes:
        steps: timed steps run.
        warmup: untimed steps run first.
        median_s: median wall time of a timed step (seconds).
        times_s: every timed step's wall time.
        simulated_s: the simulated makespan (``None`` when the module has no schedule to simulate).
        devices: TF devices of the placed nodes.
        tasks: ``/job:J/task:K`` of a multi-host run (empty locally).
        xla_clusters: for a module with fused kernels (``kernel`` annotations), (kernel sets marked
            that the outputs depend on, XLA clusters TensorFlow ran in one traced step after the timed
            ones); ``None`` without.
    """

    steps: int
    warmup: int
    median_s: float
    times_s: list[float]
    simulated_s: float | None
    devices: list[str]
    tasks: list[str]
    xla_clusters: tuple[int, int] | None = None

    def line(self) -> str:
        """One line for standard error, ``run-tf: measured median X s, simulated Y s (details)``.

        The part before the parenthesis is a stable format (:data:`RUN_TF_LINE` reads it back):
        seconds with 6 significant digits; ``simulated n/a`` when nothing could be simulated.
        """
        simulated = "n/a" if self.simulated_s is None else f"{self.simulated_s:.6g} s"
        where = f"{len(self.devices)} device(s)" + (f" on {len(self.tasks)} task(s)" if self.tasks else "")
        if self.xla_clusters is not None:
            marked, run = self.xla_clusters
            where += f", {run} XLA cluster(s) run for {marked} fused kernel(s)"
        return (
            f"run-tf: measured median {self.median_s:.6g} s, simulated {simulated} "
            f"({self.steps} step(s) after {self.warmup} warm-up, {where})"
        )


def simulated_makespan(module: Module) -> float | None:
    """The step time graphir predicts, ``None`` when it cannot simulate the module.

    The latest ``finish`` annotation, else a fresh simulation's makespan, plus the cluster's fixed
    cost of a step beyond its graph (:attr:`graphir.cluster_model.Cluster.step_overhead`, 0 unless
    the cluster file has ``[overheads] step``), which the measured wall time includes: the same
    prediction the fidelity benchmark scores.
    """
    finishes = [node.finish for node in module.graph.nodes if node.finish is not None]
    if finishes:
        return max(finishes) + module.cluster.step_overhead
    nodes = list(module.graph.nodes)
    if not nodes or any(n.device is None or n.order is None or n.cost is None for n in nodes):
        return None
    from graphir.simulator import simulate

    return simulate(module).makespan + module.cluster.step_overhead


def run_module(
    module: Module,
    steps: int,
    warmup: int = 2,
    seed: int = 0,
    variables: Mapping[str, Any] | None = None,
    enforce_order: bool | None = None,
    timeout_s: float | None = None,
    what: str = "--run-tf",
) -> RunReport:
    """Lower ``module`` and time it on its cluster's devices (see the module docstring).

    A cluster whose devices name jobs (``/job:worker/task:k/...``) runs on local
    ``tf.distribute.Server`` processes (:mod:`graphir.backends.tf.distributed`), one per task;
    otherwise in process on ``local_cpu_count(module)`` logical CPU devices (a GPU cluster's
    device strings need those GPUs). Before anything runs, the module is checked
    (:func:`graphir.runguard.check_runnable`: ops that reach outside the process) and its memory
    (:func:`graphir.runguard.check_run_memory`: the liveness peak per device against this
    machine's available memory).

    Args:
        module: a placed module (unplaced nodes run where TensorFlow chooses).
        steps: timed steps (>= 1).
        warmup: untimed steps first.
        seed: seed of the inputs and of variables not given in ``variables``.
        variables: initial variable values (``{shared_name or node name: array}``).
        enforce_order: add the order control dependencies (default: when the placement recorded the
            ``enforced`` order and every placed node has one).
        timeout_s: time limit of the whole run, the servers' start-up included (``None``: the run
            time limit, ``--run-timeout``, :func:`graphir.runguard.run_timeout`).
        what: the run, named in errors.
    """
    if steps < 1:
        raise BackendError(f"--run-tf needs at least one step, got {steps}")
    check_runnable(module, what)
    check_run_memory(module, what)
    deadline = Deadline(timeout_s, what)
    if enforce_order is None:
        from graphir.backends.tf.lowering import enforces_order

        enforce_order = enforces_order(module)
    from graphir.backends.tf.lowering import lower

    devices = sorted({module.cluster.device(n.device).tf_device for n in module.graph.nodes if n.device is not None})
    simulated = simulated_makespan(module)
    if is_multihost(module):
        from graphir.backends.tf.rig import rig, run_on_rig

        with rig(module.cluster, timeout_s=deadline.remaining()) as servers:
            measured = run_on_rig(
                module,
                servers,
                steps=steps,
                warmup=warmup,
                trace_steps=1,
                seed=seed,
                variables=variables,
                enforce_order=enforce_order,
                timeout_s=deadline.remaining(),
                what=what,
            )
        times = measured.times_s
        tasks = sorted(tasks_used({name: device for name, device in measured.node_devices.items()}))
        clusters = measured.xla_clusters if measured.xla_clusters[0] else None
    else:
        configure_cpus(local_cpu_count(module))
        lowered = lower(module, enforce_order=enforce_order)
        from graphir.backends.tf.tf_graphdef import variable_values

        given = {node.name: array for node, array in variable_values(module, variables or {}).items()}
        values = {**random_variables(module, seed, skip=set(given)), **given}
        inputs = random_inputs(module, lowered.input_names, seed)
        devices = sorted({d for d in lowered.node_devices.values() if d})
        cpus = local_cpu_count(module)
        clusters = None
        with SessionRunner(module, lowered, "", cpus, values, deadline.remaining(), what) as runner:
            times = time_steps(runner, inputs, steps, warmup)
            if lowered.kernels:  # one more step, traced: did TensorFlow compile what graphir marked?
                from graphir.backends.tf.xla import live_sets

                _, partitions = runner.run_partitioned(inputs)
                runs = sum(1 for part in partitions for node in part.node if node.op == "_XlaRun")
                sets = live_sets(
                    lowered.graph_def(embed_weights=False), list(lowered.kernels.values()), lowered.fetches
                )
                clusters = (len(sets), runs)
        tasks = []
    return RunReport(steps, warmup, statistics.median(times), times, simulated, devices, tasks, clusters)
