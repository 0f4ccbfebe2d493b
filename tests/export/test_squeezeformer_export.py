"""A Squeezeformer model (``encoder: squeezeformer``) through the exporters: the TorchScript
archive equals eager asrkit (every decoding mode; for the streaming model also the WeNet-runtime
``forward_encoder_chunk`` driven chunk by chunk, against eager ``forward_chunk_by_chunk``);
the offline ONNX export passes its own check against eager; the streaming ONNX export is
refused in one line (its time reduction runs blocks at different frame rates, which
sherpa-onnx's one cache shape for every block cannot hold) -- CTC and transducer layouts."""
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


def tiny_squeezeformer(reduction: str):
    torch.manual_seed(0)
    streaming = reduction == "stream"
    cfg = build(TrainConfig, {"encoder": "squeezeformer", "encoder_conf": {
        "encoder_dim": 16, "output_size": 16, "attention_heads": 2, "num_blocks": 3, "reduce_idx": 1,
        "recover_idx": 2, "feed_forward_expansion_factor": 2, "cnn_module_kernel": 3,
        "time_reduction_layer_type": reduction, "causal": streaming, "use_dynamic_chunk": streaming,
        "do_rel_shift": not streaming},
        "decoder_conf": {"attention_heads": 2, "num_blocks": 1, "linear_units": 16}})
    return build_model(cfg, 80, Vocabulary.of_size(len(UNITS))).eval()


def features(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(len(lengths), max(lengths), 80, generator=g)
    for b, n in enumerate(lengths):
        x[b, n:] = 0.0
    return x, torch.tensor(lengths)


def test_torchscript_archive_equals_eager():
    model = tiny_squeezeformer("stream")
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
    summary = export_onnx(tiny_squeezeformer("conv2d"), UNITS, tmp_path / "offline", num_mel_bins=80, int8=False)
    assert summary["max_abs_diff"]["model.onnx"] <= 1e-4
    model = tiny_squeezeformer("stream")
    refused = "streaming ONNX export of encoder squeezeformer is not implemented"
    with pytest.raises(ValueError, match=refused):
        export_onnx(model, UNITS, tmp_path / "streaming", num_mel_bins=80, streaming=True, int8=False)
    assert not list((tmp_path / "streaming").iterdir())  # refused before anything is written
    assert metadata(model, streaming=False)["subsampling_factor"] == "4"
    with pytest.raises(ValueError, match=refused):
        streaming_geometry(model, 16, 4)
