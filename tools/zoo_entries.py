"""The model zoo's catalogue: every entry (model, inference or training, batch, configuration) and where it is built.

:data:`ENTRIES` names each entry ``<model>_infer`` or ``<model>_train`` (see :mod:`graphir.tools.zoo`
for what each kind of file holds); :func:`zoo_dir` is the folder they are built into.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs

ZOO_DIR_ENV = "GRAPHIR_ZOO_DIR"


def zoo_dir() -> Path:
    """Where entries are built: ``$GRAPHIR_ZOO_DIR`` or ``zoo/`` at the repository root."""
    override = os.environ.get(ZOO_DIR_ENV)
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[1] / "zoo"


@attrs.frozen
class Entry:
    """One zoo entry.

    Attributes:
        name: the entry name (``inception_v3_train``), used as ``zoo:<name>`` and as file stem.
        model: key of the model builder in :data:`graphir.tools.zoo_models.MODELS`.
        mode: ``"infer"`` (ONNX) or ``"train"`` (TF GraphDef of one training step).
        batch: batch size.
        config: model options passed to the builder (layer counts, widths, sequence length).
        note: where the configuration comes from.
        exclusive: build with no other build running, after the others (memory); no entry needs it
            since the big inference entries are converted with external weights.
        external_weights: inference ONNX with the weights in ``<name>.onnx.data`` (external data),
            converted without freezing them (see :func:`graphir.tools.zoo_convert.build_infer_onnx_external`).
    """

    name: str
    model: str
    mode: str
    batch: int
    config: tuple[tuple[str, Any], ...] = ()
    note: str = ""
    exclusive: bool = False
    external_weights: bool = False

    @property
    def suffix(self) -> str:
        """File suffix of the built entry."""
        return ".onnx" if self.mode == "infer" else ".pb"

    def path(self, directory: Path | None = None) -> Path:
        """The built file."""
        return (directory or zoo_dir()) / f"{self.name}{self.suffix}"

    def files(self, directory: Path | None = None) -> list[Path]:
        """Every file of the built entry: the model, and its external data file when it has one."""
        path = self.path(directory)
        return [path, path.with_name(path.name + ".data")] if self.external_weights else [path]


_TRANSFORMER = (("layers", 16), ("d_model", 1024), ("heads", 16), ("d_ff", 2048), ("vocab", 32000), ("seq", 64))
_BERT_LARGE = (("layers", 24), ("d_model", 1024), ("heads", 16), ("d_ff", 4096), ("vocab", 30522), ("seq", 128))
_GPT = (("layers", 12), ("d_model", 768), ("heads", 12), ("d_ff", 3072), ("vocab", 50257), ("seq", 256))
_LSTM = (("layers", 4), ("units", 2048), ("vocab", 32000), ("seq", 24))

_SPECS: list[tuple[str, int, tuple[tuple[str, Any], ...], str]] = [
    ("inception_v3", 512, (), "Celeritas: batch 512"),
    ("resnet50", 128, (), "Pesto/FastT range"),
    ("vgg19", 128, (), "Pesto/FastT range"),
    ("nasnet_mobile", 128, (), "Pesto/FastT range"),
    ("nasnet_large", 32, (), "Pesto/FastT range"),
    (
        "transformer",
        256,
        _TRANSFORMER,
        "Celeritas (16+16 layers to reach its graph size), 16 heads, 2048 hidden, batch 256",
    ),
    ("bert_large", 32, _BERT_LARGE, "BERT-large: 24 layers, 1024 hidden, 16 heads, seq 128"),
    ("gpt", 32, _GPT, "GPT-2 small: 12 layers, 768 hidden, seq 256"),
]

EXTERNAL_WEIGHT_MODELS = frozenset({"transformer", "bert_large", "gpt", "vgg19"})
"""Models whose inference ONNX keeps its weights as external data (over 500 MB of weights each)."""

ENTRIES: dict[str, Entry] = {}
for _model, _batch, _config, _note in _SPECS:
    for _mode in ("infer", "train"):
        _external = _model in EXTERNAL_WEIGHT_MODELS and _mode == "infer"
        ENTRIES[f"{_model}_{_mode}"] = Entry(
            f"{_model}_{_mode}", _model, _mode, _batch, _config, _note, external_weights=_external
        )
ENTRIES["lstm_train"] = Entry("lstm_train", "lstm", "train", 512, _LSTM, "Celeritas NMT: 4 LSTM layers, 2048 units")
_RNN_SEQ = (("layers", 4), ("units", 512), ("vocab", 8000), ("seq", 32))
ENTRIES["lstm_seq_infer"] = Entry(
    "lstm_seq_infer",
    "lstm_seq",
    "infer",
    32,
    _RNN_SEQ,
    "LSTM language model: 4 ONNX LSTM layers of 512 units (tf2onnx)",
)
ENTRIES["gru_seq_infer"] = Entry(
    "gru_seq_infer", "gru_seq", "infer", 32, _RNN_SEQ, "GRU sequence model: 4 Keras GRU layers, exported as ONNX Loops"
)
ENTRIES["gru_lm_infer"] = Entry(
    "gru_lm_infer",
    "gru_lm",
    "infer",
    32,
    _RNN_SEQ,
    "GRU language model: gru_seq's Keras weights as 4 ONNX GRU ops (linear_before_reset=1; onnx.helper)",
)
ENTRIES["resnet200_train"] = Entry(
    "resnet200_train", "resnet200", "train", 32, (), "FastT Table 1: TF-slim resnet_v2_200 (3, 24, 36, 3), batch 32"
)
