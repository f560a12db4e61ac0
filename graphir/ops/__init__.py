"""Op definitions: per op kind, one :class:`OpDef` with its type rule, cost, split rule and lowering.

This package is the IR's dialect library (in the spirit of xDSL's IRDL definitions): what each op
*means* to the compiler is written in one place, grouped by op family, instead of in four parallel
string tables (verifier, cost model, operation splitting, ONNX -> TensorFlow lowering). An
:class:`OpDef` has five optional facets:

* ``type_rule(node, operand types, result types) -> message | None``, run by the verifier;
* ``cost(node, input shapes, output shapes, input bytes, output bytes) -> (flops, bytes, temporary)``,
  the estimator of the analytical cost model (:mod:`graphir.ops.work`);
* ``split``: a :class:`SplitRule`, the dimensions OS-DPOS tries and the function planning how FastT
  operation splitting cuts the op (:mod:`graphir.ops.split_plan`);
* ``lower(cx, operands) -> results``: the TensorFlow lowering of an ONNX-imported op; it receives the
  ``tensorflow`` module in ``cx.tf`` (:mod:`graphir.ops.lower_context`), so nothing here imports it;
* ``weight_layout(node) -> {input position: permutation}``: the layout the lowering reads a weight
  in, so the lowering driver can store a large weight that way once instead of permuting it each step.

**Op kinds.** An op kind is registered either under its dialect-qualified name (``onnx.Conv``) or
under its bare op type (``Relu``), which stands for that op type in every dialect. Costs are keyed by
bare types wherever ONNX, TensorFlow and ONNX's vendor domains (``onnx.com.microsoft.FusedConv``)
agree, and by qualified name where they differ (``tf.Sum`` reduces, ONNX ``Sum`` adds its operands).
Each facet resolves on its own (:mod:`graphir.ops.registry`): the cost from the qualified definition,
else the bare type's; type rules, split rules and lowerings from the qualified definition only,
because layouts differ between dialects (ONNX images are NCHW, TensorFlow's NHWC).

**Families** (one module each; within a module the four facets of its ops sit together):
:mod:`~graphir.ops.elementwise`, :mod:`~graphir.ops.matmul`, :mod:`~graphir.ops.conv_pool`,
:mod:`~graphir.ops.norm`, :mod:`~graphir.ops.tensor`, :mod:`~graphir.ops.training`,
:mod:`~graphir.ops.attention`, :mod:`~graphir.ops.recurrent`,
:mod:`~graphir.ops.detection`, :mod:`~graphir.ops.control_flow`, :mod:`~graphir.ops.strings` and
:mod:`~graphir.ops.graphir_dialect` (``graphir.split``/``graphir.concat``). Importing the package
registers them all. Plugins add op kinds with :func:`define` or the facet decorators.

**Users.** The algorithms that use op facts live where the layering puts them: the verifier
(:func:`type_rule_of`), the roofline and whole-graph analysis (:mod:`graphir.passes.profile.roofline`,
through :func:`estimate_node`), the split rewrite (:mod:`graphir.passes.transform.split_rewrite`,
through :func:`split_of`), and the lowering driver (:mod:`graphir.backends.tf.lowering`, through
:func:`lowering_of`). ``docs/ops.md`` is generated from this registry (``python -m devtools.opdoc --write``).
"""

from __future__ import annotations

# The registry first: the family modules register into it when imported below.
from graphir.ops.registry import (
    OPS,
    OpDef,
    SplitRule,
    bare_op,
    cost,
    cost_of,
    define,
    lowered_ops,
    lowering,
    lowering_of,
    op_def,
    split_of,
    split_rule,
    type_rule,
    type_rule_of,
    weight_layout,
    weight_layout_of,
)
from graphir.ops.work import estimate_node, fallback_count, is_variable, owns_value, static_shape, variable_bytes

# isort: split
# Imported for their registrations (`x as x` marks a re-export, used).
from graphir.ops import attention as attention
from graphir.ops import control_flow as control_flow
from graphir.ops import conv_pool as conv_pool
from graphir.ops import decode_state as decode_state
from graphir.ops import detection as detection
from graphir.ops import elementwise as elementwise
from graphir.ops import graphir_dialect as graphir_dialect
from graphir.ops import indexing as indexing
from graphir.ops import matmul as matmul
from graphir.ops import norm as norm
from graphir.ops import recurrent as recurrent
from graphir.ops import strings as strings
from graphir.ops import tensor as tensor
from graphir.ops import training as training
from graphir.ops.lower_context import OpContext, onnx_inputs, tf_dtype
from graphir.ops.split_plan import Dim, SplitError, SplitPlan

__all__ = [
    "OPS",
    "Dim",
    "OpContext",
    "OpDef",
    "SplitError",
    "SplitPlan",
    "SplitRule",
    "bare_op",
    "cost",
    "cost_of",
    "define",
    "estimate_node",
    "fallback_count",
    "is_variable",
    "lowered_ops",
    "lowering",
    "lowering_of",
    "onnx_inputs",
    "op_def",
    "owns_value",
    "split_of",
    "split_rule",
    "static_shape",
    "tf_dtype",
    "type_rule",
    "type_rule_of",
    "variable_bytes",
    "weight_layout",
    "weight_layout_of",
]
