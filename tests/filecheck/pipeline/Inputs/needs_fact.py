"""Test plugin: a pass that requires a fact no registered pass provides."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, register_pass


@register_pass
@dataclasses.dataclass(frozen=True)
class NeedsColour(Pass):
    """Requires 'colour', which nothing provides."""

    name: ClassVar[str] = "needs-colour"
    requires: ClassVar[tuple[str, ...]] = ("colour",)

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Never reached: the prerequisite check fails first."""
        return PassResult()
