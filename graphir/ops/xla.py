"""Which TensorFlow ops a compiled kernel cluster (XLA) can hold, and what part each plays in it.

The facts :mod:`graphir.passes.fuse.kernels` (``fuse-kernels``) reads to form fused-kernel sets
and to cost them. An op is one of:

* ``elementwise``: a loop over its output with no reduction (arithmetic, comparisons, selects,
  casts, broadcasts, transposes, bias adds, activation gradients). XLA fuses chains of them into
  one kernel (loop fusion); identity-like ops (``Identity``, ``StopGradient``, ``Reshape``,
  ``ExpandDims``, ``Squeeze``) are in this class too and cost nothing inside a kernel (XLA makes
  them bitcasts; graphir's cost facet already gives them no work);
* ``reduction``: a reduction over some axes (``Sum``, ``Mean``, ``BiasAddGrad``, ``Softmax``...).
  XLA fuses its producers into it (input fusion) and ends the kernel there: its consumers start
  another kernel (measured: LayerNorm + GELU, 29 TF ops, became 6 XLA kernels, one per
  reduction; benchmarks/results/xla-fusion-notes.md section 2);
* ``dot``: a matrix product. XLA runs it as its own library kernel (cuBLAS, Eigen), so it is a
  kernel of its own inside a cluster; it may join a cluster so that the elementwise ops around it
  (reshapes, transposes, bias adds) do.
* ``constant``: a ``Const`` op; it joins a cluster when only that cluster reads it (it becomes a
  literal of the compiled kernel);
* ``read``: ``ReadVariableOp``, a resource variable's value; it joins a cluster when only that
  cluster reads it (the variable becomes an argument of the compiled kernel: its bytes are read by
  the kernels that use it, and the read launches nothing).

Only TensorFlow-dialect ops are listed: the clusters are XLA clusters of the TF lowering, whose
marks name TF ops (:mod:`graphir.backends.tf.lowering`). Ops absent here stay out of every cluster:
ops with host-memory integer shape computations (``StridedSlice`` of shapes, ``InvertPermutation``,
``BroadcastGradientArgs``, ``Shape``), resource and state ops (``VarHandleOp``, ``AssignVariableOp``,
``ResourceApplyAdam``), random ops, gathers and scatters, and graphir's own
``graphir.split``/``graphir.concat``.
"""

from __future__ import annotations

__all__ = ["XLA_ROLES", "xla_role"]

_ELEMENTWISE = (
    "Abs Add AddN AddV2 BiasAdd BroadcastTo Cast Ceil ClipByValue Cos DivNoNan Div Elu EluGrad Equal Erf Exp "
    "ExpandDims Expm1 Floor FloorDiv FloorMod Greater GreaterEqual Identity LeakyRelu Less LessEqual Log Log1p "
    "LogicalAnd LogicalNot LogicalOr Maximum Minimum Mul Neg NotEqual OnesLike Pow RealDiv Reciprocal Relu Relu6 "
    "Relu6Grad ReluGrad Reshape Round Rsqrt RsqrtGrad Select SelectV2 Selu Sigmoid SigmoidGrad Sign Sin Softplus "
    "Sqrt SqrtGrad Square SquaredDifference Squeeze StopGradient Sub Tanh TanhGrad Tile Transpose ZerosLike"
)
_REDUCTION = "All Any BiasAddGrad LogSoftmax Max Mean Min Prod Softmax Sum"
_DOT = "BatchMatMul BatchMatMulV2 BatchMatMulV3 MatMul"

XLA_ROLES: dict[str, str] = {
    **{f"tf.{op}": "elementwise" for op in _ELEMENTWISE.split()},
    **{f"tf.{op}": "reduction" for op in _REDUCTION.split()},
    **{f"tf.{op}": "dot" for op in _DOT.split()},
    "tf.Const": "constant",
    "tf.ReadVariableOp": "read",
}
"""Qualified TF op name -> its part in a compiled kernel cluster (see the module docstring)."""


def xla_role(op: str) -> str | None:
    """The part an op plays in a cluster (``elementwise``, ``reduction``, ``dot``, ``constant``, ``read``), or None."""
    return XLA_ROLES.get(op)
