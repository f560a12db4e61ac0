"""String ops of the default ONNX domain: ``StringConcat``, ``StringSplit``, ``RegexFullMatch``, ``StringNormalizer``.

Lowering facets only (their cost falls back to bytes-only estimates; they are never split).
TensorFlow strings are bytes: the ONNX backend runner's string outputs compare equal after decoding.

* ``StringConcat``: ``tf.strings.join`` after broadcasting both operands (numpy rules).
* ``StringSplit``: ``tf.strings.split`` (no delimiter: runs of whitespace, as Python's ``str.split``),
  padded with ``""`` to the longest split, plus the number of pieces per string.
* ``RegexFullMatch``: ``tf.strings.regex_full_match`` (both ONNX and TensorFlow use RE2 syntax).
* ``StringNormalizer``: stop words removed word by word (case-insensitively unless
  ``is_case_sensitive``), case changed (UTF-8 aware), and empty strings dropped, leaving ``[""]``
  when none is left, as the ONNX reference does. The reference also strips accents (Unicode NFKD);
  TensorFlow has no Unicode normalisation, so accented input is left as it is.
"""

from __future__ import annotations

from typing import Any

from graphir.ops.lower_context import OpContext
from graphir.ops.registry import lowering


@lowering("StringConcat")
def _string_concat(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    a, b = operands
    shape = tf.broadcast_dynamic_shape(tf.shape(a), tf.shape(b))
    return [tf.strings.join([tf.broadcast_to(a, shape), tf.broadcast_to(b, shape)])]


@lowering("StringSplit")
def _string_split(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    delimiter = cx.param("delimiter") or None
    maxsplit = cx.param("maxsplit")
    x = operands[0]
    flat = tf.reshape(x, [-1])
    pieces = tf.strings.split(flat, sep=delimiter, maxsplit=-1 if maxsplit is None else int(maxsplit))
    if delimiter is None:  # whitespace splitting never yields empty pieces (TF adds one with maxsplit)
        pieces = tf.ragged.boolean_mask(pieces, tf.strings.length(pieces) > 0)
    counts = tf.reshape(tf.cast(pieces.row_lengths(), tf.int64), tf.shape(x))
    padded = pieces.to_tensor(default_value="")
    shape = tf.concat([tf.shape(x), tf.shape(padded)[1:]], axis=0)
    return [tf.reshape(padded, shape), counts]


@lowering("RegexFullMatch")
def _regex_full_match(cx: OpContext, operands: list[Any]) -> list[Any]:
    return [cx.tf.strings.regex_full_match(operands[0], str(cx.param("pattern")))]


@lowering("StringNormalizer")
def _string_normalizer(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    rank = cx.rank(0)
    flat = tf.reshape(x, [-1])
    action = cx.param("case_change_action", "NONE")
    sensitive = bool(int(cx.param("is_case_sensitive", 0)))
    stops = [str(w) for w in (cx.param("stopwords") or ())]

    def change_case(text: Any) -> Any:
        if action == "LOWER":
            return tf.strings.lower(text, encoding="utf-8")
        if action == "UPPER":
            return tf.strings.upper(text, encoding="utf-8")
        return text

    def drop_stop_words(text: Any, words: list[str]) -> Any:
        tokens = tf.strings.split(text, sep=" ")

        def is_stop_word(t: Any) -> Any:  # t: the tokens' flat values, a string tensor
            return tf.reduce_any(tf.equal(t[:, None], tf.constant(words)[None, :]), axis=1)

        hit = tf.ragged.map_flat_values(is_stop_word, tokens)
        kept = tf.ragged.boolean_mask(tokens, tf.logical_not(hit))
        return tf.strings.reduce_join(kept, axis=-1, separator=" ")

    if stops and sensitive:
        flat = drop_stop_words(flat, stops)
    flat = change_case(flat)
    if stops and not sensitive:
        folded = {"LOWER": [w.lower() for w in stops], "UPPER": [w.upper() for w in stops]}.get(action, stops)
        flat = drop_stop_words(flat, folded)
    flat = tf.boolean_mask(flat, tf.strings.length(flat) > 0)
    flat = tf.cond(tf.size(flat) > 0, lambda: flat, lambda: tf.constant([""]))
    return [flat if rank == 1 else tf.reshape(flat, [1, -1])]
