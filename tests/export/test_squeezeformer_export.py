"""A Squeezeformer model (``encoder: squeezeformer``) through the exporters: the TorchScript
archive equals eager asrkit (every decoding mode; for the streaming model also the WeNet-runtime
``forward_encoder_chunk`` driven chunk by chunk, against eager ``forward_chunk_by_chunk``);
the offline ONNX export passes its own check against eager; the streaming ONNX export is
refused in one line (its time reduction runs blocks at different frame rates, which
sherpa-onnx's one cache shape for every block cannot hold) -- CTC and transducer layouts."""
from __future__ import annotations

import pytest

from asrkit.export.onnx import metadata
from asrkit.export.onnx_transducer import streaming_geometry
from tests.export.encoder_export_checks import check_onnx_offline_only, check_torchscript, tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_squeezeformer(reduction: str):
    streaming = reduction == "stream"
    return tiny_model("squeezeformer", {
        "encoder_dim": 16, "output_size": 16, "attention_heads": 2, "num_blocks": 3, "reduce_idx": 1,
        "recover_idx": 2, "feed_forward_expansion_factor": 2, "cnn_module_kernel": 3,
        "time_reduction_layer_type": reduction, "causal": streaming, "use_dynamic_chunk": streaming,
        "do_rel_shift": not streaming})


def test_torchscript_archive_equals_eager():
    check_torchscript(tiny_squeezeformer("stream"), streaming=True)


def test_offline_onnx_export_checks_and_streaming_is_refused(tmp_path):
    model = tiny_squeezeformer("stream")
    check_onnx_offline_only(tiny_squeezeformer("conv2d"), model, "squeezeformer", tmp_path)
    assert metadata(model, streaming=False)["subsampling_factor"] == "4"
    with pytest.raises(ValueError, match="streaming ONNX export of encoder squeezeformer is not implemented"):
        streaming_geometry(model, 16, 4)
