"""An E-Branchformer model (``encoder: e_branchformer``) through the exporters: the TorchScript
archive equals eager asrkit (every decoding mode; for a causal model also the WeNet-runtime
``forward_encoder_chunk`` driven chunk by chunk, against eager ``forward_chunk_by_chunk``);
the offline ONNX export passes its own check against eager; the streaming ONNX export is
refused in one line (``tests/export/test_onnx.py`` checks that refusal for both layouts)."""
from __future__ import annotations

import pytest
import torch

from asrkit.config import TrainConfig
from asrkit.export import check_against_eager, script_model
from asrkit.export.onnx import export_onnx
from asrkit.models import build_model
from asrkit.schema import build
from asrkit.text.vocabulary import Vocabulary

pytestmark = pytest.mark.usefixtures("one_thread")

UNITS = ["<blank>", "<unk>"] + [chr(ord("a") + i) for i in range(9)] + ["<sos/eos>"]
FBANK = dict(sample_rate=16000, num_mel_bins=80, frame_length=25.0, frame_shift=10.0)


def tiny_e_branchformer(causal: bool):
    torch.manual_seed(0)
    cfg = build(TrainConfig, {"encoder": "e_branchformer", "encoder_conf": {
        "output_size": 16, "attention_heads": 2, "linear_units": 24, "cgmlp_linear_units": 16, "cgmlp_conv_kernel": 3,
        "num_blocks": 2, "causal": causal, "use_dynamic_chunk": causal},
        "decoder_conf": {"attention_heads": 2, "num_blocks": 1, "linear_units": 16}})
    return build_model(cfg, 80, Vocabulary.of_size(len(UNITS))).eval()


def features(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(len(lengths), max(lengths), 80, generator=g)
    for b, n in enumerate(lengths):
        x[b, n:] = 0.0
    return x, torch.tensor(lengths)


@pytest.mark.parametrize("causal", [False, True])
def test_torchscript_archive_equals_eager(causal):
    model = tiny_e_branchformer(causal)
    scripted = script_model(model, UNITS, **FBANK)
    x, lengths = features([120, 87])
    assert check_against_eager(model, scripted, x, lengths)["max_abs_diff"] <= 1e-5
    if not causal:
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


def test_offline_onnx_export_checks_and_streaming_is_refused(tmp_path):
    model = tiny_e_branchformer(True)
    summary = export_onnx(model, UNITS, tmp_path / "offline", num_mel_bins=80, int8=False)
    assert summary["max_abs_diff"]["model.onnx"] <= 1e-4
    with pytest.raises(ValueError, match="streaming ONNX export of encoder e_branchformer is not implemented"):
        export_onnx(model, UNITS, tmp_path / "streaming", num_mel_bins=80, streaming=True, int8=False)
    assert not list((tmp_path / "streaming").iterdir())  # refused before anything is written
