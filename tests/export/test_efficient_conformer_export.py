"""An Efficient Conformer model (``encoder: efficientConformer``) through the exporters: the
TorchScript archive equals eager asrkit (every decoding mode; for the causal model also the
WeNet-runtime ``forward_encoder_chunk`` driven chunk by chunk, against eager
``forward_chunk_by_chunk``); the offline ONNX export passes its own check against eager; the
streaming ONNX export is refused in one line (after a strided block the later blocks run at a
lower frame rate with smaller kernels, which sherpa-onnx's one cache shape for every block cannot
hold) -- CTC and transducer layouts."""
from __future__ import annotations

import pytest

from asrkit.export.onnx import metadata
from asrkit.export.onnx_transducer import streaming_geometry
from tests.export.encoder_export_checks import check_onnx_offline_only, check_torchscript, tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_efficient_conformer(causal: bool):
    return tiny_model("efficientConformer", {
        "output_size": 16, "attention_heads": 2, "linear_units": 16, "num_blocks": 3, "cnn_module_kernel": 5 if causal
        else 7, "causal": causal, "use_dynamic_chunk": causal, "input_layer": "conv2d" if causal else "conv2d2",
        "efficient_conf": {"stride_layer_idx": [1], "stride": [2], "group_layer_idx": [1, 2], "group_size": 2}})


def test_torchscript_archive_equals_eager():
    check_torchscript(tiny_efficient_conformer(causal=True), streaming=True)


def test_offline_onnx_export_checks_and_streaming_is_refused(tmp_path):
    model = tiny_efficient_conformer(causal=True)
    check_onnx_offline_only(tiny_efficient_conformer(causal=False), model, "efficientConformer", tmp_path)
    assert metadata(model, streaming=False)["subsampling_factor"] == "4"
    with pytest.raises(ValueError, match="streaming ONNX export of encoder efficientConformer is not implemented"):
        streaming_geometry(model, 16, 4)
