"""An Efficient Conformer model (``encoder: efficientConformer``) through the exporters: the
TorchScript archive equals eager asrkit (every decoding mode; for the causal model also the
WeNet-runtime ``forward_encoder_chunk`` driven chunk by chunk, against eager
``forward_chunk_by_chunk``); the offline ONNX export passes its own check against eager; the
streaming ONNX export is refused in one line (after a strided block the later blocks run at a
lower frame rate with smaller kernels, which sherpa-onnx's one cache shape for every block cannot
hold) -- CTC and transducer layouts."""
from __future__ import annotations

import pytest
import torch

from asrkit.config import TrainConfig
from asrkit.export import check_against_eager, script_model
from asrkit.export.onnx import export_onnx, metadata
from asrkit.export.onnx_transducer import streaming_geometry
from asrkit.models import build_model
from asrkit.schema import build
from asrkit.text.vocabulary import Vocabulary

pytestmark = pytest.mark.usefixtures("one_thread")

UNITS = ["<blank>", "<unk>"] + [chr(ord("a") + i) for i in range(9)] + ["<sos/eos>"]
FBANK = dict(sample_rate=16000, num_mel_bins=80, frame_length=25.0, frame_shift=10.0)


def tiny_efficient_conformer(causal: bool):
    torch.manual_seed(0)
    cfg = build(TrainConfig, {"encoder": "efficientConformer", "encoder_conf": {
        "output_size": 16, "attention_heads": 2, "linear_units": 16, "num_blocks": 3, "cnn_module_kernel": 5 if causal
        else 7, "causal": causal, "use_dynamic_chunk": causal, "input_layer": "conv2d" if causal else "conv2d2",
        "efficient_conf": {"stride_layer_idx": [1], "stride": [2], "group_layer_idx": [1, 2], "group_size": 2}},
        "decoder_conf": {"attention_heads": 2, "num_blocks": 1, "linear_units": 16}})
    return build_model(cfg, 80, Vocabulary.of_size(len(UNITS))).eval()


def features(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(len(lengths), max(lengths), 80, generator=g)
    for b, n in enumerate(lengths):
        x[b, n:] = 0.0
    return x, torch.tensor(lengths)


def test_torchscript_archive_equals_eager():
    model = tiny_efficient_conformer(causal=True)
    scripted = script_model(model, UNITS, **FBANK)
    x, lengths = features([120, 87])
    assert check_against_eager(model, scripted, x, lengths)["max_abs_diff"] <= 1e-5
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
    summary = export_onnx(tiny_efficient_conformer(causal=False), UNITS, tmp_path / "offline", num_mel_bins=80,
                          int8=False)
    assert summary["max_abs_diff"]["model.onnx"] <= 1e-4
    model = tiny_efficient_conformer(causal=True)
    refused = "streaming ONNX export of encoder efficientConformer is not implemented"
    with pytest.raises(ValueError, match=refused):
        export_onnx(model, UNITS, tmp_path / "streaming", num_mel_bins=80, streaming=True, int8=False)
    assert not list((tmp_path / "streaming").iterdir())  # refused before anything is written
    assert metadata(model, streaming=False)["subsampling_factor"] == "4"
    with pytest.raises(ValueError, match=refused):
        streaming_geometry(model, 16, 4)
