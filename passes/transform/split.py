"""``split{op=NAME parts=N axis=batch|channel|K}``: split one named op (FastT operation splitting).

Rewrites the node called ``op`` into ``parts`` parts along ``axis`` with
:func:`graphir.passes.transform.split_rewrite.split_node`:
``graphir.split`` nodes cut the operands, the parts compute slices of the result, and a
``graphir.concat`` node (which keeps the op's name and result name) joins them. ``axis`` is
``batch`` (dim 0 of the activations), ``channel`` (output channels / output features; the weight is
cut) or an integer axis of the result (elementwise ops and pooling).

When the op had ``cost``/``mem`` (a profiled graph), the new nodes get them too
(:func:`graphir.passes.transform.split_rewrite.annotate_split`). A placement of the old graph does not
describe the new one:
``device``, ``order``, ``start`` and ``finish`` are removed from every node when present (statistic
``placement-dropped``). Ops that cannot be split correctly are refused with one line saying why.

Requires nothing; provides nothing. Statistics: ``parts``, ``split-nodes`` (``graphir.split``
nodes inserted), ``sliced-constants``, ``new-nodes``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from graphir.errors import PassError
from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, register_pass
from graphir.passes.transform.split_rewrite import Dim, annotate_split, split_node

_PLACEMENT_KEYS = ("device", "order", "start", "finish")


def parse_dim(text: str) -> Dim:
    """``batch``, ``channel`` or an integer axis; raises ``ValueError`` otherwise."""
    if text in ("batch", "channel"):
        return text
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"axis must be batch, channel or an integer, got '{text}'") from None


@register_pass
@dataclasses.dataclass(frozen=True)
class Split(Pass):
    """Split the op ``op`` into ``parts`` parts along ``axis``.

    Options:
        op: name of the node to split.
        parts: number of parts (>= 2).
        axis: ``batch``, ``channel`` or an integer axis of the op's result.
    """

    name: ClassVar[str] = "split"
    op: str = ""
    parts: int = 2
    axis: str = "batch"

    def __post_init__(self) -> None:
        """Reject a malformed ``axis`` or ``parts`` when the pipeline is parsed."""
        parse_dim(self.axis)
        if self.parts < 2:
            raise ValueError(f"parts must be >= 2, got {self.parts}")

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Split the named node, annotate the new nodes, drop a stale placement."""
        if not self.op:
            raise PassError("split needs op=NAME (the node to split)")
        graph = module.graph
        node = graph.get_node(self.op)
        if node is None:
            raise PassError(f"no node named '{self.op}' in graph '{graph.name}'")
        result = split_node(node, parse_dim(self.axis), self.parts)
        annotate_split(module, result)
        dropped = False
        for other in graph.nodes:
            for key in _PLACEMENT_KEYS:
                if other.annotations.get(key) is not None:
                    other.del_annotation(key)
                    dropped = True
        ctx.log(f"split: '{self.op}' into {self.parts} parts on {self.axis}")
        return PassResult(
            True,
            {
                "parts": self.parts,
                "split-nodes": len(result.splits),
                "sliced-constants": len(result.constants),
                "new-nodes": len(result.new_nodes),
                "placement-dropped": int(dropped),
            },
        )
