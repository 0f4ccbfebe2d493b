"""Shared checks of the exporter tests of the WeNet encoders without a streaming ONNX export
(e_branchformer, squeezeformer, efficientConformer): the TorchScript archive against eager asrkit,
the WeNet-runtime ``forward_encoder_chunk`` driven chunk by chunk against eager
``forward_chunk_by_chunk``, and the offline ONNX export with the streaming one refused."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from asrkit.config import TrainConfig
from asrkit.export import check_against_eager, script_model
from asrkit.export.onnx import export_onnx
from asrkit.models import build_model
from asrkit.schema import build
from asrkit.text.vocabulary import Vocabulary

UNITS = ["<blank>", "<unk>"] + [chr(ord("a") + i) for i in range(9)] + ["<sos/eos>"]
FBANK = dict(sample_rate=16000, num_mel_bins=80, frame_length=25.0, frame_shift=10.0)


def tiny_model(encoder: str, encoder_conf: dict):
    """An eval-mode model of ``encoder`` (80 mel bins, :data:`UNITS`, a one-block decoder of 16)."""
    torch.manual_seed(0)
    cfg = build(TrainConfig, {"encoder": encoder, "encoder_conf": encoder_conf,
                              "decoder_conf": {"attention_heads": 2, "num_blocks": 1, "linear_units": 16}})
    return build_model(cfg, 80, Vocabulary.of_size(len(UNITS))).eval()


def features(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(len(lengths), max(lengths), 80, generator=g)
    for b, n in enumerate(lengths):
        x[b, n:] = 0.0
    return x, torch.tensor(lengths)


def check_torchscript(model, streaming: bool) -> None:
    """The archive equals eager (every decoding mode, 1e-5); ``streaming``: also its
    ``forward_encoder_chunk`` run chunk by chunk (4 frames, one left chunk) equals eager
    ``forward_chunk_by_chunk``."""
    scripted = script_model(model, UNITS, **FBANK)
    x, lengths = features([120, 87])
    assert check_against_eager(model, scripted, x, lengths)["max_abs_diff"] <= 1e-5
    if not streaming:
        return
    chunk, left = 4, 1
    rate, context = scripted.subsampling_rate(), scripted.right_context() + 1
    att_cache, cnn_cache = torch.zeros(0, 0, 0, 0), torch.zeros(0, 0, 0, 0)
    outputs, offset = [], 0
    with torch.no_grad():
        for start in range(0, 120 - context + 1, chunk * rate):
            xs = x[:1, start:min(start + (chunk - 1) * rate + context, 120)]
            y, att_cache, cnn_cache = scripted.forward_encoder_chunk(xs, offset, chunk * left, att_cache, cnn_cache)
            outputs.append(y)
            offset += y.size(1)
        want, _ = model.encoder.forward_chunk_by_chunk(x[:1], chunk, left)
    torch.testing.assert_close(torch.cat(outputs, dim=1), want, atol=1e-5, rtol=0)


def check_onnx_offline_only(offline, streaming, encoder: str, tmp_path: Path) -> None:
    """The offline ONNX export of model ``offline`` passes its check against eager (1e-4); the
    streaming export of model ``streaming`` is refused before anything is written."""
    summary = export_onnx(offline, UNITS, tmp_path / "offline", num_mel_bins=80, int8=False)
    assert summary["max_abs_diff"]["model.onnx"] <= 1e-4
    with pytest.raises(ValueError, match=f"streaming ONNX export of encoder {encoder} is not implemented"):
        export_onnx(streaming, UNITS, tmp_path / "streaming", num_mel_bins=80, streaming=True, int8=False)
    assert not list((tmp_path / "streaming").iterdir())  # refused before anything is written
