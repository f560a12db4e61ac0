"""TensorFlow's functional control flow as regions: the bodies of ``While``/``If`` imported as graphs.

A TF2 ``tf.function`` keeps ``tf.while_loop`` and ``tf.cond`` as one functional op
(``While``/``StatelessWhile``, ``If``/``StatelessIf``) whose ``cond``/``body`` or
``then_branch``/``else_branch`` attrs name functions of the GraphDef's library. The importer turns
each of those functions into a :class:`~graphir.regions.Region` param of the node, under the attr's
name (:mod:`graphir.regions`: ``While``'s regions take the loop variables, ``cond`` returns the
boolean and ``body`` the next loop variables; ``If``'s branches take the operands after the
condition and return the results). TensorFlow passes every value a body uses as an explicit
operand, so these regions capture nothing.

**How a function becomes a region graph.** A one-call GraphDef is built around it: one
``Placeholder`` per argument (its dtype from the signature, its shape the operand's, or for a
``While`` the loop variable's shape invariant from ``output_shapes``), one ``PartitionedCall`` of
the function, and the library. That GraphDef goes through the importer's own steps
(:class:`~graphir.importers.tf_inline._Flattener` inlines the call, nested calls included, and
:class:`~graphir.importers.tf_convert._TfImporter` infers shapes and converts, its own nested
``While``/``If`` into regions in turn): the placeholders become the region's inputs, the call's
results its outputs. Body nodes are named ``<attr>/<function node>`` (the call's inlining prefix).

The lowering rebuilds a library function from each region
(:func:`graphir.backends.tf.tf_graphdef.build_graphdef`), so the region is the source of truth
after import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from graphir.errors import ImportError_, Location
from graphir.types import TensorType

if TYPE_CHECKING:
    from tensorflow.core.framework import function_pb2, graph_pb2

    from graphir.ir import Graph

__all__ = ["REGION_ATTRS", "function_region"]

REGION_ATTRS: dict[str, tuple[str, ...]] = {
    "While": ("cond", "body"),
    "StatelessWhile": ("cond", "body"),
    "If": ("then_branch", "else_branch"),
    "StatelessIf": ("then_branch", "else_branch"),
}
"""TF functional control-flow op -> its function attrs, imported as regions of the same names."""


def _shape_proto(tensor_type: TensorType) -> Any:
    from tensorflow.core.framework import tensor_shape_pb2

    shape = tensor_shape_pb2.TensorShapeProto()
    if tensor_type.shape is None:
        shape.unknown_rank = True
        return shape
    for dim in tensor_type.shape:
        shape.dim.add(size=dim if isinstance(dim, int) else -1)
    return shape


RegionConverter: TypeAlias = "Callable[[Any, str, str, Sequence[str], Sequence[str]], Graph]"
"""``(flattened graph, source, region name, outputs, argument names) -> region graph`` (the importer's)."""


def function_region(
    library: function_pb2.FunctionDefLibrary,
    function: str,
    region_name: str,
    arg_types: Sequence[TensorType],
    source: str,
    node: str,
    convert: RegionConverter,
) -> Graph:
    """The region graph of library function ``function`` called with arguments of ``arg_types``.

    ``convert(flat, source, region_name, outputs, arguments)`` turns the flattened one-call graph
    into a region graph: the importer passes its own conversion (so nested ``While``/``If`` become
    regions in turn), which keeps this module below it (no import cycle).

    Raises:
        ImportError_: the function is missing, takes another number of arguments, or its body
            cannot be imported (the message names the holder ``node``).
    """
    from tensorflow.core.framework import graph_pb2
    from tensorflow.python.framework import versions

    from graphir.importers.tf_inline import _Flattener

    fdef = next((f for f in library.function if f.signature.name == function), None)
    if fdef is None:
        raise ImportError_(
            f"'{region_name}' names function '{function}', which is not in the library",
            Location(file=source, node=node),
        )
    args = fdef.signature.input_arg
    if len(args) != len(arg_types):
        raise ImportError_(
            f"'{region_name}' function '{function}' takes {len(args)} arguments, the op passes {len(arg_types)}",
            Location(file=source, node=node),
        )
    graph_def: graph_pb2.GraphDef = graph_pb2.GraphDef()
    graph_def.versions.producer = versions.GRAPH_DEF_VERSION
    graph_def.library.CopyFrom(library)
    names = []
    for k, (arg, arg_type) in enumerate(zip(args, arg_types, strict=True)):
        name = f"{region_name}_arg{k}"
        placeholder = graph_def.node.add(name=name, op="Placeholder")
        placeholder.attr["dtype"].type = arg.type
        placeholder.attr["shape"].shape.CopyFrom(_shape_proto(arg_type))
        names.append(name)
    call = graph_def.node.add(name=region_name, op="PartitionedCall", input=names)
    call.attr["f"].func.name = function
    flattener = _Flattener(graph_def, source)
    flat = flattener.run()
    outputs = [flattener.flat_output(f"{region_name}:{k}") for k in range(len(fdef.signature.output_arg))]
    return convert(flat, source, region_name, outputs, names)
