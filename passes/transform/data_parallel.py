"""``data-parallel{replicas=N batch=G}``: replicate a training graph N times (FastT's data-parallel input graph).

Rewrites the module into the graph TensorFlow's in-graph data parallelism runs
(:func:`graphir.passes.transform.replicate.data_parallel`): ``replicas`` copies of the forward and backward pass
(``replica<i>/...``), each on ``G / N`` samples of the global batch ``G``, sharing only the variables
(handles, reads, optimizer updates); each value a replica hands to the shared part (gradients,
moving statistics, the loss) is averaged over the replicas (``tf.AddN`` then ``tf.Mul`` by ``1/N``)
before the single update. Per-replica types come from the model at batch ``G / N`` (the zoo's
builder traces it again; other TF graphs get their placeholders re-batched), so ``Reshape``
targets and other batch-dependent constants are right. A profiled module keeps consistent costs
(scaled by the analytical time ratio) and gets ``mem`` recomputed; a placement is dropped.

``place{algo=data-parallel}`` (registered here) is the baseline placement of such a graph: replica
``i`` on device ``i mod |D|``, variables spread over the devices by bytes together with their
reads, optimizer slots and updates, aggregation with its update
(:func:`graphir.passes.transform.replicate.data_parallel_devices`); the order comes from list scheduling.
That device map depends on the graph's meaning (replica name prefixes, resource handles), which the
placement problem's arrays do not hold, so the placer computes it in its *device hints* pre-step
(``Placer.device_hints``, run by ``place`` on the Module before the problem is built) and its pure
``place`` reads the answer as ``problem.preferred`` (a fusion group follows its first member).

Requires nothing; provides nothing. Options: ``replicas`` (>= 1), ``batch`` (the global batch, 0:
the module's own; a multiple of ``replicas``). Statistics: ``replicas``, ``global-batch``,
``replica-batch``, ``replicated-nodes`` (per replica), ``shared-nodes``, ``aggregated-values``,
``aggregation-nodes``, ``nodes``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

from graphir.errors import PassError
from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, register_pass
from graphir.passes.place import Placement, PlacementContext, Placer, register_placer
from graphir.passes.place.problem import PlacementProblem
from graphir.passes.transform.replicate import data_parallel, data_parallel_devices


@register_pass
@dataclasses.dataclass(frozen=True)
class DataParallel(Pass):
    """Replicate the training graph ``replicas`` times on slices of the global batch, gradients averaged.

    Options:
        replicas: number of replicas (>= 1).
        batch: global batch over all replicas (0: the module's own batch).
    """

    name: ClassVar[str] = "data-parallel"
    replicas: int = 2
    batch: int = 0

    def __post_init__(self) -> None:
        """Reject impossible options when the pipeline is parsed."""
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas}")
        if self.batch < 0:
            raise ValueError(f"batch must be >= 0 (0: the module's own), got {self.batch}")

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Build the data-parallel graph and move it into ``module``."""
        result = data_parallel(module, self.replicas, batch=self.batch)
        module.graph = result.module.graph
        module.metadata = result.module.metadata
        ctx.log(
            f"data-parallel: {result.replicas} replicas x {len(result.replicated)} nodes at batch "
            f"{result.replica_batch}, {len(result.shared)} shared, {len(result.aggregated)} values averaged"
        )
        return PassResult(
            True,
            {
                "replicas": result.replicas,
                "global-batch": result.global_batch,
                "replica-batch": result.replica_batch,
                "replicated-nodes": len(result.replicated),
                "shared-nodes": len(result.shared),
                "aggregated-values": len(result.aggregated),
                "aggregation-nodes": len(result.aggregation_nodes),
                "nodes": len(module.graph),
            },
        )


@register_placer
@dataclasses.dataclass(frozen=True)
class DataParallelPlacer(Placer):
    """The "data parallel" baseline: each replica on its own device, variables balanced by bytes."""

    name: ClassVar[str] = "data-parallel"

    def device_hints(self, module: Module) -> Mapping[str, str]:
        """Replica ``i`` on device ``i mod |D|``, variable classes balanced by bytes (every node gets one)."""
        return data_parallel_devices(module)

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """The hinted device of every coarse node."""
        device = problem.preferred.copy()
        if (device < 0).any():
            raise PassError("place{algo=data-parallel}: a node has no data-parallel device (run data-parallel first)")
        return Placement(device)
