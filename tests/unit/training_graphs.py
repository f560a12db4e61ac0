"""Hand-built training steps for the pipeline and parallelize tests (text of a .gir module).

:func:`mlp_train` writes an L-layer MLP training step out as TensorFlow's gradient code would:
forward ``d<k>/MatMul -> d<k>/Relu``, a ``loss/Sum``, the backward of each layer under
``gradient_tape/d<k>/`` (named under its forward op, as TensorFlow names gradients: ``ReluGrad``,
the weight gradient ``MatMul`` with ``transpose_a``, the input gradient ``MatMul`` with
``transpose_b``), and one ``ResourceApplyAdam`` per weight with its two slots.
"""

from __future__ import annotations

APPLY = "(resource[], resource[], resource[], f32[], f32[WxW]) -> ()"


def mlp_train(layers: int = 4, batch: int = 256, width: int = 1024, cluster: str = "4xV100") -> str:
    """The text of an L-layer MLP training step (module docstring)."""
    t = f"f32[{batch},{width}]"
    w = f"f32[{width},{width}]"
    lines = [
        f'module @mlp_train {{cluster = "{cluster}"}} {{',
        "  graph @main() {",
        f'    %x = tf.Placeholder() {{dtype = "f32"}} : () -> {t}',
        '    %adam/lr = tf.Const() {dtype = "f32", value = dense<f32[] = [0.001]>} : () -> f32[]',
    ]
    h = "%x"
    for k in range(layers):
        lines += [
            f'    %d{k}/w = tf.VarHandleOp() {{dtype = "f32", shape = [{width}, {width}]}} : () -> resource[]',
            f'    %d{k}/m = tf.VarHandleOp() {{dtype = "f32", shape = [{width}, {width}]}} : () -> resource[]',
            f'    %d{k}/v = tf.VarHandleOp() {{dtype = "f32", shape = [{width}, {width}]}} : () -> resource[]',
            f'    %d{k}/read = tf.ReadVariableOp(%d{k}/w) {{dtype = "f32"}} : (resource[]) -> {w}',
            f"    %d{k}/MatMul = tf.MatMul({h}, %d{k}/read) : ({t}, {w}) -> {t}",
            f"    %d{k}/Relu = tf.Relu(%d{k}/MatMul) : ({t}) -> {t}",
        ]
        h = f"%d{k}/Relu"
    lines += [
        '    %loss/axes = tf.Const() {dtype = "i32", value = dense<i32[2] = [0, 1]>} : () -> i32[2]',
        f"    %loss/Sum = tf.Sum({h}, %loss/axes) : ({t}, i32[2]) -> f32[]",
        f'    %gradient_tape/shape = tf.Const() {{dtype = "i32", value = dense<i32[2] = [{batch}, {width}]>}} '
        ": () -> i32[2]",
        '    %gradient_tape/one = tf.Const() {dtype = "f32", value = dense<f32[] = [1.0]>} : () -> f32[]',
        f"    %gradient_tape/loss/Fill = tf.Fill(%gradient_tape/shape, %gradient_tape/one) : (i32[2], f32[]) -> {t}",
    ]
    g = "%gradient_tape/loss/Fill"
    updates = []
    for k in reversed(range(layers)):
        x = f"%d{k - 1}/Relu" if k else "%x"
        s = f"gradient_tape/d{k}"  # TensorFlow names a gradient under its forward op's name
        lines += [
            f"    %{s}/Relu/ReluGrad = tf.ReluGrad({g}, %d{k}/Relu) : ({t}, {t}) -> {t}",
            f"    %{s}/MatMul/MatMul_1 = tf.MatMul({x}, %{s}/Relu/ReluGrad) {{transpose_a = true}} : ({t}, {t}) -> {w}",
        ]
        if k:  # the input's gradient (none for the first layer: x is data)
            lines.append(
                f"    %{s}/MatMul/MatMul = tf.MatMul(%{s}/Relu/ReluGrad, %d{k}/read) {{transpose_b = true}} "
                f": ({t}, {w}) -> {t}"
            )
        lines.append(
            f"    tf.ResourceApplyAdam @d{k}/adam(%d{k}/w, %d{k}/m, %d{k}/v, %adam/lr, %{s}/MatMul/MatMul_1) "
            f": {APPLY.replace('WxW', f'{width},{width}')}"
        )
        g = f"%{s}/MatMul/MatMul"
        updates.append(f"@d{k}/adam")
    lines += [
        f"    %out = tf.Identity(%loss/Sum) ctrl({', '.join(updates)}) : (f32[]) -> f32[]",
        "    return %out",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"
