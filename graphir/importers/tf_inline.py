"""Function inlining for the TensorFlow importer: one flat ``GraphDef`` from calls into its library.

:class:`_Flattener` inlines ``PartitionedCall``/``StatefulPartitionedCall`` and direct calls of
library functions, nested to any depth, with the naming, device and control-edge rules that
:mod:`graphir.importers.tf` documents under *Functions*.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from graphir.errors import ImportError_, Location

if TYPE_CHECKING:
    from tensorflow.core.framework import attr_value_pb2, function_pb2, graph_pb2, node_def_pb2


CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
"""Ops that call a library function through their ``f`` attr; they are inlined."""


def _split_ref(ref: str) -> tuple[str, int]:
    """``"n"`` -> ``("n", 0)``, ``"n:2"`` -> ``("n", 2)`` (GraphDef tensor references)."""
    head, sep, tail = ref.rpartition(":")
    if sep and tail.isdigit():
        return head, int(tail)
    return ref, 0


Ref = tuple[str, int]
"""A tensor reference during flattening: (node or alias name, output index)."""


def _ref_text(ref: Ref) -> str:
    """How the flat graph writes a tensor reference: ``("n", 0)`` -> ``"n"``, ``("n", 2)`` -> ``"n:2"``."""
    name, index = ref
    return name if index == 0 else f"{name}:{index}"


class _Flattener:
    """Inline every function call of a GraphDef into one flat GraphDef.

    Body nodes are copied with scoped names; references to call results and to function arguments
    go through an alias table resolved once every scope has been expanded, so node order in the
    GraphDef and in function bodies does not matter.
    """

    def __init__(self, graph_def: graph_pb2.GraphDef, source: str):
        self.graph_def = graph_def
        self.source = source
        self.library: dict[str, function_pb2.FunctionDef] = {f.signature.name: f for f in graph_def.library.function}
        from tensorflow.core.framework import graph_pb2

        self.flat = graph_pb2.GraphDef()  # body nodes are copied straight into it, in order
        self.pending: list[tuple[node_def_pb2.NodeDef, list[Ref], list[str]]] = []
        self.alias: dict[Ref, Ref] = {}
        self.ctrl_alias: dict[str, tuple[list[str], list[Ref]]] = {}
        self.emitted: set[str] = set()
        self._output_offsets: dict[tuple[str, str], dict[str, int]] = {}

    def error(self, message: str, node: str | None = None) -> ImportError_:
        return ImportError_(message, Location(file=self.source, node=node))

    def flat_output(self, ref: str) -> str:
        """Map a tensor name of the original graph to the flat graph (call results resolved)."""
        return _ref_text(self.resolve(_split_ref(ref), None))

    def function_of(self, node: node_def_pb2.NodeDef) -> function_pb2.FunctionDef | None:
        """The library function a node calls (through ``f`` or as its op type), else ``None``."""
        if node.op in CALL_OPS:
            fname = node.attr["f"].func.name
            fdef = self.library.get(fname)
            if fdef is None:
                raise self.error(f"'{node.op}' calls function '{fname}', which is not in the library", node.name)
            return fdef
        return self.library.get(node.op)

    def run(self) -> graph_pb2.GraphDef:
        """The flat graph: every call inlined (the input's references to call results resolved)."""
        if not self.library and not any(node.op in CALL_OPS for node in self.graph_def.node):
            return self._copy_flat()
        return self._inline()

    def _inline(self) -> graph_pb2.GraphDef:
        """:meth:`run` for any graph: expand every scope, then resolve every node's inputs."""
        self.expand(self.graph_def.node, "", None, [], "", 0)
        for node, data_refs, ctrl_names in self.pending:
            del node.input[:]
            for ref in data_refs:
                target = self.resolve(ref, node.name)
                node.input.append(_ref_text(target))
            seen: dict[str, None] = {}
            for ctrl in ctrl_names:
                for target in self.resolve_ctrl(ctrl, node.name):
                    seen.setdefault(target, None)
            node.input.extend("^" + n for n in seen)
        flat = self.flat
        flat.versions.CopyFrom(self.graph_def.versions)
        flat.library.CopyFrom(self.graph_def.library)
        return flat

    def _copy_flat(self) -> graph_pb2.GraphDef:
        """:meth:`run` for a graph that calls no function: the graph itself, its inputs checked.

        What :meth:`_inline` makes of such a graph, with its
        checks and errors in the same order, without copying the nodes one by one: every name
        defined once (else "defined twice" at the second), every data input a defined node's
        (else "uses undefined value" at its user), every control input a node (else "refers to an
        undefined node"); data inputs written ``n`` for ``n:0`` and control inputs after them,
        each once. Only the nodes whose inputs change from that are rewritten.
        """
        emitted = self.emitted
        for node in self.graph_def.node:
            if node.name in emitted:
                raise self.error("node name defined twice", node.name)
            emitted.add(node.name)
        flat = self.flat
        flat.CopyFrom(self.graph_def)  # one copy of the whole graph (its library is empty)
        for descriptor, _ in flat.ListFields():  # what expand copies: nodes, versions, library
            if descriptor.name not in ("node", "versions", "library"):
                flat.ClearField(descriptor.name)  # pyright: ignore[reportArgumentType]  # a field name ListFields gave
        flat.library.CopyFrom(self.graph_def.library)  # present, though empty, as run leaves it
        for node in flat.node:
            refs = node.input
            if not refs:
                continue
            rewrite = False
            data: list[str] = []
            controls: list[str] = []
            for ref in refs:
                if ref[:1] == "^":
                    controls.append(ref[1:])
                    continue
                target = _split_ref(ref)
                written = _ref_text(target)
                if target[0] not in emitted:
                    raise self.error(f"uses undefined value '{written}'", node.name)
                if controls or written != ref:
                    rewrite = True  # after a control input, or "n:0"
                data.append(written)
            once: dict[str, None] = {}
            if controls:  # checked after the data inputs, as _inline resolves them
                for name in controls:
                    if name not in emitted:
                        raise self.error(f"control input '^{name}' refers to an undefined node", node.name)
                once = dict.fromkeys(controls)
                rewrite = rewrite or len(once) != len(controls)  # one listed twice: kept once
            if rewrite:
                del refs[:]
                refs.extend(data)
                refs.extend("^" + name for name in once)
        return flat

    def resolve(self, ref: Ref, user: str | None) -> Ref:
        hops = 0
        while ref in self.alias:
            ref = self.alias[ref]
            hops += 1
            if hops > 10_000:
                raise self.error(f"cyclic function references at '{ref[0]}'", user)
        if ref[0] not in self.emitted:
            raise self.error(f"uses undefined value '{_ref_text(ref)}'", user)
        return ref

    def resolve_ctrl(self, name: str, user: str) -> list[str]:
        """Real node names a control dependency on ``name`` (maybe an inlined call) stands for."""
        if name in self.emitted:
            return [name]
        entry = self.ctrl_alias.get(name)
        if entry is None:
            raise self.error(f"control input '^{name}' refers to an undefined node", user)
        names, refs = entry
        out: list[str] = []
        for inner in names:
            out.extend(self.resolve_ctrl(inner, user))
        for ref in refs:
            out.append(self.resolve(ref, user)[0])
        return out

    def output_offset(self, node: node_def_pb2.NodeDef, out_arg: str, scope: str) -> int:
        """Flat index of the first tensor of output arg ``out_arg`` of a body node."""
        key = (scope, node.name)
        offsets = self._output_offsets.get(key)
        if offsets is None:
            offsets = self._output_offsets[key] = self.compute_offsets(node)
        offset = offsets.get(out_arg)
        if offset is None:
            raise self.error(f"'{node.op}' has no output '{out_arg}'", f"{scope}/{node.name}" if scope else node.name)
        return offset

    def compute_offsets(self, node: node_def_pb2.NodeDef) -> dict[str, int]:
        fdef = self.library.get(node.op)
        if fdef is not None:
            return {arg.name: k for k, arg in enumerate(fdef.signature.output_arg)}
        from tensorflow.python.framework import op_def_registry

        op_def = op_def_registry.get(node.op)
        if op_def is None:
            raise self.error(f"op type '{node.op}' is not registered in TensorFlow", node.name)
        defaults = {a.name: a.default_value for a in op_def.attr if a.HasField("default_value")}

        def attr(name: str) -> attr_value_pb2.AttrValue | None:
            return node.attr[name] if name in node.attr else defaults.get(name)

        offsets: dict[str, int] = {}
        position = 0
        for arg in op_def.output_arg:
            offsets[arg.name] = position
            if arg.number_attr:
                value = attr(arg.number_attr)
                position += value.i if value is not None else 1
            elif arg.type_list_attr:
                value = attr(arg.type_list_attr)
                position += len(value.list.type) if value is not None else 1
            else:
                position += 1
        return offsets

    def expand(
        self,
        body: Sequence[node_def_pb2.NodeDef],
        prefix: str,
        fdef: function_pb2.FunctionDef | None,
        call_ctrl: list[str],
        call_device: str,
        depth: int,
    ) -> None:
        """Copy the nodes of one scope (the graph, or a function body called by ``prefix``)."""
        if depth > 64:
            raise self.error(f"function calls nested more than 64 deep at '{prefix}'")
        arg_names = {arg.name for arg in fdef.signature.input_arg} if fdef is not None else set()
        local = {node.name: node for node in body} if fdef is not None else {}

        def scoped(name: str) -> str:
            return f"{prefix}/{name}" if prefix else name

        def translate(ref: str) -> Ref:
            if fdef is None:
                return _split_ref(ref)
            parts = ref.split(":")
            if parts[0] in arg_names:
                return (f"{prefix}:arg:{parts[0]}", int(parts[1]) if len(parts) == 2 else 0)
            if len(parts) != 3 or parts[0] not in local:
                raise self.error(f"function '{fdef.signature.name}' uses undefined value '{ref}'", prefix)
            return (scoped(parts[0]), self.output_offset(local[parts[0]], parts[1], prefix) + int(parts[2]))

        for node in body:
            flat_name = scoped(node.name)
            data_refs: list[Ref] = []
            ctrl_names: list[str] = []
            in_body_producer = False
            for ref in node.input:
                if ref.startswith("^"):
                    ctrl_names.append(scoped(ref[1:]))
                    in_body_producer = True
                    continue
                translated = translate(ref)
                data_refs.append(translated)
                if fdef is not None and ":arg:" not in translated[0]:
                    in_body_producer = True
            inherit = fdef is not None and not in_body_producer and node.op != "Const"
            if inherit:
                ctrl_names.extend(call_ctrl)
            device = node.device or call_device
            callee = self.function_of(node)
            if callee is not None:
                self.inline_call(node, callee, flat_name, data_refs, ctrl_names, device, depth)
                continue
            copy = self.flat.node.add()  # one copy, made in place (no second copy into the GraphDef)
            copy.CopyFrom(node)
            copy.name = flat_name
            copy.device = device
            if prefix and "_class" in copy.attr:
                classes = [c.decode("utf-8", "replace") for c in copy.attr["_class"].list.s]
                del copy.attr["_class"].list.s[:]
                for entry in classes:
                    target = entry[5:] if entry.startswith("loc:@") else None
                    copy.attr["_class"].list.s.append((f"loc:@{scoped(target)}" if target else entry).encode())
            if flat_name in self.emitted:
                raise self.error("node name defined twice", flat_name)
            self.emitted.add(flat_name)
            self.pending.append((copy, data_refs, ctrl_names))

    def inline_call(
        self,
        node: node_def_pb2.NodeDef,
        fdef: function_pb2.FunctionDef,
        flat_name: str,
        data_refs: list[Ref],
        ctrl_names: list[str],
        device: str,
        depth: int,
    ) -> None:
        signature = fdef.signature
        if len(data_refs) != len(signature.input_arg):
            raise self.error(
                f"call of '{signature.name}' passes {len(data_refs)} inputs, the function takes "
                f"{len(signature.input_arg)}",
                flat_name,
            )
        for arg, ref in zip(signature.input_arg, data_refs, strict=True):
            self.alias[(f"{flat_name}:arg:{arg.name}", 0)] = ref
        self.expand(fdef.node_def, flat_name, fdef, ctrl_names, device, depth + 1)
        local = {n.name: n for n in fdef.node_def}
        arg_names = {arg.name for arg in signature.input_arg}
        ret_refs: list[Ref] = []
        for k, arg in enumerate(signature.output_arg):
            ret = fdef.ret.get(arg.name)
            if ret is None:
                raise self.error(f"function '{signature.name}' does not define its output '{arg.name}'", flat_name)
            parts = ret.split(":")
            if parts[0] in arg_names:
                target: Ref = (f"{flat_name}:arg:{parts[0]}", 0)
            elif len(parts) == 3 and parts[0] in local:
                target = (
                    f"{flat_name}/{parts[0]}",
                    self.output_offset(local[parts[0]], parts[1], flat_name) + int(parts[2]),
                )
            else:
                raise self.error(f"function '{signature.name}' returns undefined value '{ret}'", flat_name)
            self.alias[(flat_name, k)] = target
            ret_refs.append(target)
        control_nodes = [f"{flat_name}/{fdef.control_ret[key]}" for key in sorted(fdef.control_ret)]
        self.ctrl_alias[flat_name] = (control_nodes, ret_refs)
