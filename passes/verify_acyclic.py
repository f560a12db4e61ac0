"""``verify-acyclic``: check that the graph and the quotient graph of its groups are DAGs.

Loop safety as a pass (Celeritas §5.1.2, Pesto Theorem 3.2): it runs the verifier's own quotient
check, so a cycle is reported exactly as the verifier reports it, naming the groups (and one
member of each) around the cycle. Useful with ``--no-verify`` or after hand-written groups.
Requires nothing; provides nothing. Statistics: ``nodes``, ``groups`` (quotient size).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, register_pass
from graphir.verifier import check_quotient


@register_pass
@dataclasses.dataclass(frozen=True)
class VerifyAcyclic(Pass):
    """Fail with the cycle when the graph or its quotient graph of groups is cyclic."""

    name: ClassVar[str] = "verify-acyclic"

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Check the quotient graph; raises VerifyError naming the cycle."""
        graph = module.graph
        check_quotient(graph)  # builds the index first, which reports a cycle of the graph itself
        index = graph.index()
        return PassResult(False, {"nodes": index.num_nodes, "groups": index.quotient().num_groups})
