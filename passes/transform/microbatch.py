"""``microbatch{n=M}``: gradient accumulation, M micro-batches of one training step.

Rewrites a training-step graph into ``M`` copies of its forward and backward pass (``mb<m>/...``),
each on ``G / M`` samples of the step's batch ``G``, whose gradients (and other values handed to the
shared part: moving statistics, the loss) are summed and scaled once by ``1/M`` before the one
optimizer update; values that carry the batch are concatenated along it. It is the data-parallel
rewrite with micro-batches (:func:`graphir.passes.transform.replicate.data_parallel` with
``replicas=D microbatches=M``; ``data-parallel{replicas=D microbatches=M}`` is the same with ``D``
replicas, names ``replica<r>/mb<m>/...``, each replica accumulating its micro-batches first).

**Feeds.** The graph takes exactly the original feeds: each batch placeholder (and graph input)
stays one node at the step's batch, with its name, and a ``graphir.split`` along the batch axis
(``dp/split/<name>``) gives micro-batch ``m`` its slice ``[m*G/M, (m+1)*G/M)``. (With ``D``
replicas, each replica has its own placeholder ``replica<r>/<name>`` at ``G / D``, as the
data-parallel rewrite has always done, split in ``M``.)

The copies' types and batch-carrying constants come from the IR's re-batching
(:func:`graphir.passes.transform.rebatch.rebatch`) at ``G / M``. Each micro-batch's loss is the mean
over its own samples, so the scaled sum of the micro-batches' gradients equals the full batch's
gradient for losses that are means over samples and models without batch statistics (a
batch-norm layer normalises each micro-batch by its own statistics, as every gradient-accumulation
implementation does; dropout draws per micro-batch).

Requires nothing; provides nothing. Options: ``n`` (micro-batches, >= 1; 1 leaves a graph of one
copy ``mb0``-free: the module re-batched to itself). Statistics: ``microbatches``, ``microbatch``
(samples per copy), ``replicated-nodes`` (per copy), ``shared-nodes``, ``aggregated-values``,
``aggregation-nodes``, ``nodes``. Module metadata: ``data_parallel_replicas`` = 1 and
``microbatches`` = M.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from graphir.errors import PassError
from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, register_pass
from graphir.passes.transform.replicate import MICROBATCHES_METADATA, REPLICAS_METADATA, data_parallel

__all__ = ["Microbatch"]


@register_pass
@dataclasses.dataclass(frozen=True)
class Microbatch(Pass):
    """Split the training step into ``n`` micro-batches whose gradients are accumulated before one update.

    Options:
        n: number of micro-batches (>= 1); must divide the batch.
    """

    name: ClassVar[str] = "microbatch"
    n: int = 2

    def __post_init__(self) -> None:
        """Reject impossible options when the pipeline is parsed."""
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Build the micro-batched graph and move it into ``module``."""
        if REPLICAS_METADATA in module.metadata or MICROBATCHES_METADATA in module.metadata:
            raise PassError(
                f"module '{module.name}' is already replicated or micro-batched: "
                "use one data-parallel{replicas=D microbatches=M} instead"
            )
        result = data_parallel(module, 1, microbatches=self.n)
        module.graph = result.module.graph
        module.metadata = result.module.metadata
        ctx.log(
            f"microbatch: {self.n} x {len(result.replicated)} nodes at batch {result.microbatch}, "
            f"{len(result.shared)} shared, {len(result.aggregated)} values accumulated"
        )
        return PassResult(
            True,
            {
                "microbatches": self.n,
                "microbatch": result.microbatch,
                "replicated-nodes": len(result.replicated),
                "shared-nodes": len(result.shared),
                "aggregated-values": len(result.aggregated),
                "aggregation-nodes": len(result.aggregation_nodes),
                "nodes": len(module.graph),
            },
        )
