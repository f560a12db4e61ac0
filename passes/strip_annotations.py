"""``strip-annotations``: drop annotations (all, or the listed keys) from every node."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from graphir.annotations import ANNOTATIONS
from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, register_pass


@register_pass
@dataclasses.dataclass(frozen=True)
class StripAnnotations(Pass):
    """Remove annotations. Requires nothing; provides nothing.

    Options:
        keys: the annotation keys to remove; empty means every annotation.
    """

    name: ClassVar[str] = "strip-annotations"
    keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Reject unknown keys when the pipeline is parsed (the error points at the pass)."""
        unknown = [k for k in self.keys if k not in ANNOTATIONS]
        if unknown:
            raise ValueError(
                f"unknown annotation key(s) {', '.join(unknown)} (known: {', '.join(sorted(ANNOTATIONS))})"
            )

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Delete the selected annotation keys on every node."""
        removed = 0
        for node in module.graph.nodes:
            keys = list(node.annotations) if not self.keys else [k for k in self.keys if k in node.annotations]
            for key in keys:
                node.del_annotation(key)
            removed += len(keys)
        return PassResult(removed > 0, {"annotations-removed": removed})
